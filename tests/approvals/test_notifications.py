"""The person who must act is told: a notification row in the same transaction as the event
that causes it, once per event and recipient, never to the actor, shown in their inbox."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Group
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from approvals import services
from cases.exceptions import CaseError
from cases.inbox import (
    cases_to_answer,
    notification_open,
    notifications_mark_read,
    preferences_set,
    unread_count,
)
from cases.kernel import SYSTEM, apply_transition, lock_case
from cases.models import CaseEvent, Notification, NotificationKind, Status
from cases.services import (
    case_assign,
    case_cancel_request,
    case_open,
    case_transition,
    staff_set_away,
)
from tests.approvals.conftest import reload
from tests.support.fixtures import date_change

pytestmark = pytest.mark.django_db


def _told(event: CaseEvent) -> set[tuple[str, str]]:
    return {
        (n.recipient.username, n.kind)
        for n in Notification.objects.filter(event=event).select_related("recipient")
    }


def _last_event(case) -> CaseEvent:
    return CaseEvent.objects.filter(case=case).order_by("-id").first()


@pytest.fixture
def second_approver(make_user, team):
    return make_user("ari2", "approver", teams=[team])


@pytest.fixture
def dual(make_user, team):
    """A lead who is also an approver: may decide others' proposals, never their own."""
    user = make_user("dual", "lead", teams=[team])
    user.groups.add(Group.objects.get(name="approver"))
    return user


def test_a_proposal_awaiting_review_tells_each_eligible_approver_by_name(
    checked_case, dual, approver, second_approver, submit
):
    proposal = submit(checked_case, dual)  # dual prepared it: four eyes leave them out
    event = CaseEvent.objects.get(case=checked_case, to_status=Status.AWAITING_REVIEW)
    assert _told(event) == {
        ("approver", "awaiting_review"),
        ("ari2", "awaiting_review"),
    }
    mail = Notification.objects.get(event=event, recipient=approver)
    assert mail.link == reverse("admin:approvals_proposal_change", args=[proposal.pk])
    assert mail.email_state == Notification.Email.PENDING
    assert mail.email_due_at is not None
    assert mail.case_id == checked_case.pk


def test_rejected_held_and_needs_attention_tell_the_responsible_person_or_the_backup(
    checked_case, agent, approver, lead, backup, submit
):
    proposal = submit(checked_case, agent)
    services.proposal_reject(proposal=proposal, actor=approver, reason="Wrong week")
    assert _told(_last_event(checked_case)) == {("lead", "rejected")}

    staff_set_away(user=lead, away_until=timezone.localdate(), actor=lead)
    with transaction.atomic():
        apply_transition(lock_case(checked_case.pk), "escalate", actor=SYSTEM, reason="stuck")
    assert _told(_last_event(checked_case)) == {("backup", "needs_attention")}
    text = Notification.objects.get(recipient=backup, kind="needs_attention").text
    assert text.startswith(f"{checked_case.reference} needs attention")


def test_an_owner_going_away_tells_the_backup_of_each_case_that_waits_on_them(
    checked_case, make_case, agent, approver, lead, backup, submit
):
    """The owner was told their rejected proposal waits on them; they go away: the backup, who
    is responsible now, is told, once, with the hand-over's reason. A case that waits on nobody's
    answer (here a new one, waiting on the workers) tells nobody now; a person who is back
    (responsibility returns) tells nobody either."""
    proposal = submit(checked_case, agent)
    services.proposal_reject(proposal=proposal, actor=approver, reason="Wrong week")
    assert reload(checked_case).waiting_on == "owner"
    quiet = make_case()
    assert reload(quiet).waiting_on != "owner"
    until = timezone.localdate() + dt.timedelta(days=2)

    staff_set_away(user=lead, away_until=until, actor=lead)

    handed = Notification.objects.get(kind="handed_over")
    assert (handed.recipient, handed.case_id) == (backup, checked_case.pk)
    assert handed.text.startswith(f"{checked_case.reference} waits on you now: its owner is away")
    assert "the named backup" in handed.text
    assert handed.link == reverse("admin:cases_case_change", args=[checked_case.pk])
    assert handed.email_state == Notification.Email.PENDING
    assert CaseEvent.objects.filter(
        case=quiet, action="cases.case.responsibility_to_backup"
    ).exists()  # the quiet case's hand-over is on its timeline, and told nobody

    staff_set_away(user=lead, away_until=until, actor=lead)  # no change: nothing again
    staff_set_away(user=lead, away_until=None, actor=lead)  # back
    assert Notification.objects.filter(kind="handed_over").count() == 1


def test_a_case_waiting_on_its_owner_tells_whom_it_is_assigned_to(
    checked_case, make_case, agent, approver, lead, backup, submit
):
    """An agent made owner of a case that waited on its owner saw it under "Mine to answer
    now" and nothing in their inbox. A case that waits on nobody's answer tells nobody."""
    proposal = submit(checked_case, agent)
    services.proposal_reject(proposal=proposal, actor=approver, reason="Wrong week")
    case = reload(checked_case)
    quiet = reload(make_case())

    case_assign(
        case=case,
        expected_version=case.version,
        owner=agent,
        backup=backup,
        reason="Ada knows this customer",
        actor=lead,
    )
    case_assign(
        case=quiet,
        expected_version=quiet.version,
        owner=agent,
        backup=backup,
        reason="Ada knows this customer",
        actor=lead,
    )

    told = Notification.objects.get(kind="assigned")
    assert (told.recipient, told.case_id) == (agent, case.pk)
    assert told.text == (
        f"{case.reference} waits on you now: it was assigned to you (Ada knows this customer)"
    )
    case = reload(case)
    case_assign(  # the backup changes, not who is responsible: nobody again
        case=case, expected_version=case.version, owner=agent, backup=lead, reason="", actor=lead
    )
    assert Notification.objects.filter(kind="assigned").count() == 1


def test_nobody_is_told_of_their_own_action(case, lead):
    case_transition(
        case=case,
        transition="escalate",
        expected_version=reload(case).version,
        reason="I look at it myself",
        actor=lead,
    )
    assert not Notification.objects.exists()


def test_done_or_cancelled_tells_the_staff_member_who_opened_it_not_an_integration(
    account, agent, lead, make_user
):
    integration = make_user("integration", "agent", is_staff=False)
    account.team.members.add(integration)
    change = date_change(timezone.localdate() + timezone.timedelta(days=7))
    by_agent, _ = case_open(
        actor=agent,
        account=account,
        request_key="phone-1",
        order_id="ORD-7731",
        kind="delivery_date",
        change=change,
    )
    by_api, _ = case_open(
        actor=integration,
        account=account,
        request_key="api-1",
        order_id="ORD-7732",
        kind="delivery_date",
        change=change,
    )
    assert (by_agent.opened_by, by_api.opened_by) == (agent, None)
    for case in (by_agent, by_api):
        case_cancel_request(case=case, actor=lead, reason="The customer called", via="admin")
    assert _told(_last_event(by_agent)) == {("agent", "cancelled")}
    assert _told(_last_event(by_api)) == set()


def test_a_rolled_back_step_leaves_no_notification(checked_case, agent, approver, submit):
    proposal = submit(checked_case, agent)
    Notification.objects.all().delete()
    written = []

    def reject_then_fail() -> None:
        with transaction.atomic():
            services.proposal_reject(proposal=proposal, actor=approver, reason="No")
            written.append(Notification.objects.count())
            raise RuntimeError("the caller's transaction fails after the step")

    with pytest.raises(RuntimeError):
        reject_then_fail()
    assert written == [1]
    assert not Notification.objects.exists()
    assert reload(checked_case).status == Status.AWAITING_REVIEW


def test_an_event_that_tells_nobody_reads_nothing_about_notifications(
    checked_case, agent, approver, submit
):
    proposal = submit(checked_case, agent)
    with CaptureQueriesContext(connection) as captured:
        services.proposal_approve(proposal=proposal, actor=approver)
    touched = [
        q["sql"]
        for q in captured.captured_queries
        if any(t in q["sql"] for t in ("cases_notification", "cases_followuppolicy"))
    ]
    assert touched == []
    assert reload(checked_case).status == Status.READY


def test_each_person_chooses_email_per_kind_and_a_daily_digest(
    checked_case, agent, approver, second_approver, submit, lead
):
    preferences_set(user=approver, email_off=[NotificationKind.AWAITING_REVIEW], digest=False)
    preferences_set(user=second_approver, email_off=[], digest=True)
    lead.email = ""
    lead.save(update_fields=["email"])
    proposal = submit(checked_case, agent)
    states = dict(
        Notification.objects.filter(kind="awaiting_review").values_list(
            "recipient__username", "email_state"
        )
    )
    assert states == {"approver": "off", "ari2": "digest"}
    services.proposal_reject(proposal=proposal, actor=approver, reason="No")
    assert Notification.objects.get(kind="rejected").email_state == "no_address"
    with pytest.raises(CaseError):
        preferences_set(user=approver, email_off=["everything"], digest=False)


def test_the_inbox_counts_unread_and_opens_the_case_for_its_recipient_only(
    checked_case, agent, approver, second_approver, submit, client
):
    submit(checked_case, agent)
    mine = Notification.objects.get(recipient=approver)
    assert unread_count(approver) == 1
    with pytest.raises(Notification.DoesNotExist):
        notification_open(user=second_approver, notification_id=mine.pk)
    assert notifications_mark_read(user=second_approver, ids=[mine.pk]) == 0
    assert unread_count(approver) == 1

    client.force_login(approver)
    home = client.get(reverse("admin:index")).content.decode()
    assert 'aria-label="Inbox: 1 unread"' in home
    inbox = client.get(reverse("admin:cases_notification_changelist"))
    assert inbox.status_code == 200
    assert checked_case.reference in inbox.content.decode()
    opened = client.get(reverse("admin:cases_notification_open", args=[mine.pk]))
    assert opened.status_code == 302
    assert opened["Location"] == mine.link
    assert unread_count(approver) == 0
    assert 'aria-label="Inbox: 0 unread"' in client.get(reverse("admin:index")).content.decode()
    # Another person's notification is a 404, exactly like a missing one.
    client.force_login(second_approver)
    own = Notification.objects.get(recipient=second_approver)
    assert client.get(reverse("admin:cases_notification_open", args=[mine.pk])).status_code == 404
    assert client.post(reverse("admin:cases_notification_read_all")).status_code == 302
    own.refresh_from_db()
    mine.refresh_from_db()
    assert own.read_at is not None


def test_the_inbox_says_which_notifications_still_wait_on_the_reader(
    checked_case, agent, approver, second_approver, submit, client
):
    """The approver's inbox listed "D-50: a proposal awaits your decision" unread after another
    approver decided it, with nothing to tell it from one still waiting on them."""
    proposal = submit(checked_case, agent)
    client.force_login(approver)
    url = reverse("admin:cases_notification_changelist")

    before = client.get(url).content.decode()
    services.proposal_approve(proposal=proposal, actor=second_approver)
    after = client.get(url).content.decode()

    assert "<strong>Yours to answer</strong>" in before
    assert "Yours to answer" not in after
    assert "Ready to apply: not waiting on you" in after


def test_email_settings_page_saves_the_persons_choice(client, approver):
    client.force_login(approver)
    url = reverse("admin:cases_notification_preferences")
    assert client.get(url).status_code == 200
    kinds = [k for k in NotificationKind.values if k != "done"]
    response = client.post(url, {"mail": kinds, "digest": "on"})
    assert response.status_code == 302
    preference = approver.notification_preference
    assert preference.email_off == ["done"]
    assert preference.digest is True
    assert preference.digest_next_at > timezone.now()


def test_mine_to_answer_is_my_waits_as_responsible_plus_the_decisions_i_may_take(
    checked_case, make_case, agent, approver, lead, backup, submit
):
    proposal = submit(checked_case, agent)
    escalated = make_case()
    with transaction.atomic():
        apply_transition(lock_case(escalated.pk), "escalate", actor=SYSTEM, reason="stuck")
    waiting_on_source = make_case()
    assert set(cases_to_answer(approver)) == {checked_case}
    # The agent prepared it: it is no decision of theirs, and they are responsible for nothing.
    assert set(cases_to_answer(agent)) == set()
    # The lead is responsible for all three, but only the escalated one waits on them.
    assert set(cases_to_answer(lead)) == {escalated}
    staff_set_away(user=lead, away_until=timezone.localdate(), actor=lead)
    assert set(cases_to_answer(backup)) == {escalated}
    assert set(cases_to_answer(lead)) == set()
    services.proposal_reject(proposal=proposal, actor=approver, reason="No")
    assert set(cases_to_answer(approver)) == set()
    assert set(cases_to_answer(backup)) == {escalated, checked_case}
    assert waiting_on_source not in cases_to_answer(backup)


@pytest.mark.postgres_only
def test_the_unread_count_is_one_lookup_on_its_partial_index(case, approver):
    """A person with a long read history and two unread: the header's count reads the small
    partial index of unread notifications, not their history."""
    events = CaseEvent.objects.bulk_create(
        CaseEvent(case=case, action="cases.case.followup_updated", actor_label="t", version=n)
        for n in range(2, 3002)
    )
    read = timezone.now()
    Notification.objects.bulk_create(
        Notification(
            recipient=approver,
            case=case,
            event=event,
            kind="held",
            text="t",
            link="/",
            read_at=None if n < 2 else read,
        )
        for n, event in enumerate(events)
    )
    with CaptureQueriesContext(connection) as captured:
        assert unread_count(approver) == 2
    (count,) = (q["sql"] for q in captured.captured_queries)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE cases_notification")  # autovacuum is off on this machine
        cursor.execute(f"EXPLAIN {count}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "notification_unread_idx" in plan, plan


def test_undelivered_mail_shows_on_the_next_scrape_as_the_notification_backlog(
    checked_case, dual, approver, second_approver, submit
):
    from tests.reconciliation.test_metrics import scrape, value

    assert value(scrape(), "holdfast_notifications_pending") == 0
    submit(checked_case, dual)
    samples = scrape()
    told = Notification.objects.filter(email_state=Notification.Email.PENDING).count()
    assert told == 2  # both eligible approvers, by name
    assert value(samples, "holdfast_notifications_pending") == told
    assert value(samples, "holdfast_notifications_oldest_pending_seconds") < 60
