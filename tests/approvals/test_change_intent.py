"""A changed intended change is a new proposal, a new operation key and a new approval."""

from __future__ import annotations

import pytest

from approvals import services
from approvals.models import Approval, Operation, Proposal
from cases.models import CaseEvent, Status, WaitingOn
from reconciliation import tasks as recon_tasks
from reconciliation.exceptions import ApprovalRefused
from reconciliation.sources import source_check
from tests.support.fixtures import date_change

from .conftest import ORDER, in_days, reload


def _change(case, actor, days):
    return services.case_change_intent(
        case=reload(case),
        actor=actor,
        change=date_change(in_days(days)),
        reason=f"Customer now wants day +{days}",
    )


def test_changed_date_supersedes_the_proposal_and_mints_the_next_operation_key(
    approval, proposal, lead, settings, closed_port
):
    settings.ORDER_SYSTEM_URL = f"http://127.0.0.1:{closed_port}"  # slot advice only
    case = reload(proposal.case)
    first_key = proposal.operation.key
    assert first_key == f"DATE-{case.number}-1"

    _change(case, lead, 11)

    case = reload(case)
    proposal.refresh_from_db()
    approval.refresh_from_db()
    assert case.status == Status.PREPARING_PROPOSAL
    assert case.waiting_on == WaitingOn.OWNER
    assert case.change == date_change(in_days(11))
    assert proposal.status == Proposal.Status.SUPERSEDED
    assert approval.revoked_at is not None
    assert services.live_approval(case) is None
    event = CaseEvent.objects.filter(case=case).latest("id")
    assert event.detail["transition"] == "revise"
    assert event.detail["revoked_approvals"] == [approval.reference]
    assert event.detail["superseded_proposal"] == proposal.pk

    assert recon_tasks.prepare_proposal(case.pk) == "submitted"
    new = Proposal.objects.get(case=case, status=Proposal.Status.AWAITING_REVIEW)
    assert new.pk != proposal.pk
    assert new.change == date_change(in_days(11))
    assert new.operation.key == f"DATE-{case.number}-2"
    assert not Approval.objects.filter(proposal=new).exists()
    assert reload(case).status == Status.AWAITING_REVIEW


@pytest.mark.order_system
def test_changing_the_date_back_is_not_authorized_by_the_first_approval(
    live_orders, receiver, case, agent, lead, approver
):
    assert source_check(case_id=case.pk) == "checked"
    first = services.proposal_prepare(case=reload(case), actor=agent)
    old = services.proposal_approve(proposal=first, actor=approver)
    _change(case, lead, 11)
    services.proposal_prepare(case=reload(case), actor=agent)
    services.case_change_intent(
        case=reload(case),
        actor=lead,
        change=first.change,
        reason="Customer went back to the first date",
    )

    again = services.proposal_prepare(case=reload(case), actor=agent)

    assert again.change == first.change
    assert not Approval.objects.filter(proposal=again).exists()
    try:
        result = receiver.apply_operation(
            ORDER,
            operation_key=again.operation.key,
            change=again.change,
            expected_version=1,
            fencing_token=1,
            approval_grant=old.grant,
        )
    except ApprovalRefused as refused:
        kind = refused.kind
    else:
        pytest.fail(
            f"the superseded, revoked {old.reference} authorized the unapproved "
            f"proposal #{again.pk}: the receiver applied {result.operation_key}"
        )
    assert kind == "approval_invalid"
    assert again.operation.key == f"DATE-{case.number}-3"
    assert Operation.objects.filter(case=case).count() == 3


@pytest.mark.order_system
def test_old_approval_cannot_authorize_the_changed_intent_at_the_receiver(
    live_orders, receiver, case, agent, lead, approver
):
    assert source_check(case_id=case.pk) == "checked"
    first = services.proposal_prepare(case=reload(case), actor=agent)
    old = services.proposal_approve(proposal=first, actor=approver)
    _change(case, lead, 11)
    second = services.proposal_prepare(case=reload(case), actor=agent)
    assert second.operation.key != first.operation.key

    attempts = [
        (second.operation.key, second.change),  # the new intent with the old grant
        (first.operation.key, second.change),  # the old key with the new date
    ]
    for key, change in attempts:
        with pytest.raises(ApprovalRefused) as refused:
            receiver.apply_operation(
                ORDER,
                operation_key=key,
                change=change,
                expected_version=1,
                fencing_token=1,
                approval_grant=old.grant,
            )
        assert refused.value.kind == "approval_invalid"
    state = live_orders.state(ORDER)
    assert state["order"]["version"] == 1
    assert state["operations"] == []


def test_restating_the_same_date_leaves_the_case_able_to_progress(approval, proposal, lead, agent):
    case = reload(proposal.case)
    services.case_change_intent(
        case=case,
        actor=lead,
        change=case.change,
        reason="Customer confirmed the same date again",
    )

    case = reload(case)
    proposal.refresh_from_db()
    approval.refresh_from_db()
    stranded = (
        case.status == Status.PREPARING_PROPOSAL and proposal.status == Proposal.Status.APPROVED
    )
    assert not stranded, (
        "the case went back to preparing a proposal while its approved proposal stayed open: "
        "the prepare task skips it forever and preparing by hand hits the one-open constraint"
    )
    if case.status == Status.READY:
        assert services.live_approval(case) == approval
    else:
        assert approval.revoked_at is not None
