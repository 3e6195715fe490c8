"""The apply worker against the live reference order system: outcomes by error class."""

from __future__ import annotations

import pytest
from django.core import mail

from approvals.models import Operation
from cases.models import Attempt, CaseEvent
from reconciliation.apply import apply_case

pytestmark = pytest.mark.order_system


def _applied_ops(order_system, order_id="ORD-7731"):
    return [op for op in order_system.state(order_id)["operations"]]


def test_approved_case_is_applied_notified_and_closed(approved_case, live_orders):
    case = approved_case()

    assert apply_case(case_id=case.pk) == "done"

    case.refresh_from_db()
    assert case.status == "done"
    operation = Operation.objects.get(case=case)
    assert operation.key == f"DATE-{case.number}-1"
    assert operation.confirmed_at is not None
    assert operation.notified_at is not None
    state = live_orders.state("ORD-7731")
    assert state["order"]["delivery_date"] == case.change["delivery_date"]
    assert operation.result_order_version == state["order"]["version"] == 2
    assert len(_applied_ops(live_orders)) == 1
    attempt = Attempt.objects.get(case=case)
    assert (attempt.reference, attempt.state) == (f"{case.reference}-a1", "succeeded")
    assert len(mail.outbox) == 1
    assert "ORD-7731" in mail.outbox[0].subject
    assert case.retention_until is not None


def test_running_the_task_twice_makes_one_attempt(approved_case, live_orders):
    case = approved_case()

    assert apply_case(case_id=case.pk) == "done"
    assert apply_case(case_id=case.pk).startswith("refused")

    assert Attempt.objects.filter(case=case).count() == 1
    assert len(_applied_ops(live_orders)) == 1


def test_dropped_response_after_commit_holds_with_effect_unknown(approved_case, live_orders):
    case = approved_case()
    live_orders.set_fault("drop_after_commit", path_prefix="/orders/")

    assert apply_case(case_id=case.pk) == "effect_unknown"

    case.refresh_from_db()
    assert case.status == "held"
    assert case.waiting_on == "owner"
    assert case.next_check_at is not None
    assert Attempt.objects.get(case=case).state == "effect_unknown"
    # The change did happen, exactly once; Holdfast does not pretend to know.
    assert len(_applied_ops(live_orders)) == 1
    assert Operation.objects.get(case=case).confirmed_at is None
    assert apply_case(case_id=case.pk).startswith("refused")
    assert len(_applied_ops(live_orders)) == 1


def test_unavailable_order_system_retries_with_growing_delays_then_needs_attention(
    approved_case, live_orders, settings
):
    settings.ATTEMPT_LIMIT = 3
    settings.RETRY_JITTER = 0
    case = approved_case()
    live_orders.set_fault("fail_before_commit", path_prefix="/orders/", times=None)
    delays = []

    for _ in range(3):
        outcome = apply_case(case_id=case.pk)
        assert outcome == "transient"
        case.refresh_from_db()
        last = CaseEvent.objects.filter(case=case).last()
        delays.append((case.next_check_at - last.created_at).total_seconds())

    assert case.status == "needs_attention"
    assert "unavailable" in case.last_error
    assert case.next_check_at is not None  # the next permitted check is named
    assert "Confirmed steps: none" in last.reason
    assert delays[0] < delays[1]  # 5 s then 10 s: growing, bounded
    assert Attempt.objects.filter(case=case).count() == 3
    assert _applied_ops(live_orders) == []


def test_failed_notification_is_retried_without_a_second_apply(
    approved_case, live_orders, settings
):
    settings.EMAIL_BACKEND = "tests.support.failing_mail.FailingBackend"
    case = approved_case()

    assert apply_case(case_id=case.pk) == "transient"
    case.refresh_from_db()
    assert case.status == "ready"
    assert Operation.objects.get(case=case).confirmed_at is not None

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    assert apply_case(case_id=case.pk) == "done"

    assert len(_applied_ops(live_orders)) == 1
    attempts = list(Attempt.objects.filter(case=case).order_by("sequence"))
    assert [a.state for a in attempts] == ["failed", "succeeded"]
    assert attempts[1].submitted_at is None  # the resumed attempt never sent the change
    assert len(mail.outbox) == 1


def test_version_conflict_invalidates_the_proposal(approved_case, live_orders):
    case = approved_case()
    live_orders.seed(
        orders=[
            {
                "order_id": "ORD-7731",
                "account_id": "ACC-100",
                "delivery_date": "2030-01-01",
                "version": 7,
            }
        ]
    )

    assert apply_case(case_id=case.pk) == "source_changed"

    case.refresh_from_db()
    assert case.status == "waiting_source"
    assert case.proposals.get().status == "invalidated"
    assert _applied_ops(live_orders) == []


def test_revoked_access_at_the_receiver_stops_and_tells_the_owner(approved_case, live_orders):
    case = approved_case()
    live_orders.set_access("ACC-100", False)

    assert apply_case(case_id=case.pk) == "needs_attention"

    case.refresh_from_db()
    assert case.status == "needs_attention"
    assert case.waiting_on == "owner"
    assert "permission_revoked" in case.last_error


def test_a_refused_credential_needs_a_person_and_is_not_held_as_unknown(
    approved_case, live_orders, settings
):
    """The order system answers ``401 unauthorized`` before it reads the request: nothing was
    applied. The case says so and waits on its owner (a held case would be "reconciled" by a
    fence and a lookup that the same credential cannot make either)."""
    case = approved_case()
    settings.ORDER_SYSTEM_TOKEN = "rotated-" * 5  # the order system's was changed

    assert apply_case(case_id=case.pk) == "needs_attention"

    case.refresh_from_db()
    assert (case.status, case.waiting_on) == ("needs_attention", "owner")
    assert "unauthorized" in case.last_error
    assert _applied_ops(live_orders) == []
    assert live_orders.state("ORD-7731")["order"]["version"] == 1
    attempt = Attempt.objects.get(case=case)
    assert attempt.state == "failed"
    assert not CaseEvent.objects.filter(case=case, to_status="held").exists()
    escalated = CaseEvent.objects.get(case=case, to_status="needs_attention")
    assert escalated.reason.startswith(
        f"The order system refused DATE-{case.number}-1: unauthorized: Send Authorization: "
        "Bearer <ORDERS_API_TOKEN>. Repeating it"
    ), escalated.reason


def test_claim_is_refused_when_the_order_system_is_not_autonomous(live_orders, make_case, approver):
    from approvals.models import Proposal
    from approvals.services import proposal_approve
    from reconciliation.sources import source_check
    from reconciliation.tasks import prepare_proposal

    case = make_case()
    source_check(case_id=case.pk)
    prepare_proposal(case.pk)
    proposal_approve(proposal=Proposal.objects.get(case=case), actor=approver)

    assert apply_case(case_id=case.pk) == "refused: not_autonomous"

    case.refresh_from_db()
    assert case.status == "ready"
    assert case.waiting_on == "owner"
    assert _applied_ops(live_orders) == []
