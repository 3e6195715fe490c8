"""An approval that lapses while the case is queued never authorizes anything again."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.utils import timezone

from approvals import services, tasks
from approvals.models import Approval, Proposal
from cases.models import CaseEvent, Status, WaitingOn
from reconciliation.exceptions import ApprovalRefused
from reconciliation.sources import source_check

from .conftest import ORDER, reload


def _apply(receiver, approval, *, version=1, token=1):
    return receiver.apply_operation(
        ORDER,
        operation_key=approval.operation.key,
        change=approval.proposal.change,
        expected_version=version,
        fencing_token=token,
        approval_grant=approval.grant,
    )


def test_approval_expiring_while_queued_returns_the_case_to_review_with_an_event(
    approval, proposal, approver, preparer
):
    case = reload(proposal.case)
    assert case.status == Status.READY
    later = approval.expires_at + dt.timedelta(seconds=1)
    assert services.approvals_expire_due(now=approval.expires_at - dt.timedelta(seconds=1)) == 0

    assert services.approvals_expire_due(now=later) == 1

    case = reload(case)
    proposal.refresh_from_db()
    approval.refresh_from_db()
    assert case.status == Status.AWAITING_REVIEW
    assert case.waiting_on == WaitingOn.APPROVERS
    assert proposal.status == Proposal.Status.AWAITING_REVIEW
    assert approval.revoked_at is not None
    assert approval.revoked_reason == "Expired before it was applied"
    event = CaseEvent.objects.filter(case=case).latest("id")
    assert (event.from_status, event.to_status) == (Status.READY, Status.AWAITING_REVIEW)
    assert event.detail["transition"] == "approval_expired"
    assert event.detail["expired"] == [approval.reference]
    assert event.detail["operation_key"] == proposal.operation.key
    assert event.version == case.version
    assert services.approvals_expire_due(now=later) == 0  # nothing left to return

    # A fresh decision on the same proposal: same operation key, a new approval.
    again = services.proposal_approve(proposal=proposal, actor=preparer)
    assert again.reference != approval.reference
    assert again.proposal_id == proposal.pk
    assert again.operation_id == approval.operation_id
    assert reload(case).status == Status.READY
    assert services.live_approval(case) == again


def test_expire_task_leaves_a_live_approval_alone(approval, proposal):
    assert tasks.expire_approvals() == 0
    assert reload(proposal.case).status == Status.READY
    approval.refresh_from_db()
    assert approval.revoked_at is None


@pytest.mark.order_system
def test_expired_grant_is_refused_by_the_order_system_and_the_fresh_one_applies(
    live_orders, receiver, case, submit, agent, approver, preparer
):
    assert source_check(case_id=case.pk) == "checked"
    proposal = submit(case, agent)
    soon = timezone.now() + dt.timedelta(seconds=2)
    old = services.proposal_approve(proposal=proposal, actor=approver, expires_at=soon)
    time.sleep(max((old.expires_at - timezone.now()).total_seconds(), 0) + 0.2)

    assert services.approval_expire(case=case) is True
    assert reload(case).status == Status.AWAITING_REVIEW
    with pytest.raises(ApprovalRefused) as refused:
        _apply(receiver, old)
    assert refused.value.kind == "approval_expired"
    assert live_orders.state(ORDER)["order"]["version"] == 1

    fresh = services.proposal_approve(proposal=proposal, actor=preparer)
    assert fresh.operation.key == old.operation.key
    result = _apply(receiver, fresh)
    assert (result.operation_key, result.order_version) == (old.operation.key, 2)
    assert Approval.objects.filter(proposal=proposal, decision="approved").count() == 2
