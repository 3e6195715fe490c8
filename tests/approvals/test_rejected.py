"""A rejected proposal leaves its case with a person who must prepare another: a status that
says so, named, with a follow-up; never a state that looks like a worker is at it. Every guard
(claims, cancellation, revocation, restore recovery, the dispatcher) holds for it."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from approvals import services
from approvals.models import Proposal
from cases.actions import allowed_transitions, case_actions
from cases.exceptions import CaseError
from cases.kernel import Worker
from cases.models import Case, Status, WaitingOn
from cases.next_action import describe_next_action
from cases.services import case_cancel_request, case_transition
from reconciliation.claims import ClaimRefused, case_claim
from reconciliation.dispatch import dispatch_due
from reconciliation.restore_recovery import suspects
from reconciliation.revocation import case_revoke
from reconciliation.tasks import prepare_proposal
from tests.approvals.conftest import in_days, read_order, reload
from tests.support.fixtures import date_change

pytestmark = pytest.mark.django_db


@pytest.fixture
def rejected(proposal, approver) -> Case:
    services.proposal_reject(proposal=proposal, actor=approver, reason="The slot is full")
    return reload(proposal.case)


def test_a_rejected_case_says_a_named_person_prepares_another_proposal(rejected, lead, client):
    assert rejected.status == Status.PROPOSAL_REJECTED
    assert rejected.get_status_display() == "Rejected: a person prepares another proposal"
    assert rejected.waiting_on == WaitingOn.OWNER
    told = describe_next_action(rejected, actor=lead)
    assert "responsible person prepares another proposal" in told.headline
    assert "no worker acts on it" in told.headline
    assert told.who_must_answer.startswith("Lena Lead (lead)")
    assert told.follow_up.startswith("Follow up by ")
    client.force_login(lead)
    page = client.get(reverse("admin:cases_case_change", args=[rejected.pk])).content.decode()
    assert f"{rejected.reference} — Rejected: a person prepares another proposal" in page
    assert "Preparing one exact proposal" not in page
    assert 'id="hf-follow-up"' in page


def test_no_worker_takes_a_rejected_case(rejected, enqueued):
    Case.objects.filter(pk=rejected.pk).update(next_check_at=timezone.now() - dt.timedelta(1))
    dispatch_due()
    assert enqueued == []
    with pytest.raises(ClaimRefused):
        case_claim(case_id=rejected.pk, worker=Worker("w"))
    # The workers' proposal task leaves it alone too.
    assert prepare_proposal(rejected.pk) == "skipped"
    assert reload(rejected).status == Status.PROPOSAL_REJECTED


def test_the_person_prepares_another_by_hand_and_the_approvers_review_it(rejected, lead, approver):
    assert "prepare" in {a.name for a in case_actions(rejected, lead)}
    proposal = services.proposal_prepare_by_hand(
        case=rejected,
        actor=lead,
        change=date_change(in_days(10)),
        reason="The customer confirmed the 10th",
        expected_version=rejected.version,
    )
    case = reload(rejected)
    assert case.status == Status.AWAITING_REVIEW
    assert proposal.status == Proposal.Status.AWAITING_REVIEW
    transitions = list(
        case.events.filter(action="cases.case.transitioned").values_list(
            "detail__transition", flat=True
        )
    )
    assert transitions[-2:] == ["prepare_again", "submit_for_review"]
    assert case.follow_up_reason == "awaiting_review"


def test_the_same_date_again_from_a_fresh_read_of_the_order(rejected, lead):
    assert "request_source_check" in allowed_transitions(rejected, lead)
    case_transition(
        case=rejected,
        transition="request_source_check",
        expected_version=rejected.version,
        reason="The order moved; read it again",
        actor=lead,
    )
    case = reload(rejected)
    assert (case.status, case.waiting_on) == (Status.WAITING_SOURCE, WaitingOn.ORDER_SYSTEM)
    assert case.follow_up_at is None


def test_cancel_stop_and_revocation_close_a_rejected_case_with_nothing_sent(
    rejected, make_case, lead, agent, approver, submit
):
    assert set(allowed_transitions(rejected, lead)) >= {"cancel", "stop", "escalate"}
    case_cancel_request(case=rejected, actor=agent, reason="The customer gave up", via="admin")
    assert reload(rejected).status == Status.CANCELLED

    other = submit(read_order(make_case()), agent)
    services.proposal_reject(proposal=other, actor=approver, reason="No")
    case = reload(other.case)
    assert case.status == Status.PROPOSAL_REJECTED
    case_revoke(case=case, actor=lead, reason="withdrawn", kind="withdrawn")
    assert reload(case).status == Status.STOPPED


def test_restore_recovery_leaves_a_rejected_case_with_its_person(rejected):
    assert rejected.pk not in suspects()


def test_a_worker_cannot_prepare_for_a_rejected_case(rejected):
    with pytest.raises(CaseError):
        services.proposal_prepare(case=rejected, actor=Worker("proposer"))
