"""Every wait on a person has a follow-up time, from the policy of its kind and reason; it is
at risk in its last stretch, overdue after it, and its person is reminded once per due time.

The walk drives cases through the services into every status and waiting-on combination they
produce, recording each saved version of each case; every one that waits on a person must
carry a clock, and nothing else may.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction
from django.db.models.signals import post_save
from django.test import override_settings
from django.utils import timezone

from approvals import services
from approvals.models import Approval, Proposal
from cases.append_only import maintenance
from cases.exceptions import ActionNotPermitted
from cases.followups import follow_up_for, wait_reason
from cases.inbox import follow_up_policy_set
from cases.kernel import SYSTEM, WAITING_AFTER, Worker, apply_transition, lock_case
from cases.models import (
    PERSON_WAITS,
    TERMINAL_STATUSES,
    Case,
    CustomerAccount,
    FollowUpPolicy,
    FollowUpState,
    Notification,
    Status,
    WaitingOn,
    WaitReason,
)
from cases.next_action import describe_next_action
from cases.reminders import follow_ups_remind_due
from cases.services import account_verify, case_assign, case_transition, staff_set_away
from reconciliation.claims import (
    ClaimRefused,
    attempts_expire_leases,
    case_authorize_apply,
    case_claim,
)
from reconciliation.revocation import case_revoke
from tests.approvals.conftest import in_days, read_order, reload
from tests.support.fixtures import date_change

pytestmark = pytest.mark.django_db


@pytest.fixture
def seen():
    """Every saved version of every case, as (status, waiting_on, reason, follow_up_at)."""
    rows: list[tuple[str, str, str, dt.datetime | None, str]] = []

    def record(sender, instance, **kwargs):
        rows.append(
            (
                instance.status,
                instance.waiting_on,
                instance.follow_up_reason or "",
                instance.follow_up_at,
                instance.reference,
            )
        )

    post_save.connect(record, sender=Case, weak=False)
    yield rows
    post_save.disconnect(record, sender=Case)


def _submitted(case: Case, actor) -> Proposal:
    return services.proposal_prepare(case=read_order(case), actor=actor)


def test_every_wait_on_a_person_the_services_produce_has_a_follow_up(
    seen, make_case, lead, backup, agent, approver, team, settings
):
    settings.ORDER_SYSTEM_URL = "http://orders.invalid"  # never probed: review-only
    # New, waiting for the account's verification.
    unverified = CustomerAccount.objects.create(
        reference="ACC-NEW", name="New customer", team=team, verified=False
    )
    waiting = make_case(account=unverified)
    account_verify(account=unverified, actor=lead)  # then it waits on the order system
    # A draft waits for its author.
    services.proposal_prepare(case=read_order(make_case()), actor=agent, submit=False)
    # Awaiting review, rejected, prepared again by hand and submitted.
    rejected = _submitted(make_case(), agent)
    services.proposal_reject(proposal=rejected, actor=approver, reason="Wrong week")
    case = reload(rejected.case)
    services.proposal_prepare_by_hand(
        case=case,
        actor=lead,
        change=date_change(in_days(9)),
        reason="The customer confirmed the 9th",
        expected_version=case.version,
    )
    # Approved; review-only, so the claim waits for a person to start the apply (supervised).
    approved = _submitted(make_case(), agent)
    services.proposal_approve(proposal=approved, actor=approver)
    with pytest.raises(ClaimRefused):
        case_claim(case_id=approved.case_id, worker=Worker("walk"))
    supervised = reload(approved.case)
    assert supervised.waiting_on == WaitingOn.OWNER
    # Started by a lead, claimed, and its worker lost: held.
    case_authorize_apply(case=supervised, actor=lead, expected_version=supervised.version)
    attempt = case_claim(case_id=supervised.pk, worker=Worker("walk"))
    type(attempt).objects.filter(pk=attempt.pk).update(
        lease_expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    assert attempts_expire_leases() == 1
    held = reload(supervised)
    assert held.status == Status.HELD
    # Revoked while held: still held, waiting on its owner to settle it.
    case_revoke(case=held, actor=lead, reason="customer withdrew", kind="withdrawn")
    # Escalated by a person; held for recovery from it; the review back after an expiry.
    escalated = make_case()
    case_transition(
        case=escalated,
        transition="escalate",
        expected_version=reload(escalated).version,
        reason="The customer wrote again",
        actor=agent,
    )
    with transaction.atomic():
        apply_transition(
            lock_case(escalated.pk), "hold_for_recovery", actor=SYSTEM, reason="restored"
        )
    expired = _submitted(make_case(), agent)
    services.proposal_approve(proposal=expired, actor=approver)
    with maintenance():  # a decided approval never changes: the owner's repair moves its clock
        Approval.objects.filter(proposal=expired).update(
            expires_at=timezone.now() - dt.timedelta(seconds=1)
        )
    assert services.approvals_expire_due() == 1
    assert reload(waiting).status == Status.WAITING_SOURCE

    combinations = {(status, waiting_on) for status, waiting_on, *_ in seen}
    person_waits = {
        (status, waiting_on)
        for status, waiting_on in combinations
        if status not in TERMINAL_STATUSES and waiting_on in PERSON_WAITS
    }
    # Every status that can wait on a person did, in this walk.
    assert person_waits == {
        (Status.NEW, WaitingOn.OWNER),
        (Status.PREPARING_PROPOSAL, WaitingOn.OWNER),
        (Status.AWAITING_REVIEW, WaitingOn.APPROVERS),
        (Status.PROPOSAL_REJECTED, WaitingOn.OWNER),
        (Status.READY, WaitingOn.OWNER),
        (Status.HELD, WaitingOn.OWNER),
        (Status.NEEDS_ATTENTION, WaitingOn.OWNER),
    }, sorted(combinations)
    for status, waiting_on, reason, due, reference in seen:
        expected = wait_reason(status, waiting_on)
        where = f"{reference} {status}/{waiting_on}"
        if expected:
            assert due is not None, f"{where}: waits on a person without a follow-up time"
            assert reason == expected, where
            assert reason != WaitReason.OTHER, where
        else:
            assert (due, reason) == (None, ""), f"{where}: a clock on a case nobody answers"
    # The kernel's own table of waits agrees: each transition that leaves a case waiting on a
    # person names a reason of its own (none falls through to "another wait").
    for name, (waiting_on, _words) in WAITING_AFTER.items():
        if waiting_on in PERSON_WAITS:
            target = _target_of(name)
            assert wait_reason(target, waiting_on) not in {"", WaitReason.OTHER}, name


def _target_of(transition: str) -> str:
    method = getattr(Case, transition)
    meta = method._django_fsm
    return str(next(iter(meta.transitions.values())).target)


def test_a_wait_keeps_its_clock_while_it_goes_on_and_a_new_wait_starts_a_new_one(
    checked_case, agent, approver, lead, submit
):
    proposal = submit(checked_case, agent)
    review = reload(checked_case)
    assert review.follow_up_reason == WaitReason.AWAITING_REVIEW
    # The review deadline is one clock: the next check and the follow-up agree.
    assert review.follow_up_at == review.next_check_at
    # A fact recorded meanwhile (a reassignment) leaves the clock running.
    case_assign(
        case=review,
        expected_version=review.version,
        owner=lead,
        backup=None,
        reason="Lena takes it",
        actor=lead,
    )
    assert reload(checked_case).follow_up_at == review.follow_up_at
    services.proposal_reject(proposal=proposal, actor=approver, reason="No")
    rejected = reload(checked_case)
    assert rejected.follow_up_reason == WaitReason.REJECTED
    assert rejected.follow_up_at > review.follow_up_at


def test_the_policy_of_the_kind_and_reason_sets_the_clock_and_its_at_risk_share(
    checked_case, agent, approver, lead, submit, settings
):
    settings.FOLLOW_UP_MINUTES = {**settings.FOLLOW_UP_MINUTES, "rejected": 600}
    follow_up_policy_set(
        actor=lead, kind="", reason=WaitReason.REJECTED, minutes=40, at_risk_percent=50
    )
    # A policy for another kind does not apply to this case's.
    follow_up_policy_set(
        actor=lead, kind="shipping_address", reason="rejected", minutes=5, at_risk_percent=10
    )
    proposal = submit(checked_case, agent)
    before = timezone.now()
    services.proposal_reject(proposal=proposal, actor=approver, reason="No")
    case = reload(checked_case)
    span = case.follow_up_at - before
    assert dt.timedelta(minutes=39, seconds=59) < span <= dt.timedelta(minutes=40, seconds=1)
    assert case.follow_up_at - case.follow_up_risk_at == dt.timedelta(minutes=20)
    assert case.follow_up_state(case.follow_up_risk_at - dt.timedelta(seconds=1)) == "on_time"
    assert case.follow_up_state(case.follow_up_risk_at) == FollowUpState.AT_RISK
    assert describe_next_action(case, now=case.follow_up_risk_at).at_risk is True
    assert Case.objects.at_risk(now=case.follow_up_risk_at).filter(pk=case.pk).exists()
    grace = dt.timedelta(minutes=settings.FOLLOW_UP_GRACE_MINUTES, seconds=1)
    late = case.follow_up_at + grace
    assert case.follow_up_state(late) == FollowUpState.OVERDUE
    assert Case.objects.overdue(now=late).filter(pk=case.pk).exists()
    assert describe_next_action(case, now=late).follow_up.startswith("Follow-up is overdue since")


def test_without_a_policy_the_settings_default_applies(checked_case, agent, approver, submit):
    with override_settings(APPROVAL_REVIEW_SLA_MINUTES=17):
        proposal = submit(checked_case, agent)
    assert proposal.submitted_at is not None
    case = reload(checked_case)
    assert case.follow_up_at == proposal.submitted_at + dt.timedelta(minutes=17)
    clock = follow_up_for(case, WaitReason.HELD, start=proposal.submitted_at)
    assert clock.due_at == proposal.submitted_at + dt.timedelta(minutes=60)


def test_only_leads_set_follow_up_policies(agent, approver, lead):
    for person in (agent, approver):
        with pytest.raises(ActionNotPermitted):
            follow_up_policy_set(
                actor=person, kind="", reason="held", minutes=5, at_risk_percent=25
            )
    follow_up_policy_set(actor=lead, kind="", reason="held", minutes=5, at_risk_percent=25)
    follow_up_policy_set(actor=lead, kind="", reason="held", minutes=7, at_risk_percent=25)
    assert list(FollowUpPolicy.objects.values_list("minutes", "updated_by")) == [(7, lead.pk)]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("minutes", "0", "From 1 to 527,040 minutes (a year)."),
        ("minutes", "99999999999", "From 1 to 527,040 minutes (a year)."),
        ("at_risk_percent", "150", "From 0 to 99."),
        ("kind", "x" * 40, "Select a valid choice."),
    ],
)
def test_the_policy_form_says_what_is_wrong_beside_the_field(client, lead, field, value, message):
    """The form answered 'Constraint "follow_up_policy_minutes_positive" is violated.' and took
    a kind no desk offers and 99,999,999,999 minutes (a policy leads cannot delete)."""
    from django.urls import reverse

    from cases.models import FollowUpPolicy

    client.force_login(lead)
    data = {"reason": "held", "kind": "", "minutes": "30", "at_risk_percent": "25", field: value}

    response = client.post(reverse("admin:cases_followuppolicy_add"), data)

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert any(m.startswith(message) for m in errors[field]), errors
    assert "Constraint" not in response.content.decode()
    assert not FollowUpPolicy.objects.exists()


def test_the_policy_form_offers_the_desks_kinds_by_name_and_the_services_bounds(client, lead):
    """The kind was a free-text field for a code ("delivery_date"), and the minutes field let
    the browser offer 0, which the server refused."""
    from django.urls import reverse

    from cases import kinds

    client.force_login(lead)
    form = client.get(reverse("admin:cases_followuppolicy_add")).context["adminform"].form

    offered = list(form.fields["kind"].choices)
    assert offered[0] == ("", "Any kind without a policy of its own")
    assert offered[1:] == kinds.choices()
    assert all(label != code for code, label in offered[1:])
    assert form.fields["minutes"].widget.attrs["min"] == 1
    assert form.fields["at_risk_percent"].widget.attrs["max"] == 99


def test_a_passed_follow_up_reminds_the_person_responsible_once(
    checked_case, agent, approver, backup, lead, submit
):
    proposal = submit(checked_case, agent)
    services.proposal_reject(proposal=proposal, actor=approver, reason="No")
    case = reload(checked_case)
    staff_set_away(user=lead, away_until=timezone.localdate(), actor=lead)
    version = reload(case).version
    assert follow_ups_remind_due(now=case.follow_up_at - dt.timedelta(seconds=1)) == 0
    assert follow_ups_remind_due(now=case.follow_up_at) == 1
    assert follow_ups_remind_due(now=case.follow_up_at + dt.timedelta(hours=1)) == 0
    reminded = reload(case)
    assert reminded.version == version + 1
    assert reminded.follow_up_reminded_at is not None
    event = reminded.events.order_by("-id").first()
    assert event.action == "cases.follow_up.due"
    told = Notification.objects.filter(event=event)
    # The owner is away: the named backup is the person responsible now.
    assert [(n.recipient, n.kind) for n in told] == [(backup, "follow_up_due")]


def test_a_follow_up_of_a_review_reminds_the_approvers_who_may_decide(
    checked_case, agent, approver, lead, submit
):
    submit(checked_case, agent)
    case = reload(checked_case)
    assert follow_ups_remind_due(now=case.follow_up_at) == 1
    event = reload(case).events.order_by("-id").first()
    told = set(Notification.objects.filter(event=event).values_list("recipient", flat=True))
    assert told == {lead.pk, approver.pk}


def test_a_case_that_stops_waiting_on_a_person_loses_its_clock(
    checked_case, agent, approver, submit
):
    proposal = submit(checked_case, agent)
    services.proposal_approve(proposal=proposal, actor=approver)
    ready = reload(checked_case)
    assert ready.waiting_on == WaitingOn.WORKER
    assert (ready.follow_up_reason, ready.follow_up_at, ready.follow_up_risk_at) == (
        None,
        None,
        None,
    )
    assert ready.follow_up_state() == FollowUpState.NONE
