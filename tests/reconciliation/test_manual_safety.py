"""A person's buttons never launder uncertainty: nothing by hand settles what may be in flight."""

from __future__ import annotations

import pytest
from django.db import transaction
from rest_framework.test import APIClient

from cases.actions import allowed_transitions
from cases.exceptions import TransitionRejected
from cases.kernel import SYSTEM, apply_transition, lock_case
from cases.models import Attempt
from cases.services import case_transition
from reconciliation.claims import case_claim


def _held(case):
    with transaction.atomic():
        locked = lock_case(case)
        for name in ("source_checked", "submit_for_review", "approve", "hold"):
            apply_transition(locked, name, actor=SYSTEM, reason=name)
    case.refresh_from_db()
    return case


def test_a_held_case_offers_no_manual_cancel_stop_or_escalate(make_case, lead):
    case = _held(make_case())

    # Only a cancellation *request* is offered: it is saved and the case stays held.
    assert allowed_transitions(case, lead) == ["cancel"]
    for name in ("cancel", "stop", "escalate"):
        if name == "cancel":
            # A cancellation on a held case is recorded, never applied as a status.
            case_transition(
                case=case,
                transition=name,
                expected_version=case.version,
                reason="customer phoned",
                actor=lead,
            )
            case.refresh_from_db()
            assert case.status == "held"
            continue
        with pytest.raises(TransitionRejected):
            case_transition(
                case=case,
                transition=name,
                expected_version=case.version,
                reason="tidy up",
                actor=lead,
            )
    case.refresh_from_db()
    assert case.status == "held"
    assert case.cancellations.get().outcome == "pending"


@pytest.mark.order_system
def test_escalate_is_refused_while_an_attempt_is_running(approved_case, lead, agent):
    case = approved_case()
    attempt = case_claim(case_id=case.pk, worker=SYSTEM)
    case.refresh_from_db()

    assert "escalate" not in allowed_transitions(case, lead)
    with pytest.raises(TransitionRejected):
        case_transition(
            case=case,
            transition="escalate",
            expected_version=case.version,
            reason="looks stuck",
            actor=lead,
        )

    api = APIClient()
    api.force_authenticate(agent)
    response = api.post(
        f"/api/cases/{case.reference}/cancel/", {"reason": "changed my mind"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["status"] == "applying"  # the worker is asked to stop first
    attempt.refresh_from_db()
    assert attempt.state == Attempt.State.CANCEL_REQUESTED


@pytest.mark.order_system
def test_rechecking_the_source_withdraws_the_open_proposal(approved_case, lead):
    from approvals.services import live_approval

    case = approved_case()
    with transaction.atomic():
        apply_transition(lock_case(case), "escalate", actor=SYSTEM, reason="needs a look")
    case.refresh_from_db()

    case_transition(
        case=case,
        transition="request_source_check",
        expected_version=case.version,
        reason="read it again",
        actor=lead,
    )

    case.refresh_from_db()
    assert case.status == "waiting_source"
    assert case.proposals.get().status == "withdrawn"
    assert live_approval(case) is None


def test_next_action_explains_a_pending_cancellation_on_a_held_case(make_case, lead):
    from cases.next_action import describe_next_action

    case = _held(make_case())
    case_transition(
        case=case,
        transition="cancel",
        expected_version=case.version,
        reason="customer phoned",
        actor=lead,
    )
    case.refresh_from_db()

    text = describe_next_action(case).text
    assert "Held" in text
    assert "cancellation request is recorded" in text
