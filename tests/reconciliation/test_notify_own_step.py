"""The customer's notification is its own step after the apply's answer (seed 002: a failed or
interrupted notification resumes the notification, never the apply).

The cluster's apply task saves the answer and queues ``notify_case``; the notification is begun,
sent and confirmed there. Real processes on PostgreSQL, the reference order system and a real
SMTP server that counts what arrives:

- a worker SIGKILLed between the answer's commit and the notification (before it even queued
  the task): the attempt's lease runs out, the sweep sends the case back, and the customer is
  notified exactly once, with the order changed exactly once;
- a worker SIGKILLed while the mail server holds the customer's message, taken in full and
  not yet answered: the message may have gone, so it is never sent again; the case closes with
  the question for a person, and exactly one message arrived;
- run in process: the apply returns with the notification queued, and the task notifies and
  closes; a second run of the task notifies nobody again.
"""

from __future__ import annotations

import os
import signal

import pytest
from django.core import mail
from django.db import transaction

from approvals.models import Operation
from cases.kernel import lock_case
from cases.models import Attempt, Case, Status
from reconciliation.apply import apply_case, notify_case
from tests.support.lock_waits import Waiter
from tests.support.order_system import DEFAULT_GRANT_KEY
from tests.support.proc_worker import Proc, wait_for


def _env(live_orders, smtp, tmp_path, **extra: str) -> dict[str, str]:
    return {
        "ORDER_SYSTEM_URL": live_orders.base_url,
        "APPROVAL_GRANT_KEY": DEFAULT_GRANT_KEY,
        "HOLDFAST_STATE_DIR": str(tmp_path / "worker-state"),
        "APPLY_LEASE_SECONDS": "3",
        "APPLY_HEARTBEAT_SECONDS": "0.5",
        "NOTIFY_AS_OWN_TASK": "1",
        **smtp.env(),
        **extra,
    }


def _restart_until_done_told_once(case, key: str, live_orders, smtp, tmp_path) -> None:
    """A cluster started again takes the case to done once its lease ran out: the customer's
    message arrived once in all, and the order changed once."""
    with Proc("qcluster", env=_env(live_orders, smtp, tmp_path)) as second:
        wait_for(
            lambda: Case.objects.get(pk=case.pk).status == Status.DONE,
            timeout=90,
            what="the case done after the lease ran out",
        )
        output = second.output()
    arrived = [r for r in smtp.received if r.message["X-Holdfast-Notification-Key"] == key]
    assert len(arrived) == 1, (smtp.received, output[-3000:])
    assert len(live_orders.state(case.order_id)["operations"]) == 1


@pytest.mark.order_system
@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_between_the_answer_and_the_notification_notifies_exactly_once(
    approved_case, live_orders, smtp, tmp_path
):
    case = approved_case()  # approved: its apply task is queued
    key = f"{Operation.objects.get(case=case).key}:notify"
    drill = _env(
        live_orders, smtp, tmp_path, HOLDFAST_DRILL="1", HOLDFAST_DRILL_STOP_AT="after_confirm"
    )
    with Proc("qcluster", env=drill) as first:
        wait_for(
            lambda: "drill: stopping at after_confirm" in first.output(),
            timeout=90,
            what="the worker to stop after the answer",
        )
        assert first.process is not None
        os.killpg(first.process.pid, signal.SIGKILL)  # the whole cluster, the stopped worker too
        first.process.wait(timeout=10)
    operation = Operation.objects.get(case=case)
    assert operation.confirmed_at is not None
    assert operation.notified_at is None
    assert Case.objects.get(pk=case.pk).status == Status.APPLYING
    # The customer was not told before the kill. (The cluster may meanwhile have told the
    # approver that the proposal awaited them: another message, which raced the kill.)
    assert [r for r in smtp.received if r.message["X-Holdfast-Notification-Key"] == key] == []

    _restart_until_done_told_once(case, key, live_orders, smtp, tmp_path)
    states = list(Attempt.objects.filter(case=case).order_by("sequence").values_list("state"))
    assert states == [("lease_expired",), ("succeeded",)], states
    assert Operation.objects.get(case=case).notified_at is not None


@pytest.mark.order_system
@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_delivery_never_sends_the_customer_s_message_again(
    approved_case, live_orders, smtp, tmp_path
):
    case = approved_case()
    key = f"{Operation.objects.get(case=case).key}:notify"
    smtp.hold = lambda message: message["X-Holdfast-Notification-Key"] == key
    with Proc("qcluster", env=_env(live_orders, smtp, tmp_path)) as first:
        wait_for(smtp.holding.is_set, timeout=90, what="the customer's message at the server")
        assert first.process is not None
        os.killpg(first.process.pid, signal.SIGKILL)  # mid-delivery: DATA sent, no answer yet
        first.process.wait(timeout=10)
    smtp.release.set()
    assert Operation.objects.get(case=case).notified_at is None

    _restart_until_done_told_once(case, key, live_orders, smtp, tmp_path)
    done = Case.objects.get(pk=case.pk)
    assert "may already have gone" in done.outstanding_question
    assert Operation.objects.get(case=case).notified_at is None  # a person confirms it


@pytest.mark.order_system
def test_the_apply_queues_the_notification_and_its_task_notifies_once(
    approved_case, live_orders, django_capture_on_commit_callbacks
):
    case = approved_case()

    with django_capture_on_commit_callbacks(execute=False) as queued:
        outcome = apply_case(case_id=case.pk, notify_later=True)

    assert outcome == "applied: the customer's notification queued"
    assert len(queued) == 1
    case.refresh_from_db()
    assert case.status == Status.APPLYING
    assert mail.outbox == []
    assert len(live_orders.state(case.order_id)["operations"]) == 1

    assert notify_case(case_id=case.pk) == "done"
    assert notify_case(case_id=case.pk) == "nothing to notify"

    case.refresh_from_db()
    assert case.status == Status.DONE
    assert len(mail.outbox) == 1
    assert Attempt.objects.get(case=case).state == Attempt.State.SUCCEEDED


@pytest.mark.order_system
@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_second_notification_task_that_waited_for_the_first_asks_nobody_anything(
    approved_case, live_orders, django_capture_on_commit_callbacks
):
    """django-q2 delivers a task at least once: a second run of the notification read its
    attempt before the first confirmed the step, then waited for the case while the first
    notified and closed it. Before, it took the first's send for one that may have gone and
    left a question for a person on the done case ("may already have gone")."""
    case = approved_case()
    with django_capture_on_commit_callbacks(execute=False):
        apply_case(case_id=case.pk, notify_later=True)

    with transaction.atomic():
        lock_case(case.pk)
        second = Waiter(lambda found: found.update(outcome=notify_case(case_id=case.pk)))
        assert second.waits(), "the second run never waited for the case"
        first = notify_case(case_id=case.pk)

    found = second.join()
    assert (first, found) == ("done", {"outcome": "nothing to notify"})
    case.refresh_from_db()
    assert case.status == Status.DONE
    assert case.outstanding_question == ""
    assert len(mail.outbox) == 1
