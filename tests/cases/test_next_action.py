"""'What may happen next' in plain words, and who is responsible while the owner is away."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from cases.models import Case, StaffProfile
from cases.next_action import describe_next_action
from cases.services import case_assign, case_transition, case_update_followup
from tests.cases.helpers import reload


def _escalate(case, actor):
    case_transition(
        case=case,
        transition="escalate",
        expected_version=case.version,
        reason="Needs a person",
        actor=actor,
    )
    return reload(case)


def test_waiting_case_explains_why_and_who_follows_up(case):
    action = describe_next_action(reload(case))

    assert action.headline.startswith("Waiting for the order system")
    assert action.why_waiting == "Reading the order from the order system"
    assert action.who_must_answer == (
        "the order system; Lena Lead (lead) is responsible for following up"
    )
    assert action.permitted == [
        "escalate to a person (agents and leads of the team)",
        "cancel (nothing has been sent yet) (agents and leads of the team)",
        "stop the work (the team's leads)",
    ]
    assert "Permitted now: escalate to a person" in action.text


def test_responsible_now_is_the_owner_when_present(case, lead):
    assert reload(case).responsible_now == lead


def test_owner_away_makes_the_backup_responsible_and_named(case, backup, owner_away):
    fresh = reload(case)

    assert fresh.owner_is_away
    assert fresh.responsible_now == backup
    assert "Bo Backup (backup) is responsible for following up" in describe_next_action(fresh).text


def test_owner_away_while_case_waits_on_owner_names_backup_and_return_date(case, lead, owner_away):
    fresh = _escalate(case, lead)

    action = describe_next_action(fresh)

    until = owner_away.away_until.strftime("%Y-%m-%d")
    assert action.who_must_answer == (
        f"Bo Backup (backup), the named backup, while Lena Lead (lead) is away until {until}"
    )
    assert action.who_must_answer in action.text


def test_owner_away_until_today_is_still_away(case, lead, backup):
    StaffProfile.objects.create(user=lead, away_until=timezone.localdate())

    assert reload(case).responsible_now == backup


def test_owner_back_from_absence_is_responsible_again(case, lead):
    StaffProfile.objects.create(user=lead, away_until=timezone.localdate() - dt.timedelta(days=1))

    fresh = reload(case)
    assert not fresh.owner_is_away
    assert fresh.responsible_now == lead


def test_owner_away_without_backup_stays_responsible(case, lead, owner_away):
    case_assign(
        case=case,
        expected_version=case.version,
        owner=lead,
        backup=None,
        reason="No backup this week",
        actor=lead,
    )

    assert reload(case).responsible_now == lead


def test_responsible_queryset_follows_the_absence(case, lead, backup, owner_away):
    assert list(Case.objects.responsible(backup)) == [case]
    assert list(Case.objects.responsible(lead)) == []


def test_responsible_queryset_follows_the_absences_last_day(case, lead, backup, owner_away):
    """Away through ``away_until`` itself; the day after, the owner is responsible again. A
    person with no staff profile is never away."""
    last_day = owner_away.away_until
    assert list(Case.objects.responsible(backup, on=last_day)) == [case]
    assert list(Case.objects.responsible(lead, on=last_day)) == []
    back = last_day + dt.timedelta(days=1)
    assert list(Case.objects.responsible(backup, on=back)) == []
    assert list(Case.objects.responsible(lead, on=back)) == [case]
    owner_away.delete()
    assert list(Case.objects.responsible(lead)) == [case]
    assert list(Case.objects.responsible(backup)) == []


def test_overdue_follow_up_is_called_out(case, lead):
    case_update_followup(
        case=case,
        expected_version=case.version,
        actor=lead,
        next_check_at=dt.datetime(2020, 1, 1, 9, 0, tzinfo=dt.UTC),
    )

    action = describe_next_action(reload(case))

    assert action.follow_up == "Follow-up is overdue since 2020-01-01 09:00 UTC."


def test_future_follow_up_is_announced(case, lead):
    when = timezone.now() + dt.timedelta(days=2)
    case_update_followup(case=case, expected_version=case.version, actor=lead, next_check_at=when)

    action = describe_next_action(reload(case))

    assert action.follow_up == f"Next check at {when:%Y-%m-%d %H:%M} UTC."


def test_outstanding_question_is_part_of_why_it_waits(case, lead):
    case_update_followup(
        case=case,
        expected_version=case.version,
        actor=lead,
        outstanding_question="Is Friday still possible for the depot?",
    )

    action = describe_next_action(reload(case))

    assert action.why_waiting.endswith("open question: Is Friday still possible for the depot?")


def test_closed_case_names_its_retention_and_permits_nothing(case, lead):
    case_transition(
        case=case,
        transition="cancel",
        expected_version=case.version,
        reason="Customer withdrew",
        actor=lead,
    )

    fresh = reload(case)
    action = describe_next_action(fresh)

    assert action.headline == "Cancelled: nothing was applied."
    assert action.permitted == []
    assert action.follow_up == (
        f"Closed; kept until {fresh.retention_until:%Y-%m-%d} under the retention policy."
    )


def test_who_may_do_nothing_on_a_case_that_waits_on_a_person_is_not_told_a_worker_acts(
    case, lead, auditor, approver
):
    """An auditor's page said "Nothing by hand: the workflow or a worker acts next" under the
    headline "the workflow cannot continue on its own"."""
    case = _escalate(reload(case), lead)

    for viewer in (auditor, approver):
        action = describe_next_action(case, actor=viewer)
        assert action.headline.startswith("Needs a person")
        assert action.permitted == []
        assert action.permitted_text == (
            "Nothing for you to do here: it waits on Lena Lead (lead), the responsible person."
        )


def test_who_may_do_nothing_while_a_worker_acts_is_told_so(case, auditor):
    action = describe_next_action(reload(case), actor=auditor)  # waiting for the order system

    assert action.permitted_text == "Nothing by hand: the workflow or a worker acts next."
