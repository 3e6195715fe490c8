"""The apply worker against the live reference order system under faults the happy-path suite
(test_apply_flow.py) does not inject: a late reply, a stale fencing token, an approval that
expires on the way, a Retry-After, and django-q2 delivering the same task twice."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from django_q.models import Success
from django_q.signals import post_execute
from django_q.tasks import async_task

from approvals.models import Approval, Operation, Proposal
from approvals.services import proposal_approve
from cases.fencing import next_fencing_token
from cases.kernel import Worker
from cases.models import Attempt, CaseEvent, Status, WaitingOn
from reconciliation.apply import apply_case, run_attempt
from reconciliation.claims import case_claim
from reconciliation.client import OrderSystemClient
from reconciliation.sources import source_check
from reconciliation.tasks import prepare_proposal

pytestmark = pytest.mark.order_system

ORDER = "ORD-7731"
OPERATIONS = f"/orders/{ORDER}/operations"
WORKER = Worker("worker:test:1")


def test_reply_later_than_the_read_timeout_holds_with_effect_unknown_and_one_change(
    approved_case, live_orders, settings
):
    settings.ORDER_SYSTEM_TIMEOUTS = {**settings.ORDER_SYSTEM_TIMEOUTS, "read": 1.0}
    case = approved_case()
    live_orders.set_fault("delay_after_commit", seconds=2.0, path_prefix=OPERATIONS)

    assert apply_case(case_id=case.pk) == "effect_unknown"

    case.refresh_from_db()
    assert case.status == Status.HELD
    assert case.waiting_on == WaitingOn.OWNER
    assert case.next_check_at is not None
    assert "no_answer" in case.last_error
    attempt = Attempt.objects.get(case=case)
    assert attempt.state == Attempt.State.EFFECT_UNKNOWN
    assert attempt.submitted_at is not None
    assert Operation.objects.get(case=case).confirmed_at is None
    # The order system did apply it, exactly once; a second task run sends nothing more.
    operations = live_orders.state(ORDER)["operations"]
    assert [op["operation_key"] for op in operations] == [attempt.operation.key]
    assert apply_case(case_id=case.pk) == "refused: not_ready"
    assert len(live_orders.state(ORDER)["operations"]) == 1


def test_stale_fencing_token_holds_the_case_because_another_owner_exists(
    approved_case, live_orders
):
    case = approved_case()
    before = live_orders.state(ORDER)
    attempt = case_claim(case_id=case.pk, worker=WORKER)
    with OrderSystemClient.from_settings() as client:
        newer = next_fencing_token()
        assert client.fence(ORDER, newer).min_token == newer > attempt.fencing_token

        assert run_attempt(attempt_id=attempt.pk, client=client, worker=WORKER) == "fenced"

    case.refresh_from_db()
    assert case.status == Status.HELD
    assert case.waiting_on == WaitingOn.OWNER
    assert "Another owner exists" in case.waiting_reason
    assert "stale_fencing_token" in case.last_error
    assert Attempt.objects.get(pk=attempt.pk).state == Attempt.State.FENCED
    held = CaseEvent.objects.get(case=case, to_status=Status.HELD)
    assert "another owner exists" in held.reason
    after = live_orders.state(ORDER)
    assert after["operations"] == []
    assert after["order"] == before["order"]  # same version, same date
    assert after["fence_token"] == newer


def test_approval_expiring_on_the_way_to_the_receiver_returns_the_case_to_review(
    live_orders, autonomous, make_case, approver
):
    """Holdfast's own check passes, then the request is slow; the receiver checks the signed
    expiry at apply time and refuses. The same proposal goes back for a fresh decision."""
    case = make_case()
    assert source_check(case_id=case.pk) == "checked"
    assert prepare_proposal(case.pk) == "submitted"
    proposal = Proposal.objects.get(case=case)
    approval = proposal_approve(
        proposal=proposal, actor=approver, expires_at=timezone.now() + dt.timedelta(seconds=2)
    )
    wait = (approval.expires_at - timezone.now()).total_seconds() + 0.5
    live_orders.set_fault("latency", seconds=wait, path_prefix=OPERATIONS)

    assert apply_case(case_id=case.pk) == "approval_expired"

    case.refresh_from_db()
    assert case.status == Status.AWAITING_REVIEW
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.AWAITING_REVIEW
    assert Approval.objects.get(pk=approval.pk).revoked_at is not None
    attempt = Attempt.objects.get(case=case)
    assert attempt.state == Attempt.State.FAILED
    assert "approval_expired" in attempt.last_error
    assert live_orders.state(ORDER)["operations"] == []
    assert apply_case(case_id=case.pk) == "refused: not_ready"


def test_retry_after_from_the_order_system_is_never_undercut(approved_case, live_orders):
    case = approved_case()
    live_orders.set_fault("fail_before_commit", retry_after=120, path_prefix=OPERATIONS)
    before = timezone.now()

    assert apply_case(case_id=case.pk) == "transient"

    case.refresh_from_db()
    assert case.status == Status.READY
    assert case.waiting_on == WaitingOn.ORDER_SYSTEM
    # The backoff alone would say about 5 s; the order system asked for 120.
    assert case.next_check_at >= before + dt.timedelta(seconds=120)
    assert case.next_check_at <= timezone.now() + dt.timedelta(seconds=121)
    assert case.retry_count == 1
    assert live_orders.state(ORDER)["operations"] == []


def test_django_q_delivering_the_apply_task_twice_makes_one_attempt_and_one_change(
    approved_case, live_orders
):
    case = approved_case()
    outcomes = {}

    def remember(sender, task, **kwargs):
        outcomes[task["id"]] = (task["success"], task["result"])

    post_execute.connect(remember, weak=False)
    try:
        first = async_task("reconciliation.tasks.apply_case", case.pk, sync=True)
        second = async_task("reconciliation.tasks.apply_case", case.pk, sync=True)
    finally:
        post_execute.disconnect(remember)

    assert outcomes == {first: (True, "done"), second: (True, "refused: not_ready")}
    assert Attempt.objects.filter(case=case).count() == 1
    assert len(live_orders.state(ORDER)["operations"]) == 1
    case.refresh_from_db()
    assert case.status == Status.DONE


def test_django_q_keeps_no_success_rows_of_apply_tasks(approved_case, live_orders):
    """config/settings.py sets ``save_limit=0`` meaning "keeps no success rows"; the success
    table would otherwise grow by one row per task run, forever."""
    case = approved_case()

    async_task("reconciliation.tasks.apply_case", case.pk, sync=True)

    assert Success.objects.count() == 0
