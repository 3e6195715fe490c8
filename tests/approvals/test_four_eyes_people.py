"""Four eyes bound to people, not rows: nobody who authored a proposal's intent approves it.

An author is whoever opened the case (when a person did), re-sent its request, changed the change
it asks for, prepared the proposal by hand or asked for it to be prepared again. The worker
preparing the proposal does not launder the intent: the person behind it still may not decide it.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from approvals import selectors, services
from approvals.exceptions import OwnProposal
from approvals.models import Approval, Proposal, ProposalAuthor
from cases.append_only import maintenance
from cases.kernel import Worker
from cases.models import CaseEvent, Status
from cases.services import case_open, case_transition
from reconciliation import tasks as recon_tasks
from tests.support.fixtures import date_change

from .conftest import ORDER, in_days, read_order, reload

Role = ProposalAuthor.Role


@pytest.fixture
def both(make_user, team):
    """One person in both the agent and the approver groups of the team."""
    user = make_user("both", "agent", teams=[team])
    user.groups.add(Group.objects.get(name="approver"))
    return user


@pytest.fixture(autouse=True)
def no_slot_advice(settings, closed_port):
    """The worker's slot lookup finds nothing listening: advice only, never a refusal."""
    settings.ORDER_SYSTEM_URL = f"http://127.0.0.1:{closed_port}"


def _awaiting(case) -> Proposal:
    return Proposal.objects.get(case=case, status=Proposal.Status.AWAITING_REVIEW)


def _worker_prepares(case) -> Proposal:
    assert recon_tasks.prepare_proposal(case.pk) == "submitted"
    return _awaiting(case)


def _opened_by(user, account):
    """A case ``user`` opened through intake, its order read: preparing a proposal."""
    case, created = case_open(
        actor=user,
        account=account,
        request_key=f"opened-by-{user.username}",
        order_id=ORDER,
        kind="delivery_date",
        change=date_change(in_days(9)),
    )
    assert created
    return read_order(case)


def _resend(user, case):
    """``user`` sends ``case``'s request (its account and request key) again."""
    return case_open(
        actor=user,
        account=case.account,
        request_key=case.request_key,
        order_id=case.order_id,
        kind=case.kind,
        change=case.change,
    )


def _authors(proposal) -> set[tuple[str, str]]:
    return {
        (a.user.username, a.role)
        for a in ProposalAuthor.objects.filter(proposal=proposal).select_related("user")
    }


def _snapshot(proposal):
    case = reload(proposal.case)
    return (
        case.status,
        case.version,
        CaseEvent.objects.filter(case=case).count(),
        Approval.objects.count(),
        Proposal.objects.get(pk=proposal.pk).status,
    )


def _refused(proposal, user) -> OwnProposal:
    before = _snapshot(proposal)
    with pytest.raises(OwnProposal) as refused:
        services.proposal_approve(proposal=proposal, actor=user)
    with pytest.raises(OwnProposal):
        services.proposal_reject(proposal=proposal, actor=user, reason="Mine to decide")
    assert _snapshot(proposal) == before
    assert refused.value.code == "own_proposal"
    assert refused.value.http_status == 403
    return refused.value


# --- the bypass from issue 10 -------------------------------------------------------------------


def test_the_person_who_opened_the_case_cannot_approve_the_workers_proposal(
    account, both, approver
):
    case, created = case_open(
        actor=both,
        account=account,
        request_key="both-1",
        order_id=ORDER,
        kind="delivery_date",
        change=date_change(in_days(9)),
    )
    assert created
    case = read_order(case)
    proposal = _worker_prepares(case)
    assert proposal.prepared_by is None  # the worker prepared it: the row alone names nobody

    error = _refused(proposal, both)
    assert str(error) == f"You opened {case.reference}; another approver must decide it."
    assert error.extra == {"roles": [Role.OPENED_CASE]}
    assert _authors(proposal) == {("both", Role.OPENED_CASE)}
    opened = CaseEvent.objects.get(case=case, action="cases.case.created")
    assert ProposalAuthor.objects.get(proposal=proposal).event == opened

    # An unrelated approver still approves it.
    approval = services.proposal_approve(proposal=proposal, actor=approver)
    assert approval.decided_by == approver
    assert reload(case).status == Status.READY


def test_the_proposal_event_names_its_authors(account, both):
    case = _opened_by(both, account)
    proposal = _worker_prepares(case)
    prepared = CaseEvent.objects.get(case=case, action="approvals.proposal.prepared")
    assert prepared.detail["authors"] == [{"user_id": both.pk, "role": Role.OPENED_CASE}]
    assert prepared.detail["proposal_id"] == proposal.pk


def test_a_case_opened_by_the_system_has_no_opener_among_its_authors(checked_case, both):
    proposal = _worker_prepares(checked_case)
    assert _authors(proposal) == set()
    approval = services.proposal_approve(proposal=proposal, actor=both)
    assert approval.decided_by == both


def test_the_account_verifier_is_not_an_author(make_case, account, lead, both):
    """Verifying the customer starts the case's work; it does not ask for a re-preparation."""
    from cases.services import account_verify

    account.verified = False
    account.save()
    case = make_case()
    assert case.status == Status.NEW
    lead.groups.add(Group.objects.get(name="approver"))
    account_verify(account=account, actor=lead)
    proposal = _worker_prepares(read_order(reload(case)))
    assert _authors(proposal) == set()
    assert services.proposal_approve(proposal=proposal, actor=lead).decided_by == lead


# --- a second intake of the same request (issue 25) ---------------------------------------------


@pytest.fixture
def dual(make_user, team):
    """A lead who is also an approver of the team."""
    user = make_user("dual", "lead", teams=[team])
    user.groups.add(Group.objects.get(name="approver"))
    return user


def test_who_re_sends_another_requesters_request_joins_it_and_cannot_approve(
    account, agent, dual, approver
):
    """dual re-sends the agent's account + request_key: the same case comes back, the join is
    on the case's trail, and dual is an author of its intent who may not approve it."""
    case, created = case_open(
        actor=agent,
        account=account,
        request_key="email-agent-1",
        order_id=ORDER,
        kind="delivery_date",
        change=date_change(in_days(9)),
    )
    assert created
    again, created = _resend(dual, case)
    assert (again.pk, created) == (case.pk, False)
    joined = CaseEvent.objects.get(case=case, action="cases.case.request_joined")
    assert (joined.actor, joined.detail) == (dual, {"request_key": "email-agent-1"})

    proposal = _worker_prepares(read_order(reload(case)))

    error = _refused(proposal, dual)
    assert error.extra == {"roles": [Role.JOINED_REQUEST]}
    assert f"You sent the request of {case.reference} again" in str(error)
    assert _authors(proposal) == {("agent", Role.OPENED_CASE), ("dual", Role.JOINED_REQUEST)}
    assert ProposalAuthor.objects.get(proposal=proposal, user=dual).event == joined
    assert services.proposal_approve(proposal=proposal, actor=approver).decided_by == approver


def test_who_joins_a_request_after_its_proposal_was_prepared_cannot_approve(
    account, agent, dual, approver
):
    """The authors are read again before every decision: a join after the proposal counts."""
    case = _opened_by(agent, account)
    proposal = _worker_prepares(case)
    _resend(dual, case)

    error = _refused(proposal, dual)
    assert error.extra == {"roles": [Role.JOINED_REQUEST]}


def test_who_joins_after_the_proposal_is_told_so_by_its_page_and_the_api_before_deciding(
    account, agent, dual, api, client
):
    """The read says what the decision will say: a join recorded after the proposal was
    prepared makes the joiner its author at once, not only when they try to decide."""
    case = _opened_by(agent, account)
    proposal = _worker_prepares(case)
    _resend(dual, case)

    body = api(dual).get(f"/api/proposals/{proposal.pk}/").json()
    client.force_login(dual)
    page = client.get(reverse("admin:approvals_proposal_change", args=[proposal.pk]))

    assert (body["may_decide"], body["can_decide"]) == (False, False)
    assert "dual" not in body["deciders"]  # "Who may decide: … dual" before
    assert dual not in selectors.eligible_approvers(proposal)
    assert body["why_not"].startswith("You sent the request of this case again")
    assert ("dual", Role.JOINED_REQUEST) in _authors(proposal)
    assert page.status_code == 200
    assert "You sent the request of this case again" in page.content.decode()
    assert 'id="hf-reject"' not in page.content.decode()


def test_the_same_person_re_sending_their_own_request_is_not_recorded_again(account, agent):
    case = _opened_by(agent, account)
    events = CaseEvent.objects.filter(case=case).count()

    for _ in range(2):
        _resend(agent, case)

    assert CaseEvent.objects.filter(case=case).count() == events
    assert reload(case).version == case.version


def test_a_joiner_is_recorded_once_however_often_they_re_send(account, agent, dual):
    case = _opened_by(agent, account)
    for _ in range(3):
        _resend(dual, case)

    assert CaseEvent.objects.filter(case=case, action="cases.case.request_joined").count() == 1


def test_a_joiner_over_the_api_is_recorded_too(account, agent, dual, api):
    case = _opened_by(agent, account)
    body = {
        "account": account.reference,
        "request_key": case.request_key,
        "order_id": ORDER,
        "kind": "delivery_date",
        "change": case.change,
    }

    response = api(dual).post("/api/cases/", body, format="json")

    assert response.status_code == 200, response.json()
    assert response.json()["reference"] == case.reference
    assert CaseEvent.objects.filter(
        case=case, action="cases.case.request_joined", actor=dual
    ).exists()


# --- a changed intent ---------------------------------------------------------------------------


def test_who_changed_the_date_under_review_cannot_approve_the_next_proposal(
    checked_case, both, approver
):
    first = _worker_prepares(checked_case)
    services.case_change_intent(
        case=reload(checked_case),
        actor=both,
        change=date_change(in_days(12)),
        reason="Customer asked",
    )
    first.refresh_from_db()
    assert first.status == Proposal.Status.SUPERSEDED
    event = CaseEvent.objects.filter(case=checked_case).latest("id")
    assert event.detail["transition"] == "revise"

    proposal = _worker_prepares(reload(checked_case))
    assert proposal.change == date_change(in_days(12))
    error = _refused(proposal, both)
    assert f"You changed the change {checked_case.reference} asks for" in str(error)
    assert _authors(proposal) == {("both", Role.CHANGED_INTENT)}
    assert services.proposal_approve(proposal=proposal, actor=approver).decided_by == approver


def test_who_changed_the_date_while_it_was_being_prepared_cannot_approve(checked_case, both):
    services.case_change_intent(
        case=reload(checked_case),
        actor=both,
        change=date_change(in_days(13)),
        reason="Customer asked",
    )
    assert CaseEvent.objects.filter(case=checked_case).latest("id").action == (
        "cases.case.intent_changed"
    )
    proposal = _worker_prepares(reload(checked_case))
    _refused(proposal, both)
    assert _authors(proposal) == {("both", Role.CHANGED_INTENT)}


def test_who_changed_the_date_to_an_open_drafts_date_becomes_its_author(checked_case, both):
    worker = Worker("worker:test")
    draft = services.proposal_prepare(
        case=reload(checked_case), actor=worker, change=date_change(in_days(14)), submit=False
    )
    assert _authors(draft) == set()
    services.case_change_intent(
        case=reload(checked_case),
        actor=both,
        change=date_change(in_days(14)),
        reason="Customer agreed",
    )
    draft.refresh_from_db()
    assert draft.status == Proposal.Status.DRAFT  # it already carries the new date
    assert _authors(draft) == {("both", Role.CHANGED_INTENT)}
    proposal = services.proposal_submit(proposal=draft, actor=worker)
    _refused(proposal, both)


# --- prepared by hand ---------------------------------------------------------------------------


def test_who_prepared_by_hand_with_another_date_cannot_approve(checked_case, both, approver):
    case = reload(checked_case)
    proposal = services.proposal_prepare_by_hand(
        case=case,
        actor=both,
        change=date_change(in_days(10)),
        reason="Customer confirmed day +10",
        expected_version=case.version,
    )
    error = _refused(proposal, both)
    assert str(error) == (
        f"You changed the change {case.reference} asks for and prepared proposal "
        f"#{proposal.pk}; another approver must decide it."
    )
    assert error.extra == {"roles": [Role.CHANGED_INTENT, Role.PREPARED]}
    assert _authors(proposal) == {("both", Role.CHANGED_INTENT), ("both", Role.PREPARED)}
    prepared = ProposalAuthor.objects.get(proposal=proposal, role=Role.PREPARED)
    assert prepared.event.action == "approvals.proposal.prepared"
    assert services.proposal_approve(proposal=proposal, actor=approver).decided_by == approver


def test_who_prepared_by_hand_the_requested_change_cannot_approve(checked_case, both):
    case = reload(checked_case)
    proposal = services.proposal_prepare_by_hand(
        case=case,
        actor=both,
        change=case.change,
        reason="As asked",
        expected_version=case.version,
    )
    error = _refused(proposal, both)
    assert error.extra == {"roles": [Role.PREPARED]}


# --- asked for re-preparation -------------------------------------------------------------------


def test_who_asked_for_the_proposal_to_be_prepared_again_cannot_approve(
    checked_case, both, lead, approver
):
    first = _worker_prepares(checked_case)
    case = reload(checked_case)
    case_transition(
        case=case,
        transition="escalate",
        expected_version=case.version,
        reason="The slot looks wrong",
        actor=lead,
    )
    case = reload(case)
    case_transition(
        case=case,
        transition="request_source_check",
        expected_version=case.version,
        reason="Read it again and prepare anew",
        actor=both,
    )
    first.refresh_from_db()
    assert first.status == Proposal.Status.WITHDRAWN
    proposal = _worker_prepares(read_order(reload(case)))

    error = _refused(proposal, both)
    assert f"You asked for {case.reference} to be checked and prepared again" in str(error)
    assert _authors(proposal) == {("both", Role.ASKED_REPREPARE)}
    # The lead only escalated; the approver had no hand in it.
    assert services.proposal_approve(proposal=proposal, actor=approver).decided_by == approver


def test_every_role_of_one_person_is_named(account, both):
    case = _opened_by(both, account)
    proposal = services.proposal_prepare_by_hand(
        case=case,
        actor=both,
        change=date_change(in_days(11)),
        reason="Customer confirmed",
        expected_version=case.version,
    )
    error = _refused(proposal, both)
    assert str(error) == (
        f"You opened {case.reference}, changed the change {case.reference} asks for and "
        f"prepared proposal #{proposal.pk}; another approver must decide it."
    )


# --- the decision page and the API say who may decide -------------------------------------------


def test_eligible_approvers_exclude_every_author(account, both, approver, make_user, team):
    other = make_user("other", "approver", teams=[team])
    case = _opened_by(both, account)
    proposal = _worker_prepares(case)
    assert [p.username for p in selectors.eligible_approvers(proposal)] == ["approver", "other"]
    assert selectors.why_cannot_decide(proposal, both) == (
        "You opened this case; another approver of the team must decide it."
    )
    assert selectors.why_cannot_decide(proposal, other) == ""


def test_an_author_who_is_no_approver_is_told_the_role_not_the_authorship(
    api, account, agent, approver
):
    """An agent who opened the case was told "You opened this case; another approver of the
    team must decide it", as if being an approver were all that stood in the way; a decision
    then answered "agent may not decide proposals". The role comes first."""
    case = _opened_by(agent, account)
    proposal = _worker_prepares(case)

    assert selectors.why_cannot_decide(proposal, agent) == (
        "Only the team's approvers decide proposals."
    )
    detail = api(agent).get(f"/api/proposals/{proposal.pk}/").json()
    assert detail["why_not"] == "Only the team's approvers decide proposals."
    assert detail["may_decide"] is False


def test_decision_page_shows_an_author_no_buttons_and_names_the_others(
    client, account, both, approver
):
    case = _opened_by(both, account)
    proposal = _worker_prepares(case)
    client.force_login(both)
    body = client.get(reverse("admin:approvals_proposal_change", args=[proposal.pk])).content
    body = body.decode()
    assert "You opened this case; another approver of the team must decide it." in body
    assert "Approve this exact proposal" not in body
    deciders = body[body.index('id="hf-deciders"') :]
    deciders = deciders[: deciders.index("</dd>")]
    assert "approver" in deciders
    assert "both" not in deciders

    before = _snapshot(proposal)
    response = client.post(
        reverse("admin:approvals_proposal_approve", args=[proposal.pk]),
        {"approve-reason": "mine"},
    )
    assert response.status_code == 200  # the page again, saying why
    assert "another approver must decide it" in response.content.decode()
    assert _snapshot(proposal) == before


def test_api_names_the_authors_and_refuses_their_approval_with_own_proposal(
    api, account, both, approver
):
    case = _opened_by(both, account)
    proposal = _worker_prepares(case)
    client = api(both)
    detail = client.get(f"/api/proposals/{proposal.pk}/").json()
    assert detail["authors"] == [{"username": "both", "role": "opened_case"}]
    assert detail["may_decide"] is False
    assert detail["can_decide"] is False
    assert detail["deciders"] == ["approver"]
    assert detail["why_not"] == "You opened this case; another approver of the team must decide it."

    before = _snapshot(proposal)
    response = client.post(f"/api/proposals/{proposal.pk}/approve/", {}, format="json")
    assert response.status_code == 403
    body = response.json()
    assert body["error"] == "own_proposal"
    assert body["roles"] == ["opened_case"]
    assert body["detail"] == f"You opened {case.reference}; another approver must decide it."
    assert _snapshot(proposal) == before

    other = api(approver).get(f"/api/proposals/{proposal.pk}/").json()
    assert other["may_decide"] is True
    response = api(approver).post(f"/api/proposals/{proposal.pk}/approve/", {}, format="json")
    assert response.status_code == 200
    assert response.json()["status"] == "approved"
    assert response.json()["deciders"] == []


# --- the database refuses it too -------------------------------------------------------------


def _approval_fields(proposal) -> dict:
    return {
        "proposal": proposal,
        "proposal_hash": proposal.content_hash,
        "operation": proposal.operation,
        "decision": Approval.Decision.APPROVED,
        "expires_at": timezone.now() + dt.timedelta(hours=1),
    }


@pytest.fixture
def opened_by_both(account, both):
    return _worker_prepares(_opened_by(both, account))


def test_database_refuses_an_approval_by_an_author_inserted_directly(
    opened_by_both, both, approver
):
    fields = _approval_fields(opened_by_both)
    with pytest.raises(IntegrityError, match="approval_not_by_author"), transaction.atomic():
        Approval.objects.create(reference="AP-AUTHOR", decided_by=both, **fields)
    assert not Approval.objects.filter(reference="AP-AUTHOR").exists()
    # The same row decided by someone else is accepted: the refusal was the four-eyes check.
    Approval.objects.create(reference="AP-OTHER", decided_by=approver, **fields)


def test_database_refuses_handing_an_approval_to_an_author(opened_by_both, both, approver):
    approval = services.proposal_approve(proposal=opened_by_both, actor=approver)
    # The owner's repair passes the append-only guards: the four-eyes trigger still refuses.
    with pytest.raises(IntegrityError, match="approval_not_by_author"), maintenance():
        Approval.objects.filter(pk=approval.pk).update(decided_by=both)
    approval.refresh_from_db()
    assert approval.decided_by == approver
    # Revoking the approval (an update that changes no decider) is never refused.
    Approval.objects.filter(pk=approval.pk).update(revoked_at=timezone.now())


def test_database_accepts_a_rejection_row_by_an_author(opened_by_both, both):
    """The trigger guards approvals; the service refuses an author's rejection as well."""
    fields = {**_approval_fields(opened_by_both), "decision": Approval.Decision.REJECTED}
    Approval.objects.create(reference="AP-REJ", decided_by=both, **fields)
