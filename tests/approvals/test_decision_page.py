"""The approver's decision page: what a decision rests on, who may decide, and real forms.

The browser proof that the buttons work is ``tests/browser/test_decision_page_browser.py``; these
tests pin the content and the HTML structure with the Django test client.
"""

from __future__ import annotations

import datetime as dt
import html
from html.parser import HTMLParser

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from approvals import selectors, services
from approvals.models import Approval, Proposal
from cases.models import Case
from cases.next_action import describe_next_action
from tests.support.fixtures import (
    address_change,
    cancellation_change,
    date_change,
    requested_date,
)

from .conftest import in_days, read_order, reload

NOTE = "Please deliver on Friday instead; the loading dock is closed on Thursday."
SLOT = "Slot {date}: 1 of 5 taken"


def _page(client, user, proposal) -> str:
    client.force_login(user)
    response = client.get(reverse("admin:approvals_proposal_change", args=[proposal.pk]))
    assert response.status_code == 200
    return response.content.decode()


def _named(user, first: str, last: str):
    user.first_name, user.last_name = first, last
    user.save()
    return user


@pytest.fixture
def noted_proposal(make_case, agent, approver, lead):
    """A proposal by the agent for a case with a customer's note, with the kind's advice."""
    _named(approver, "Ari", "Approver")
    case = read_order(make_case(note=NOTE))
    date = requested_date(case)
    return services.proposal_prepare(
        case=case, actor=agent, advisory_note=SLOT.format(date=f"{date:%Y-%m-%d}")
    )


class _FormTree(HTMLParser):
    """Records, for every form, the forms it is nested in and the controls inside it."""

    def __init__(self):
        super().__init__()
        self.stack: list[dict] = []
        self.forms: list[dict] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            form = {"id": attrs.get("id"), "parents": [f["id"] for f in self.stack]}
            form.update(controls=[], buttons=[], action=attrs.get("action"))
            self.forms.append(form)
            self.stack.append(form)
        elif self.stack and tag in {"input", "textarea", "select"}:
            self.stack[-1]["controls"].append(attrs.get("name"))
        elif self.stack and tag == "button":
            self.stack[-1]["buttons"].append(attrs.get("type"))

    def handle_endtag(self, tag):
        if tag == "form" and self.stack:
            self.stack.pop()


def _forms(body: str) -> dict[str | None, dict]:
    tree = _FormTree()
    tree.feed(body)
    return {form["id"]: form for form in tree.forms}


# --- content --------------------------------------------------------------------------------


def test_page_shows_the_value_now_and_the_change_the_note_the_advice_and_exact_expiry(
    client, approver, noted_proposal, settings
):
    case = reload(noted_proposal.case)
    assert case.order_seen == {"delivery_date": in_days(3).isoformat()}
    before = services.approval_expiry_bounds()
    body = _page(client, approver, noted_proposal)
    after = services.approval_expiry_bounds()

    current = body.index('id="hf-current-value"')
    requested = body.index('id="hf-requested-value"')
    assert f"delivery on {in_days(3):%a %Y-%m-%d}" in body[current:requested]
    assert "order version 1" in body[current:requested]
    assert (
        f"the delivery moves to {requested_date(case):%A %d %B %Y}"
        in (body[requested : requested + 300])
    )
    assert "the loading dock is closed on Thursday." in body
    assert 'id="hf-irreversible"' not in body
    captured = timezone.localtime(noted_proposal.created_at)
    assert (
        f"{SLOT.format(date=f'{requested_date(case):%Y-%m-%d}')} (advisory, captured "
        f"{captured:%Y-%m-%d %H:%M} UTC" in body
    )
    assert f"order:{case.order_id}@v1" in body  # the evidence reference it rests on
    assert any(
        f"expires by default at {default:%Y-%m-%d %H:%M} UTC (latest allowed "
        f"{latest:%Y-%m-%d %H:%M} UTC)" in body
        for default, latest in (before, after)
    )
    assert "Approve this exact proposal" in body


def test_page_says_not_checked_when_no_advice_was_captured(client, approver, checked_case, agent):
    proposal = services.proposal_prepare(case=reload(checked_case), actor=agent)
    assert proposal.advisory_note == ""
    body = _page(client, approver, proposal)
    assert '<dd id="hf-advice">not checked</dd>' in body


def test_a_cancellation_says_before_approval_that_it_cannot_be_undone(
    client, approver, make_case, agent
):
    case = read_order(make_case(change=cancellation_change("duplicate")))
    proposal = services.proposal_prepare(case=case, actor=agent)

    body = _page(client, approver, proposal)

    assert 'id="hf-irreversible"' in body
    assert "This cannot be undone." in body
    assert "Approve this exact proposal (cannot be undone)" in body
    assert "the order is cancelled (a duplicate order); this cannot be undone" in body
    current = body.index('id="hf-current-value"')
    assert "order open" in body[current : current + 300]


def test_page_says_when_the_customer_left_no_note(client, approver, proposal):
    body = _page(client, approver, proposal)
    assert '<dd id="hf-note">No note from the customer.</dd>' in body


def test_eligible_approvers_are_the_teams_approvers_other_than_the_preparer_in_one_query(
    own_proposal,
    preparer,
    approver,
    make_user,
    team,
    far_approver,
    lead,
    auditor,
    django_assert_num_queries,
):
    _named(approver, "Ari", "Approver")
    direct = make_user("dana", "agent", teams=[team], first_name="Dana", last_name="Direct")
    direct.user_permissions.add(Permission.objects.get(codename="approve_proposal"))
    gone = make_user("gone", "approver", teams=[team], is_active=False)
    make_user("root", "agent", teams=[team], is_superuser=True)
    outside_root = make_user("admin", "agent", is_superuser=True)
    assert gone.has_perm("approvals.approve_proposal") is False  # inactive

    with django_assert_num_queries(1):
        people = selectors.eligible_approvers(own_proposal)

    assert [p.username for p in people] == ["approver", "dana", "root"]
    assert preparer not in people  # holds the permission, but prepared it
    assert far_approver not in people
    assert outside_root not in people
    assert lead not in people
    assert auditor not in people
    # The list agrees with the rule the service enforces.
    for user in get_user_model().objects.all():
        may = services.actor_may(user, "approvals.approve_proposal", own_proposal.case)
        expected = may and user.pk != preparer.pk and user.pk != outside_root.pk
        assert (user in people) is expected, user.username


def test_page_names_who_may_decide_with_full_names_and_usernames(
    client, approver, own_proposal, preparer, far_approver
):
    _named(approver, "Ari", "Approver")
    body = _page(client, approver, own_proposal)
    deciders = body[body.index('id="hf-deciders"') :]
    deciders = deciders[: deciders.index("</dd>")]
    assert "Ari Approver (approver)" in deciders
    assert "pat" not in deciders  # the preparer never decides their own proposal
    assert "far" not in deciders


def test_page_says_nobody_may_decide_when_the_only_approver_prepared_it(
    client, own_proposal, preparer
):
    body = _page(client, preparer, own_proposal)
    assert "Nobody: no one of Deliveries other than the preparer holds the approve permission." in (
        body
    )


# --- who sees buttons -----------------------------------------------------------------------


def test_the_decision_forms_are_real_forms_outside_the_change_form(client, approver, proposal):
    forms = _forms(_page(client, approver, proposal))
    approve, reject = forms["hf-approve"], forms["hf-reject"]
    assert approve["parents"] == []
    assert reject["parents"] == []
    assert approve["action"] == reverse("admin:approvals_proposal_approve", args=[proposal.pk])
    assert reject["action"] == reverse("admin:approvals_proposal_reject", args=[proposal.pk])
    assert set(approve["controls"]) == {
        "csrfmiddlewaretoken",
        "approve-expires_at",
        "approve-reason",
    }
    assert set(reject["controls"]) == {"csrfmiddlewaretoken", "reject-reason"}
    assert approve["buttons"] == ["submit"]
    assert reject["buttons"] == ["submit"]
    assert "proposal_form" in forms  # the admin's own change form is still there, separately


def test_preparer_sees_why_and_who_may_decide_but_no_buttons(
    client, own_proposal, preparer, approver
):
    body = _page(client, preparer, own_proposal)
    assert (
        "<strong>No decision buttons:</strong> You prepared this proposal; another approver of "
        "the team must decide it." in body
    )
    assert "approver" in body[body.index('id="hf-deciders"') :]
    assert "Approve this exact proposal" not in body
    forms = _forms(body)
    assert "hf-approve" not in forms
    assert "hf-reject" not in forms


def test_team_member_without_the_approve_permission_sees_why_and_no_buttons(
    client, auditor, proposal
):
    body = _page(client, auditor, proposal)
    assert "Only the team&#x27;s approvers decide proposals." in body
    assert "hf-approve" not in _forms(body)


def test_an_other_teams_user_gets_404_from_the_decisions_and_never_sees_the_page(
    client, outsider, far_approver, proposal
):
    for user in (outsider, far_approver):
        client.force_login(user)
        page = client.get(reverse("admin:approvals_proposal_change", args=[proposal.pk]))
        assert page.status_code == 302  # the admin's "doesn't exist", as for a missing one
        assert "Decide: move" not in page.content.decode()
        approve = client.post(
            reverse("admin:approvals_proposal_approve", args=[proposal.pk]),
            {"approve-reason": "looks fine"},
        )
        reject = client.post(
            reverse("admin:approvals_proposal_reject", args=[proposal.pk]),
            {"reject-reason": "no"},
        )
        assert approve.status_code == 404
        assert reject.status_code == 404
    assert not Approval.objects.filter(proposal=proposal).exists()
    assert Proposal.objects.get(pk=proposal.pk).status == Proposal.Status.AWAITING_REVIEW


def test_approving_from_the_page_shows_the_approval_reference(client, approver, proposal):
    client.force_login(approver)
    response = client.post(
        reverse("admin:approvals_proposal_approve", args=[proposal.pk]),
        {"approve-reason": "Slot is free"},
        follow=True,
    )
    approval = Approval.objects.get(proposal=proposal)
    until = timezone.localtime(approval.expires_at)
    assert (
        f"{approval.reference} approves {proposal.case.reference} until {until:%Y-%m-%d %H:%M %Z}."
        in response.content.decode()
    )
    assert "This proposal is approved; nothing to decide." in response.content.decode()


def test_a_decided_proposal_is_headed_by_its_decision_and_says_the_order_was_read_since(
    client, approver, proposal
):
    """It was still headed "Decide: …", and its order value read "not recorded" once the case
    had read the order again."""
    services.proposal_approve(proposal=proposal, actor=approver)
    Case.objects.filter(pk=proposal.case_id).update(
        last_checked_order_version=proposal.evidence_order_version + 1
    )

    body = _page(client, approver, proposal)

    assert f"Approved: {proposal.order_id} — {proposal.description}" in body
    assert "Decide: " not in body
    current = body[body.index('id="hf-current-value"') :][:600]
    assert (
        f"The order as this proposal read it (order version {proposal.evidence_order_version})"
        in current
    )
    assert (
        f"the case has read the order again since (version {proposal.evidence_order_version + 1})"
        in current
    )


def test_a_case_with_no_order_read_on_record_is_not_said_to_have_read_it_again(
    client, approver, proposal
):
    """It said "the case has read the order again since (version None)" for a case whose
    last check of the order was not on record."""
    Case.objects.filter(pk=proposal.case_id).update(
        last_checked_order_version=None, order_seen=None
    )

    body = _page(client, approver, proposal)

    current = body[body.index('id="hf-current-value"') :][:600]
    assert "version None" not in body
    assert "read the order again" not in current
    assert "not recorded" in current


@pytest.mark.parametrize(
    ("typed", "why"),
    [
        ("2020-01-01T10:00", "The approval must expire after now"),  # refused by the service
        ("not a date", "Check the form: Expires at (UTC): Enter a valid date/time."),  # the form
    ],
)
def test_a_refused_approval_keeps_what_was_typed_and_says_why(
    client, approver, proposal, typed, why
):
    """A redirect emptied the expiry and the reason."""
    client.force_login(approver)

    response = client.post(
        reverse("admin:approvals_proposal_approve", args=[proposal.pk]),
        {"approve-expires_at": typed, "approve-reason": "Customer confirmed by phone"},
    )

    assert response.status_code == 200
    body = response.content.decode()
    assert why in body
    assert f'value="{typed}"' in body
    assert "Customer confirmed by phone" in body
    assert not Approval.objects.filter(proposal=proposal).exists()


def test_the_expiry_field_names_the_time_zone_it_is_read_in(client, approver, proposal):
    client.force_login(approver)

    body = client.get(reverse("admin:approvals_proposal_change", args=[proposal.pk])).content

    assert b"Expires at (UTC)" in body
    assert b"A date and time in UTC." in body


# --- the review deadline ----------------------------------------------------------------------


def test_submitting_for_review_sets_the_follow_up_to_the_review_deadline(
    checked_case, agent, settings
):
    settings.APPROVAL_REVIEW_SLA_MINUTES = 25
    proposal = services.proposal_prepare(case=reload(checked_case), actor=agent)
    case = reload(checked_case)
    assert case.status == "awaiting_review"
    assert case.next_check_at == proposal.submitted_at + dt.timedelta(minutes=25)
    event = case.events.filter(to_status="awaiting_review").get()
    assert event.detail["review_due_at"] == case.next_check_at.isoformat()

    just_before = case.next_check_at - dt.timedelta(seconds=1)
    assert not Case.objects.overdue(now=just_before).filter(pk=case.pk).exists()
    assert not describe_next_action(case, now=just_before).follow_up.startswith("Follow-up is")
    # "Overdue" allows the follow-up grace the case desk gives any due time.
    grace = dt.timedelta(minutes=getattr(settings, "FOLLOW_UP_GRACE_MINUTES", 0))
    late = case.next_check_at + grace + dt.timedelta(seconds=1)
    assert Case.objects.overdue(now=late).filter(pk=case.pk).exists()
    assert describe_next_action(case, now=late).follow_up.startswith("Follow-up is overdue since")


def test_submitting_a_draft_later_counts_the_deadline_from_the_submission(
    checked_case, agent, settings
):
    settings.APPROVAL_REVIEW_SLA_MINUTES = 60
    draft = services.proposal_prepare(case=reload(checked_case), actor=agent, submit=False)
    assert reload(checked_case).next_check_at is None
    submitted = services.proposal_submit(proposal=draft, actor=agent)
    case = reload(checked_case)
    assert case.next_check_at == submitted.submitted_at + dt.timedelta(minutes=60)


def test_a_decision_ends_the_review_deadline(proposal, approver, agent, make_case):
    due = reload(proposal.case).next_check_at
    assert due is not None
    services.proposal_approve(proposal=proposal, actor=approver)
    approved = reload(proposal.case)
    assert approved.status == "ready"
    assert approved.next_check_at < due

    rejected_case = read_order(make_case())
    rejected = services.proposal_prepare(case=rejected_case, actor=agent)
    assert reload(rejected_case).next_check_at is not None
    services.proposal_reject(proposal=rejected, actor=approver, reason="Wrong date")
    after_reject = reload(rejected_case)
    # Left set, the dispatcher would prepare a proposal on its own when the deadline passed;
    # the person who prepares the next one has a follow-up instead.
    assert after_reject.status == "proposal_rejected"
    assert after_reject.next_check_at is None
    assert after_reject.follow_up_reason == "rejected"
    assert after_reject.follow_up_at is not None


def test_a_changed_intent_during_review_ends_the_review_deadline(proposal, agent):
    case = reload(proposal.case)
    assert case.next_check_at is not None
    services.case_change_intent(
        case=case,
        actor=agent,
        change=date_change(requested_date(case) + dt.timedelta(days=1)),
        reason="The customer asked for the day after",
        expected_version=case.version,
    )
    revised = reload(case)
    assert revised.status == "preparing_proposal"
    assert revised.next_check_at is None


def test_the_case_page_names_the_operation_that_counts_apart_from_earlier_ones(
    client, proposal, approver, agent, lead
):
    # Listed together before, beside "the same key across re-approval…": two keys under a
    # sentence that says there is one.
    case = reload(proposal.case)
    services.proposal_reject(proposal=proposal, actor=approver, reason="Wrong date")
    other = date_change(requested_date(case) + dt.timedelta(days=1))
    second = services.proposal_prepare(case=reload(case), actor=agent, change=other)
    client.force_login(lead)

    body = client.get(reverse("admin:cases_case_change", args=[case.pk])).content.decode()

    first_key, second_key = proposal.operation.key, second.operation.key
    assert second_key != first_key
    assert (
        f"<dd>{second_key} (kept by this proposal's retries and takeovers; a changed "
        "proposal gets a new key); "
        f"earlier: {first_key}</dd>"
    ) in body


def test_a_proposal_whose_case_was_escalated_offers_no_decision_anywhere(
    client, api, approver, agent, proposal
):
    """The agent escalated the case while its proposal awaited review: the page offered
    Approve and Reject and named who may decide, and Approve then answered "… and the case is
    needs attention: there is nothing to decide". The page, the API's row and the service now
    say the same thing, in the same words, until the case awaits review again."""
    from cases.services import case_transition

    case = proposal.case
    case_transition(
        case=case,
        transition="escalate",
        expected_version=case.version,
        reason="The customer asks for a person",
        actor=agent,
    )
    why = (
        f"Its case {case.reference} is at \u201cNeeds attention\u201d, not awaiting review: "
        "nothing to decide until the case awaits review again."
    )
    body = _page(client, approver, proposal)
    assert "<strong>No decision buttons:</strong> " + why in body, body
    assert "hf-approve" not in _forms(body)
    assert 'id="hf-deciders"' not in body  # nobody may decide it now
    assert "Decide:" not in body

    row = api(approver).get("/api/proposals/", {"case": case.reference}).json()["results"][0]
    assert (row["may_decide"], row["why_not"], row["deciders"]) == (False, why, [])

    with pytest.raises(services.ProposalNotCurrent) as refused:
        services.proposal_approve(proposal=Proposal.objects.get(pk=proposal.pk), actor=approver)
    assert str(refused.value) == f"Proposal #{proposal.pk}: {why}"
    assert not Approval.objects.filter(proposal=proposal).exists()


def test_the_case_page_offers_its_decision_to_who_may_decide_it(
    client, approver, agent, auditor, proposal
):
    """The case page named the approver under "Who must answer" and told that approver
    "Nothing for you to do here: it waits on Ari Approver (approver)", with no way to the
    decision but a "View" link in the proposal history. Who may decide the proposal now gets
    a button to its page; who may not (its author, a reader) gets none."""
    case = proposal.case
    url = reverse("admin:cases_case_change", args=[case.pk])
    decide = reverse("admin:approvals_proposal_change", args=[proposal.pk])

    client.force_login(approver)
    body = client.get(url).content.decode()
    assert f'<a class="button default" id="hf-decide" href="{decide}">' in body, body
    assert f"Decide proposal #{proposal.pk}: approve or reject the exact change" in body
    assert "Nothing for you to do here" not in body

    for other in (agent, auditor):  # the agent opened the case; the auditor only reads
        client.force_login(other)
        body = client.get(url).content.decode()
        assert 'id="hf-decide"' not in body, other


def test_history_of_a_proposal_and_of_its_case_opens_the_case_timeline(
    client, approver, outsider, noted_proposal
):
    """The "History" button of the case page and of the proposal page opened Django's history
    page, which read "This object doesn't have a change history": nothing there is edited
    through the admin's form. Both now open the case's timeline, from the audit trail; another
    team's id is answered as an id that does not exist."""
    case = noted_proposal.case
    timeline = reverse("admin:cases_case_change", args=[case.pk]) + "#timeline"
    histories = [
        reverse("admin:approvals_proposal_history", args=[noted_proposal.pk]),
        reverse("admin:cases_case_history", args=[case.pk]),
    ]
    client.force_login(approver)
    for history in histories:
        response = client.get(history)
        assert response.status_code == 302, history
        assert response["Location"] == timeline
    page = client.get(timeline.split("#")[0]).content.decode()
    assert '<div id="timeline" data-live-region="timeline">' in page
    assert "Submitted proposal #" in page

    client.force_login(outsider)
    for history in histories:
        response = client.get(history, follow=True)
        assert response.redirect_chain[0][0] == reverse("admin:index"), history
        assert "doesn’t exist" in response.content.decode()


def test_an_applied_proposal_says_its_own_write_moved_the_order_and_when_it_was_applied(
    client, approver, proposal
):
    """Applied, its page said "the case has read the order again since (version 2)" beside
    evidence of version 1 only, and "Closed at: –": version 2 was this proposal's own write,
    and an applied proposal is not closed, it is applied."""
    from approvals.models import Operation

    services.proposal_approve(proposal=proposal, actor=approver)
    made = proposal.evidence_order_version + 1
    confirmed = timezone.now()
    Operation.objects.filter(pk=proposal.operation_id).update(
        confirmed_at=confirmed, result_order_version=made
    )
    Case.objects.filter(pk=proposal.case_id).update(last_checked_order_version=made)

    body = _page(client, approver, proposal)

    current = body[body.index('id="hf-current-value"') :][:700]
    assert f"this change was applied since and made order version {made}" in current
    assert "read the order again" not in current
    assert "Closed at" not in body
    stamp = f"{timezone.localtime(confirmed):%Y-%m-%d %H:%M:%S %Z}"
    assert (
        f"Applied to the order by operation {proposal.operation.key}, confirmed at {stamp}, "
        f"which made order version {made}." in body
    )


def test_an_open_and_a_rejected_proposal_say_their_outcome(client, approver, proposal):
    assert "Open: not decided yet." in _page(client, approver, proposal)

    services.proposal_reject(proposal=proposal, actor=approver, reason="Not what was asked")
    proposal.refresh_from_db()

    stamp = f"{timezone.localtime(proposal.closed_at):%Y-%m-%d %H:%M:%S %Z}"
    assert f"Rejected at {stamp}." in _page(client, approver, proposal)


def test_the_case_and_decision_pages_name_the_other_open_cases_on_the_same_order(
    client, approver, lead, make_case, agent
):
    """A cancellation and a date change of one order were open together and neither page
    said so: the approver approved the date change with no word of the cancellation beside
    it. Both pages now name the other open cases on the order; a closed one is not named."""
    from cases.services import case_transition

    date_case = read_order(make_case(order_id="ORD-7731"))
    cancel_case = make_case(order_id="ORD-7731", change=cancellation_change())
    closed = make_case(order_id="ORD-7731", change=address_change())
    case_transition(
        case=closed,
        transition="cancel",
        expected_version=closed.version,
        actor=lead,
        reason="The customer withdrew it",
    )
    other_order = make_case(order_id="ORD-7731-2", change=cancellation_change())
    proposal = services.proposal_prepare(case=date_case, actor=agent)

    decision = _page(client, approver, proposal)
    case_page = client.get(reverse("admin:cases_case_change", args=[date_case.pk]))

    for body in (decision, case_page.content.decode()):
        same = body[body.index('id="hf-same-order"') :][:900]
        assert "Also open on ORD-7731" in body
        assert f">{cancel_case.reference}</a>: Order cancellation, " in same
        assert closed.reference not in same
        assert other_order.reference not in same
        assert "Whichever is applied first moves the order to a new version" in same
    alone = client.get(reverse("admin:cases_case_change", args=[other_order.pk]))
    assert 'id="hf-same-order"' not in alone.content.decode()


def test_an_away_approver_is_named_as_away_and_everyone_away_is_said(
    client, approver, lead, noted_proposal
):
    """With the only approver away, the decision page still listed them under "Who may
    decide" and the case page named them as who must answer, as if they were at their desk:
    their cases fall to their backups, but a decision is nobody's backup's."""
    from cases.services import staff_set_away

    until = timezone.localdate() + dt.timedelta(days=3)
    case = noted_proposal.case
    case_url = reverse("admin:cases_case_change", args=[case.pk])
    client.force_login(lead)
    present = client.get(case_url).content.decode()
    assert "away until" not in present[present.index('id="hf-who"') :][:400]

    staff_set_away(user=approver, away_until=until, actor=lead)

    decision = _page(client, lead, noted_proposal)
    deciders = decision[decision.index('id="hf-deciders"') :][:400]
    assert f"Ari Approver (approver, away until {until:%Y-%m-%d})" in deciders
    who = client.get(case_url).content.decode()
    who = who[who.index('id="hf-who"') :][:600]
    assert f"Ari Approver (approver, away until {until:%Y-%m-%d})" in who
    assert "everyone who may decide is away" in who
    assert f"{describe_next_action(case).who_must_answer}" in html.unescape(who)
