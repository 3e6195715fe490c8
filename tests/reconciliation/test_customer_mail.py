"""The customer's notification through a real SMTP server (``tests/support/smtp.py``).

A worker keeps one SMTP session for its notifications without asking it anything between
them; a session that failed before a message's DATA took nothing of it, so the message goes
over a new one; a message the server refused is sent again later, once; a message whose
answer never came may have gone and is never sent again: the case asks a person instead.
"""

from __future__ import annotations

import socket

import pytest
from django.utils import timezone

from approvals.models import Operation
from cases.models import Attempt, CaseEvent, Status, WaitingOn
from reconciliation import customer_mail
from reconciliation.apply import apply_case

pytestmark = pytest.mark.order_system


@pytest.fixture(autouse=True)
def _no_kept_session():
    customer_mail._drop()
    yield
    customer_mail._drop()


def _actions(case) -> list[str]:
    return list(CaseEvent.objects.filter(case=case).order_by("id").values_list("action", flat=True))


def test_one_session_tells_one_customer_after_another(smtp, approved_case):
    first = approved_case()
    assert apply_case(case_id=first.pk) == "done"
    second = approved_case()
    assert apply_case(case_id=second.pk) == "done"

    told = smtp.wait_for(2, timeout=5)
    assert [m.message["X-Holdfast-Notification-Key"] for m in told] == [
        f"{Operation.objects.get(case=first).key}:notify",
        f"{Operation.objects.get(case=second).key}:notify",
    ]
    # Both went over one SMTP session: no connect, greeting and QUIT per message, and no NOOP
    # before each (one more round trip a message).
    assert told[0].session == told[1].session
    assert smtp.noops == 0


def test_a_session_the_server_dropped_is_opened_again_before_the_message_goes(smtp, approved_case):
    first = approved_case()
    assert apply_case(case_id=first.pk) == "done"
    # The kept session dies between two messages (a server restart, an idle timeout).
    customer_mail._kept.backend.connection.sock.shutdown(socket.SHUT_RDWR)

    second = approved_case()
    assert apply_case(case_id=second.pk) == "done"
    told = smtp.wait_for(2, timeout=5)
    assert len(told) == 2
    assert told[0].session != told[1].session
    second.refresh_from_db()
    # Nothing uncertain: the dead session failed before the message's DATA began.
    assert second.outstanding_question == ""
    assert "cases.notification.may_have_gone" not in _actions(second)


def test_a_session_the_server_closes_with_421_at_the_next_message_is_opened_again_at_once(
    smtp, approved_case
):
    """After an idle timeout a server answers the next command with 421 and closes: nothing of
    the message was taken, so it goes at once over a new session, not after a backoff."""
    first = approved_case()
    assert apply_case(case_id=first.pk) == "done"
    smtp.close_at_sender = 1

    second = approved_case()
    assert apply_case(case_id=second.pk) == "done"
    told = smtp.wait_for(2, timeout=5)
    assert told[0].session != told[1].session
    assert "cases.notification.failed" not in _actions(second)
    second.refresh_from_db()
    assert second.outstanding_question == ""


def test_a_session_dropped_before_the_message_s_data_took_nothing_and_it_goes_again_later(
    smtp, approved_case
):
    """The server drops the session, a new one too, as the message names its recipient: nothing
    of it was taken, so it is not sent, not "may have gone"; a worker sends it again later."""
    first = approved_case()
    assert apply_case(case_id=first.pk) == "done"  # a session is kept
    case = approved_case()
    smtp.drop_at_recipient = 2  # the kept session, then the new one
    assert apply_case(case_id=case.pk) != "done"
    case.refresh_from_db()
    assert case.status == Status.READY  # retried on the backoff, the change already applied
    assert "cases.notification.failed" in _actions(case)
    assert "cases.notification.may_have_gone" not in _actions(case)
    assert case.outstanding_question == ""

    type(case).objects.filter(pk=case.pk).update(next_check_at=timezone.now())
    assert apply_case(case_id=case.pk) == "done"
    told = smtp.wait_for(2, timeout=5)
    assert [m.message["X-Holdfast-Notification-Key"] for m in told] == [
        f"{Operation.objects.get(case=first).key}:notify",
        f"{Operation.objects.get(case=case).key}:notify",
    ]


def test_a_refused_message_is_sent_again_later_once(smtp, approved_case):
    case = approved_case()
    smtp.refuse_next = 1  # "451 Try again later" to the first message
    outcome = apply_case(case_id=case.pk)
    assert outcome != "done"
    assert smtp.refused == 1
    assert smtp.received == []
    case.refresh_from_db()
    assert case.status == Status.READY  # retried on the backoff, the change already applied
    assert "cases.notification.failed" in _actions(case)
    # The page says what happened: the change stands, a worker retries the rest. It said
    # "Nothing applied" and waited on the order system, which had applied the change.
    retried = CaseEvent.objects.filter(case=case).order_by("-id").first()
    assert retried.reason.startswith("The change is applied; the next step failed (")
    assert "Nothing applied" not in retried.reason
    assert case.waiting_on == WaitingOn.WORKER
    assert case.waiting_reason == "Applied; the remaining steps retry on a bounded backoff"

    type(case).objects.filter(pk=case.pk).update(next_check_at=timezone.now())
    assert apply_case(case_id=case.pk) == "done"
    [told] = smtp.wait_for(1, timeout=5)
    assert told.message["X-Holdfast-Notification-Key"].endswith(":notify")
    case.refresh_from_db()
    assert case.status == Status.DONE
    assert case.outstanding_question == ""


def test_a_message_whose_answer_never_came_is_not_sent_again(smtp, approved_case, settings):
    settings.EMAIL_TIMEOUT = 1
    case = approved_case()
    smtp.hold = lambda message: True  # taken in full; the server never answers in time
    assert apply_case(case_id=case.pk) == "done"
    assert smtp.holding.is_set()
    smtp.release.set()

    case.refresh_from_db()
    assert case.status == Status.DONE
    assert "may already have gone" in case.outstanding_question
    assert "never confirmed the send" in case.outstanding_question
    assert "cases.notification.may_have_gone" in _actions(case)
    attempt = Attempt.objects.get(case=case)
    assert attempt.last_confirmed_step == Attempt.Step.CLOSED
    assert attempt.operation.notified_at is None  # a person confirms it
    # Asked again, nothing more goes: one message reached the server.
    assert apply_case(case_id=case.pk) == "refused: not_ready"
    assert len(smtp.received) == 1
