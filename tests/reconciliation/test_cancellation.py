"""Cancellation that is never faked: a request is saved, and the evidence decides its outcome.

Before anything can have been sent, a cancellation cancels at once. Once a change may be at the
order system, the request is recorded and the case stays held until reconciliation proves the
change applied (the request "arrived after the change") or absent (the case is cancelled).
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from approvals.models import Approval, Operation, Proposal
from approvals.services import live_approval, proposal_approve
from cases.kernel import Worker
from cases.models import Attempt, CancellationRequest, CaseEvent, Status
from cases.services import case_cancel_request
from reconciliation.apply import apply_case
from reconciliation.claims import ClaimRefused, attempts_expire_leases, case_claim
from reconciliation.settle import case_propose_reversal, case_reconcile
from tests.support.fixtures import days_ahead

WORKER = Worker("worker:test:cancel")


def _operations(order_system, order_id="ORD-7731") -> list[dict]:
    return order_system.state(order_id)["operations"]


def _cancel_over_api(user, case) -> dict:
    client = APIClient()
    client.force_authenticate(user=user)
    response = client.post(
        f"/api/cases/{case.reference}/cancel/",
        {"reason": "The customer no longer wants the change"},
        format="json",
    )
    assert response.status_code == 200, response.content
    return response.json()


def _held_after_dropped_response(approved_case, live_orders):
    case = approved_case()
    live_orders.set_fault("drop_after_commit", path_prefix="/orders/")
    assert apply_case(case_id=case.pk) == "effect_unknown"
    case.refresh_from_db()
    assert case.status == Status.HELD
    return case


def _held_before_submit(case):
    """The worker claims the case and goes silent before sending: the watchdog holds it."""
    case_claim(case_id=case.pk, worker=WORKER)
    assert attempts_expire_leases(now=timezone.now() + dt.timedelta(hours=1)) == 1
    case.refresh_from_db()
    assert case.status == Status.HELD
    return case


def test_cancel_before_anything_was_sent_cancels_at_once(case, agent):
    assert case.status == Status.WAITING_SOURCE

    after = case_cancel_request(case=case, actor=agent, reason="Changed my mind", via="api")

    assert after.status == Status.CANCELLED
    request = CancellationRequest.objects.get(case=case)
    assert request.outcome == CancellationRequest.Outcome.CANCELLED
    assert request.via == "api"
    assert request.requested_by == agent
    assert request.settled_at is not None


@pytest.mark.order_system
def test_cancel_of_a_ready_case_over_the_api_cancels_at_once_and_blocks_the_claim(
    approved_case, live_orders, agent
):
    case = approved_case()

    body = _cancel_over_api(agent, case)

    assert body["status"] == "cancelled"
    request = CancellationRequest.objects.get(case=case)
    assert (request.outcome, request.via) == ("cancelled", "api")
    assert apply_case(case_id=case.pk).startswith("refused")
    assert Attempt.objects.filter(case=case).count() == 0
    assert _operations(live_orders) == []


@pytest.mark.order_system
def test_cancel_after_a_timeout_is_recorded_and_the_case_stays_held(
    approved_case, live_orders, agent
):
    case = _held_after_dropped_response(approved_case, live_orders)

    body = _cancel_over_api(agent, case)

    assert body["status"] == "held"  # never shown cancelled while the outcome is unknown
    case.refresh_from_db()
    assert case.status == Status.HELD
    request = CancellationRequest.objects.get(case=case)
    assert request.outcome == CancellationRequest.Outcome.PENDING
    assert request.via == "api"
    assert CaseEvent.objects.filter(case=case, action="cases.cancellation.requested").exists()
    assert not CaseEvent.objects.filter(case=case, to_status=Status.CANCELLED).exists()
    assert apply_case(case_id=case.pk).startswith("refused")
    assert len(_operations(live_orders)) == 1


@pytest.mark.order_system
def test_cancel_during_a_hold_when_the_change_was_applied_finishes_and_offers_a_reversal(
    approved_case, live_orders, agent
):
    case = _held_after_dropped_response(approved_case, live_orders)
    case_cancel_request(case=case, actor=agent, reason="Too late?", via="admin")

    assert case_reconcile(case_id=case.pk) == "applied"

    request = CancellationRequest.objects.get(case=case)
    assert request.outcome == CancellationRequest.Outcome.ARRIVED_AFTER_CHANGE
    case.refresh_from_db()
    assert "Cancellation arrived after the change" in case.outstanding_question
    assert apply_case(case_id=case.pk) == "done"
    case.refresh_from_db()
    assert case.status == Status.DONE
    assert len(_operations(live_orders)) == 1
    original = Operation.objects.get(case=case)

    proposal = case_propose_reversal(case=case, actor=agent, expected_version=case.version)

    # The original date, before the change.
    assert proposal.change == {"kind": "delivery_date", "delivery_date": str(days_ahead(3))}
    assert proposal.operation.key == f"DATE-{case.number}-2"
    assert proposal.operation_id != original.pk
    assert proposal.status == Proposal.Status.AWAITING_REVIEW
    assert not Approval.objects.filter(proposal=proposal).exists()
    case.refresh_from_db()
    assert case.status == Status.AWAITING_REVIEW  # it needs its own approval
    assert live_approval(case) is None
    assert apply_case(case_id=case.pk).startswith("refused")
    assert len(_operations(live_orders)) == 1


@pytest.mark.order_system
def test_cancel_during_a_hold_when_the_change_is_absent_settles_cancelled(
    approved_case, live_orders, agent
):
    case = _held_before_submit(approved_case())
    case_cancel_request(case=case, actor=agent, reason="Not needed any more", via="api")
    # The cancellation blocks any new apply under the old approval while the hold lasts.
    assert apply_case(case_id=case.pk).startswith("refused")
    with pytest.raises(ClaimRefused):
        case_claim(case_id=case.pk, worker=WORKER)

    assert case_reconcile(case_id=case.pk) == "cancelled"

    case.refresh_from_db()
    assert case.status == Status.CANCELLED
    request = CancellationRequest.objects.get(case=case)
    assert request.outcome == CancellationRequest.Outcome.CANCELLED
    proposal = Proposal.objects.get(case=case)
    assert proposal.status == Proposal.Status.WITHDRAWN
    assert proposal.approvals.get().revoked_at is not None
    state = live_orders.state("ORD-7731")
    assert state["operations"] == []
    assert state["order"]["version"] == 1
    assert state["order"]["delivery_date"] == str(days_ahead(3))


@pytest.mark.order_system
def test_approval_expiry_during_a_hold_returns_the_case_to_review_not_to_ready(
    live_orders, autonomous, make_case, approver
):
    from reconciliation.sources import source_check
    from reconciliation.tasks import prepare_proposal

    case = make_case()
    source_check(case_id=case.pk)
    prepare_proposal(case.pk)
    approval = proposal_approve(
        proposal=Proposal.objects.get(case=case),
        actor=approver,
        expires_at=timezone.now() + dt.timedelta(seconds=2),
    )
    case.refresh_from_db()
    case = _held_before_submit(case)
    time.sleep(max((approval.expires_at - timezone.now()).total_seconds(), 0) + 0.05)

    assert apply_case(case_id=case.pk).startswith("refused")
    assert case_reconcile(case_id=case.pk) == "back to review"

    case.refresh_from_db()
    assert case.status == Status.AWAITING_REVIEW
    approval.refresh_from_db()
    assert approval.revoked_at is not None
    assert live_approval(case) is None
    assert Proposal.objects.get(case=case).status == Proposal.Status.AWAITING_REVIEW
    assert apply_case(case_id=case.pk) == "refused: not_ready"
    assert _operations(live_orders) == []


@pytest.mark.order_system
def test_a_case_held_before_anyone_approved_it_goes_back_to_review_without_an_expiry(
    live_orders, autonomous, make_case
):
    """A restore's recovery holds a case awaiting review; proven absent, its timeline and its
    page said "The approval expired during the hold" of a proposal nobody had approved."""
    from django.db import transaction

    from cases.case_story import event_sentence
    from cases.kernel import apply_transition, lock_case
    from reconciliation.sources import source_check
    from reconciliation.tasks import prepare_proposal

    case = make_case()
    source_check(case_id=case.pk)
    prepare_proposal(case.pk)
    with transaction.atomic():
        apply_transition(lock_case(case.pk), "hold_for_recovery", actor=WORKER, reason="restored")

    assert case_reconcile(case_id=case.pk) == "back to review"

    case.refresh_from_db()
    assert case.status == Status.AWAITING_REVIEW
    assert case.waiting_reason == "Back from a hold: the proposal awaits a decision"
    back = CaseEvent.objects.filter(case=case, to_status=Status.AWAITING_REVIEW).latest("pk")
    assert "expired" not in back.reason
    assert "It had not been approved yet" in back.reason
    assert event_sentence(back).text == (
        "Back to its approvers after the hold: it had not been approved yet"
    )
    assert Proposal.objects.get(case=case).status == Proposal.Status.AWAITING_REVIEW
