"""Four eyes: the preparer never decides their own proposal, other teams never see it."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from approvals import services
from approvals.exceptions import OwnProposal
from approvals.models import Approval, Proposal
from cases.exceptions import ActionNotPermitted
from cases.models import CaseEvent, Status

from .conftest import reload


def _snapshot(proposal):
    case = reload(proposal.case)
    return (
        case.status,
        case.version,
        CaseEvent.objects.filter(case=case).count(),
        Approval.objects.count(),
        Proposal.objects.get(pk=proposal.pk).status,
    )


def test_preparer_cannot_approve_or_reject_own_proposal_through_the_service(own_proposal, preparer):
    before = _snapshot(own_proposal)
    with pytest.raises(OwnProposal):
        services.proposal_approve(proposal=own_proposal, actor=preparer)
    with pytest.raises(OwnProposal):
        services.proposal_reject(proposal=own_proposal, actor=preparer, reason="Not sure")
    assert _snapshot(own_proposal) == before


def test_another_approver_can_approve_a_proposal_the_preparer_could_not(own_proposal, approver):
    approval = services.proposal_approve(proposal=own_proposal, actor=approver)
    assert approval.decided_by == approver
    assert approval.prepared_by_id == own_proposal.prepared_by_id


def test_admin_shows_the_preparer_no_decision_buttons_and_says_why(client, own_proposal, preparer):
    client.force_login(preparer)
    url = reverse("admin:approvals_proposal_change", args=[own_proposal.pk])
    response = client.get(url)
    assert response.status_code == 200
    body = response.content.decode()
    assert "You prepared this proposal; another approver of the team must decide it." in body
    assert "Approve this exact proposal" not in body
    assert reverse("admin:approvals_proposal_approve", args=[own_proposal.pk]) not in body


def test_admin_approve_view_refuses_the_preparer_and_writes_nothing(client, own_proposal, preparer):
    client.force_login(preparer)
    before = _snapshot(own_proposal)
    url = reverse("admin:approvals_proposal_approve", args=[own_proposal.pk])
    response = client.post(url, {"approve-reason": "looks right"})
    assert response.status_code == 200  # the page again, saying why, what was typed kept
    assert "another approver must decide it" in response.content.decode()
    assert _snapshot(own_proposal) == before


def test_admin_shows_another_approver_the_buttons_and_approves_through_the_service(
    client, own_proposal, approver
):
    client.force_login(approver)
    page = client.get(reverse("admin:approvals_proposal_change", args=[own_proposal.pk]))
    assert "Approve this exact proposal" in page.content.decode()
    response = client.post(
        reverse("admin:approvals_proposal_approve", args=[own_proposal.pk]),
        {"approve-reason": "Checked the slot"},
    )
    assert response.status_code == 302
    approval = Approval.objects.get(proposal=own_proposal)
    assert (approval.decided_by, approval.reason) == (approver, "Checked the slot")
    assert reload(own_proposal.case).status == Status.READY


def test_api_refuses_the_preparer_with_403_own_proposal(api, own_proposal, preparer):
    before = _snapshot(own_proposal)
    client = api(preparer)
    response = client.post(f"/api/proposals/{own_proposal.pk}/approve/", {}, format="json")
    assert response.status_code == 403
    assert response.json()["error"] == "own_proposal"
    response = client.post(
        f"/api/proposals/{own_proposal.pk}/reject/", {"reason": "no"}, format="json"
    )
    assert response.status_code == 403
    assert response.json()["error"] == "own_proposal"
    detail = client.get(f"/api/proposals/{own_proposal.pk}/").json()
    assert detail["can_decide"] is False
    assert "You prepared this proposal" in detail["why_not"]
    assert _snapshot(own_proposal) == before


def test_database_refuses_an_approval_by_the_preparer_when_the_service_is_bypassed(
    own_proposal, preparer, approver
):
    fields = {
        "proposal": own_proposal,
        "proposal_hash": own_proposal.content_hash,
        "operation": own_proposal.operation,
        "prepared_by": preparer,
        "decision": Approval.Decision.APPROVED,
        "expires_at": timezone.now() + dt.timedelta(hours=1),
    }
    with pytest.raises(IntegrityError, match="approval_not_by_preparer"), transaction.atomic():
        Approval.objects.create(reference="AP-SELF", decided_by=preparer, **fields)
    assert not Approval.objects.filter(reference="AP-SELF").exists()
    # The same row decided by someone else is accepted: the refusal was the four-eyes check.
    Approval.objects.create(reference="AP-OTHER", decided_by=approver, **fields)


# --- other teams ------------------------------------------------------------------------------


def test_approver_of_another_team_cannot_see_the_proposal_in_the_api(api, proposal, far_approver):
    client = api(far_approver)
    listing = client.get("/api/proposals/", {"status": "awaiting_review"})
    assert listing.status_code == 200
    assert listing.json()["results"] == []
    assert client.get(f"/api/proposals/{proposal.pk}/").status_code == 404


def test_approver_of_another_team_cannot_decide_the_proposal(api, client, proposal, far_approver):
    before = _snapshot(proposal)
    response = api(far_approver).post(f"/api/proposals/{proposal.pk}/approve/", {}, format="json")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
    response = api(far_approver).post(
        f"/api/proposals/{proposal.pk}/reject/", {"reason": "mine now"}, format="json"
    )
    assert response.status_code == 404

    client.force_login(far_approver)
    admin_approve = reverse("admin:approvals_proposal_approve", args=[proposal.pk])
    assert client.post(admin_approve, {"approve-reason": "x"}).status_code == 404
    with pytest.raises(ActionNotPermitted):
        services.proposal_approve(proposal=proposal, actor=far_approver)
    assert _snapshot(proposal) == before


def test_admin_changelist_of_another_teams_approver_excludes_the_proposal(
    client, proposal, far_approver, approver
):
    url = reverse("admin:approvals_proposal_changelist") + "?status=awaiting_review"
    client.force_login(approver)
    assert f"Proposal #{proposal.pk} " in client.get(url).content.decode()
    client.force_login(far_approver)
    response = client.get(url)
    assert response.status_code == 200
    assert f"Proposal #{proposal.pk} " not in response.content.decode()
    assert "0 proposals" in response.content.decode()
    change = client.get(reverse("admin:approvals_proposal_change", args=[proposal.pk]))
    assert change.status_code == 302  # "doesn't exist", the same as for a missing one
