"""A worker asked to stop before its write leaves acknowledges at once; expiry and cancellation
during a hold are recorded and shown at once.

"Worker stopped", "slot released" and the settled cancellation are facts the case shows as
soon as the worker stops -- not when a watchdog's lease expiry notices it later.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from approvals.models import Approval, Proposal
from approvals.services import approvals_expire_due, live_approval
from cases.append_only import maintenance
from cases.codes import Action
from cases.models import Attempt, CancellationRequest, CaseEvent, Status
from cases.next_action import describe_next_action
from cases.services import case_cancel_request
from reconciliation import apply as apply_module
from reconciliation.apply import apply_case
from reconciliation.revocation import case_revoke

pytestmark = pytest.mark.order_system

ORDER = "ORD-7731"


def _actions(case) -> list[str]:
    return list(CaseEvent.objects.filter(case=case).order_by("id").values_list("action", flat=True))


def _stop_during_the_claim(monkeypatch, stop) -> None:
    """``stop()`` runs after the claim, just before the apply step marks the send and sends."""
    _at(monkeypatch, "after_claim", stop)


def _at(monkeypatch, point: str, action) -> None:
    """Run ``action()`` when the apply reaches the named point (``apply.STEP_POINT_OBSERVERS``)."""

    def observer(name: str) -> None:
        if name == point:
            action()

    monkeypatch.setattr(
        apply_module, "STEP_POINT_OBSERVERS", [*apply_module.STEP_POINT_OBSERVERS, observer]
    )


def test_a_cancellation_during_the_claim_is_acknowledged_and_settles_at_once(
    approved_case, live_orders, agent, monkeypatch
):
    case = approved_case()
    _stop_during_the_claim(
        monkeypatch,
        lambda: case_cancel_request(case=case, actor=agent, reason="changed mind", via="api"),
    )

    assert apply_case(case_id=case.pk) == "cancel acknowledged"

    case.refresh_from_db()
    assert case.status == Status.CANCELLED  # not 'applying' until a lease runs out
    attempt = Attempt.objects.get(case=case)
    assert attempt.state == Attempt.State.STOPPED
    assert attempt.submitted_at is None
    actions = _actions(case)
    assert "cases.attempt.worker_stopped" in actions
    assert "cases.attempt.claim_released" in actions
    assert "cases.attempt.lease_expired" not in actions
    assert CancellationRequest.objects.get(case=case).outcome == "cancelled"
    assert live_orders.state(ORDER)["operations"] == []


def test_a_revocation_during_the_claim_is_acknowledged_and_stops_at_once(
    approved_case, live_orders, lead, monkeypatch
):
    case = approved_case()
    _stop_during_the_claim(
        monkeypatch, lambda: case_revoke(case=case, actor=lead, reason="withdrawn", fence=False)
    )

    assert apply_case(case_id=case.pk) == "cancel acknowledged"

    case.refresh_from_db()
    assert case.status == Status.STOPPED
    assert Attempt.objects.get(case=case).state == Attempt.State.STOPPED
    assert "cases.attempt.worker_stopped" in _actions(case)
    assert live_orders.state(ORDER)["operations"] == []


@pytest.fixture
def held_case(approved_case, live_orders):
    """Sent, and the answer lost: held with the effect unknown."""
    case = approved_case()
    live_orders.set_fault("drop_after_commit", path_prefix="/orders/")
    assert apply_case(case_id=case.pk) == "effect_unknown"
    case.refresh_from_db()
    assert case.status == Status.HELD
    return case


def test_an_expiry_during_the_hold_is_shown_at_once_and_recorded_once(held_case):
    approval = live_approval(held_case)
    with maintenance():  # a decided approval never changes: the owner's repair moves its clock
        Approval.objects.filter(pk=approval.pk).update(
            expires_at=timezone.now() - dt.timedelta(seconds=1)
        )

    # Shown before any sweep ran: derived from the approval itself.
    why = describe_next_action(held_case).why_waiting
    assert f"{approval.reference} expired during the hold: no new application under it" in why

    approvals_expire_due()
    approvals_expire_due()

    events = CaseEvent.objects.filter(case=held_case, action=Action.APPROVAL_EXPIRED_DURING_HOLD)
    assert events.count() == 1
    assert events.get().detail["approval"] == approval.reference
    assert f"{approval.reference} expired during the hold" in events.get().reason
    held_case.refresh_from_db()
    assert held_case.status == Status.HELD  # the evidence still settles it
    assert Proposal.objects.get(case=held_case).status == Proposal.Status.APPROVED


def test_a_live_approval_during_the_hold_is_not_reported_as_expired(held_case):
    approvals_expire_due()

    assert not CaseEvent.objects.filter(
        case=held_case, action=Action.APPROVAL_EXPIRED_DURING_HOLD
    ).exists()
    assert "expired during the hold" not in describe_next_action(held_case).why_waiting


def test_a_cancellation_during_the_hold_is_recorded_and_shown_at_once(held_case, agent):
    case_cancel_request(case=held_case, actor=agent, reason="customer cancels", via="api")

    held_case.refresh_from_db()
    assert held_case.status == Status.HELD  # never shown as cancelled while unknown
    assert CancellationRequest.objects.get(case=held_case).outcome == "pending"
    assert _actions(held_case)[-1] == "cases.cancellation.requested"
    why = describe_next_action(held_case).why_waiting
    assert "a cancellation request is recorded" in why
