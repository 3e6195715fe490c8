"""Approve and reject: one decision on one exact, current proposal, within the expiry policy."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction
from django.utils import timezone

from approvals import services
from approvals.exceptions import ExpiryOutOfBounds, ProposalNotCurrent
from approvals.grants import grant_verify
from approvals.models import Approval, Proposal
from cases.exceptions import InvalidCaseInput
from cases.kernel import lock_case
from cases.models import CaseEvent, Status, WaitingOn
from tests.support.fixtures import date_change

from .conftest import in_days, reload


def test_approval_records_the_decision_signs_the_grant_and_queues_the_case(
    proposal, approver, settings
):
    before = timezone.now()
    approval = services.proposal_approve(proposal=proposal, actor=approver)

    case = reload(proposal.case)
    proposal.refresh_from_db()
    assert case.status == Status.READY
    assert proposal.status == Proposal.Status.APPROVED
    assert approval.reference.startswith("AP-")
    assert approval.proposal_hash == proposal.content_hash
    assert approval.operation == proposal.operation
    default = dt.timedelta(minutes=settings.APPROVAL_DEFAULT_MINUTES)
    assert before + default - dt.timedelta(seconds=1) <= approval.expires_at
    assert approval.expires_at <= timezone.now() + default
    grant = grant_verify(
        approval.grant,
        operation_key=proposal.operation.key,
        order_id=proposal.order_id,
        change=proposal.change,
    )
    assert grant.change == proposal.change
    assert (grant.approval_id, grant.expires_at) == (approval.reference, approval.expires_at)
    event = CaseEvent.objects.filter(case=case).latest("id")
    assert event.to_status == Status.READY
    assert event.detail["approval"] == approval.reference
    assert event.version == case.version


def test_approving_a_superseded_proposal_is_refused_as_not_current(proposal, approver, lead, api):
    services.case_change_intent(
        case=proposal.case,
        actor=lead,
        change=date_change(in_days(11)),
        reason="Customer asked for another day",
    )
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.SUPERSEDED

    with pytest.raises(ProposalNotCurrent):
        services.proposal_approve(proposal=proposal, actor=approver)
    response = api(approver).post(f"/api/proposals/{proposal.pk}/approve/", {}, format="json")
    assert response.status_code == 409
    assert response.json()["error"] == "proposal_not_current"
    assert not Approval.objects.filter(proposal=proposal).exists()


def test_approving_an_invalidated_proposal_is_refused_as_not_current(proposal, approver, api):
    with transaction.atomic():
        case = lock_case(proposal.case_id)
        assert services.proposal_invalidate_for_source_change(
            case=case, order_version=2, actor=approver, via="test"
        )
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.INVALIDATED

    with pytest.raises(ProposalNotCurrent):
        services.proposal_approve(proposal=proposal, actor=approver)
    response = api(approver).post(f"/api/proposals/{proposal.pk}/approve/", {}, format="json")
    assert response.status_code == 409
    assert response.json()["error"] == "proposal_not_current"
    assert not Approval.objects.filter(proposal=proposal).exists()


def test_approving_an_already_approved_proposal_is_refused_as_not_current(
    approval, proposal, preparer, api
):
    response = api(preparer).post(f"/api/proposals/{proposal.pk}/approve/", {}, format="json")
    assert response.status_code == 409
    assert response.json()["error"] == "proposal_not_current"
    assert Approval.objects.filter(proposal=proposal).count() == 1


@pytest.mark.parametrize(
    ("action", "body", "unknown"),
    [
        ("approve", {"expire_at": "2030-01-01T18:00:00Z"}, "expire_at"),  # misspelt expires_at
        ("approve", {"reason": "ok", "evil": 1}, "evil"),
        ("reject", {"reason": "Wrong date", "status": "approved"}, "status"),
    ],
)
def test_a_decision_naming_a_field_it_does_not_take_is_400_naming_it_and_decides_nothing(
    proposal, approver, api, action, body, unknown
):
    """A misspelt expiry was dropped without a word and the approval took the default one."""
    response = api(approver).post(f"/api/proposals/{proposal.pk}/{action}/", body, format="json")

    assert response.status_code == 400
    assert response.json()["fields"][unknown] == ["Unknown field: this request does not take it."]
    assert reload(proposal.case).status == Status.AWAITING_REVIEW
    assert not Approval.objects.exists()


def test_reject_without_a_reason_is_400_and_writes_nothing(proposal, approver, api):
    client = api(approver)
    for body in ({}, {"reason": ""}):
        response = client.post(f"/api/proposals/{proposal.pk}/reject/", body, format="json")
        assert response.status_code == 400
        assert "reason" in response.json()["fields"]
    with pytest.raises(InvalidCaseInput):
        services.proposal_reject(proposal=proposal, actor=approver, reason="   ")
    assert reload(proposal.case).status == Status.AWAITING_REVIEW
    assert not Approval.objects.exists()


def test_reject_with_a_reason_sends_the_case_back_to_the_owner_to_prepare_another(
    proposal, approver, api
):
    response = api(approver).post(
        f"/api/proposals/{proposal.pk}/reject/",
        {"reason": "The slot is full that week"},
        format="json",
    )
    assert response.status_code == 200
    assert response.json()["status"] == "rejected"

    case = reload(proposal.case)
    # Not "preparing a proposal" (which reads as a worker at it): a person must prepare another.
    assert case.status == Status.PROPOSAL_REJECTED
    assert case.waiting_on == WaitingOn.OWNER
    assert case.follow_up_reason == "rejected"
    decision = Approval.objects.get(proposal=proposal)
    assert (decision.decision, decision.reason, decision.grant) == (
        "rejected",
        "The slot is full that week",
        "",
    )
    event = CaseEvent.objects.filter(case=case).latest("id")
    assert event.reason == "The slot is full that week"
    assert event.to_status == Status.PROPOSAL_REJECTED


def test_approve_with_expiry_beyond_the_maximum_is_400(proposal, approver, api, settings):
    settings.APPROVAL_MAX_MINUTES = 60
    too_late = timezone.now() + dt.timedelta(minutes=61)
    response = api(approver).post(
        f"/api/proposals/{proposal.pk}/approve/",
        {"expires_at": too_late.isoformat()},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["error"] == "invalid"
    assert "expires_at" in response.json()["fields"]
    with pytest.raises(ExpiryOutOfBounds):
        services.proposal_approve(proposal=proposal, actor=approver, expires_at=too_late)
    past = timezone.now() - dt.timedelta(minutes=1)
    response = api(approver).post(
        f"/api/proposals/{proposal.pk}/approve/", {"expires_at": past.isoformat()}, format="json"
    )
    assert response.status_code == 400
    assert not Approval.objects.exists()
    assert reload(proposal.case).status == Status.AWAITING_REVIEW


def test_the_expiry_bound_is_said_in_the_desks_time_words(proposal, approver, api, settings):
    """The field said "Choose a time up to 2026-12-06T19:10:25.330828+00:00" beside "no later
    than 2026-12-06 19:10 UTC": one form, to the minute, with its zone."""
    settings.APPROVAL_MAX_MINUTES = 60
    latest = services.approval_expiry_bounds()[1]
    response = api(approver).post(
        f"/api/proposals/{proposal.pk}/approve/",
        {"expires_at": (latest + dt.timedelta(days=1)).isoformat()},
        format="json",
    )
    words = f"{latest.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC"
    assert response.json()["fields"]["expires_at"] == [
        f"Choose a time after now and up to {words}."
    ]
    assert response.json()["detail"].endswith(f"no later than {words}.")


def test_who_may_not_decide_is_told_so_before_the_expiry_is_checked(proposal, agent, api):
    """The author (an agent, no approver) sending a year-9999 expiry was told the time was out
    of bounds (400), as if a better time would do; it is 403."""
    response = api(agent).post(
        f"/api/proposals/{proposal.pk}/approve/",
        {"expires_at": "9999-01-01T00:00:00Z"},
        format="json",
    )
    assert response.status_code == 403
    assert not Approval.objects.exists()


def test_approve_with_expiry_within_the_maximum_uses_it(proposal, approver, api, settings):
    settings.APPROVAL_MAX_MINUTES = 60
    wanted = (timezone.now() + dt.timedelta(minutes=59)).replace(microsecond=0)
    response = api(approver).post(
        f"/api/proposals/{proposal.pk}/approve/", {"expires_at": wanted.isoformat()}, format="json"
    )
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "approved"
    assert Approval.objects.get(proposal=proposal).expires_at == wanted
