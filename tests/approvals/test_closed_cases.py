"""A case closed with nothing applied (cancelled or stopped) takes its open proposal with it:
withdrawn and its approvals revoked in the closing transaction, so no approver is asked to
decide a closed case. Before, the proposal stayed "awaiting review" in the approvers' queue
(and their tile's count) after its case was cancelled (found walking ``make run``)."""

from __future__ import annotations

import pytest

from approvals import services
from approvals.models import Approval, Proposal
from approvals.selectors import review_queue_for
from cases.models import Status
from cases.services import case_cancel_request, case_transition
from tests.approvals.conftest import reload

pytestmark = pytest.mark.django_db


def test_a_cancelled_case_withdraws_the_proposal_awaiting_review(proposal, agent, approver):
    assert list(review_queue_for(approver)) == [proposal]

    case_cancel_request(
        case=reload(proposal.case), actor=agent, reason="The customer gave up", via="admin"
    )

    proposal.refresh_from_db()
    assert reload(proposal.case).status == Status.CANCELLED
    assert proposal.status == Proposal.Status.WITHDRAWN
    assert f"{proposal.case.reference} was cancelled: The customer gave up" in (
        proposal.status_reason
    )
    assert list(review_queue_for(approver)) == []


def test_a_cancelled_ready_case_revokes_its_approval(proposal, agent, approver):
    services.proposal_approve(proposal=proposal, actor=approver)
    assert reload(proposal.case).status == Status.READY

    case_cancel_request(case=reload(proposal.case), actor=agent, reason="Not needed", via="api")

    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.WITHDRAWN
    approval = Approval.objects.get(proposal=proposal)
    assert approval.revoked_at is not None


def test_a_stopped_case_withdraws_its_proposal(proposal, lead):
    case = reload(proposal.case)
    case_transition(
        case=case,
        transition="stop",
        expected_version=case.version,
        reason="Duplicate of another request",
        actor=lead,
    )

    proposal.refresh_from_db()
    assert reload(case).status == Status.STOPPED
    assert proposal.status == Proposal.Status.WITHDRAWN


def test_a_proposal_left_awaiting_review_on_a_closed_case_is_in_nobodys_queue(proposal, approver):
    """Rows written before the rule above: the case closed, its proposal still awaiting
    review. The queue, its tile's count and "mine to answer" leave it out."""
    from approvals.selectors import proposals_decidable_by
    from cases.models import Case

    Case.objects.filter(pk=proposal.case_id).update(status=Status.CANCELLED)
    assert reload(proposal.case).status == Status.CANCELLED
    assert proposal.status == Proposal.Status.AWAITING_REVIEW
    assert list(review_queue_for(approver)) == []
    assert list(proposals_decidable_by(approver)) == []


def test_the_admins_and_the_apis_queue_leave_out_a_proposal_on_a_closed_case(
    proposal, approver, api
):
    """The queue pages agree with the home tile's count: a proposal left "awaiting review" on
    a closed case is on neither (found walking ``make run``: the tile said 1, the page 4)."""
    from django.test import Client
    from django.urls import reverse

    from cases.models import Case

    client = Client()
    client.force_login(approver)
    page = reverse("admin:approvals_proposal_changelist")
    assert (
        proposal.case.reference in client.get(page, {"status": "awaiting_review"}).content.decode()
    )
    listed = api(approver).get("/api/proposals/", {"status": "awaiting_review"}).json()
    assert [row["id"] for row in listed["results"]] == [proposal.pk]

    Case.objects.filter(pk=proposal.case_id).update(status=Status.CANCELLED)

    body = client.get(page, {"status": "awaiting_review"}).content.decode()
    assert proposal.case.reference not in body
    assert (
        api(approver).get("/api/proposals/", {"status": "awaiting_review"}).json()["results"] == []
    )
