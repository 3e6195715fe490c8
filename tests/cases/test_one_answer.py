"""One answer to "what may happen next": buttons, the API, a 409 and the words agree."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from cases.actions import case_actions
from cases.models import CaseEvent
from cases.next_action import describe_next_action
from cases.services import case_transition, case_update_followup, staff_set_away
from tests.cases.helpers import reload

ROLES = ["lead", "backup", "agent", "approver", "auditor"]


def _page(client: Client, case) -> str:
    response = client.get(reverse("admin:cases_case_change", args=[case.pk]))
    assert response.status_code == 200
    return response.content.decode()


def _button_names(content: str, case) -> set[str]:
    """The actions the case page offers, read from its links and forms' targets."""
    base = f"/admin/cases/case/{case.pk}/"
    return set(re.findall(rf'(?:href|action)="{base}(?:transition|do)/(\w+)/"', content))


@pytest.mark.parametrize("role", ROLES)
def test_case_page_api_and_words_list_the_same_actions(request, role, case, api):
    user = request.getfixturevalue(role)
    client = Client()
    client.force_login(user)
    fresh = reload(case)
    expected = {a.name for a in case_actions(fresh, user) if not a.form}

    assert _button_names(_page(client, case), case) == expected
    detail = api(user).get(f"/api/cases/{case.reference}/").json()
    transitions = {a.name for a in case_actions(fresh, user) if a.transition}
    assert set(detail["allowed_transitions"]) == transitions
    words = describe_next_action(fresh, actor=user).permitted
    assert words == [a.words_for(fresh) for a in case_actions(fresh, user) if a.in_summary]


def test_auditor_is_offered_nothing(auditor, case):
    client = Client()
    client.force_login(auditor)

    content = _page(client, case)

    assert _button_names(content, case) == set()
    assert "Permitted now</dt><dd>Nothing by hand" in content
    assert 'id="hf-evidence"' not in content


def test_a_transition_the_person_may_not_take_is_refused_with_who_may(agent, case, api):
    """An agent may not requeue (a lead's action): 403 in plain words, nothing changed."""
    case_transition(
        case=case,
        transition="escalate",
        expected_version=case.version,
        reason="Needs a person",
        actor=agent,
    )
    fresh = reload(case)

    response = api(agent).post(
        f"/api/cases/{case.reference}/transitions/",
        {"transition": "requeue", "expected_version": fresh.version, "reason": "again"},
        format="json",
    )

    assert response.status_code == 403
    assert response.json()["error"] == "not_permitted"
    assert reload(case).version == fresh.version


def test_a_refusal_for_a_state_lists_the_callers_transitions(agent, case, api):
    """The bug this pins: the 409 listed 'stop' to an agent, who may not stop."""
    response = api(agent).post(
        f"/api/cases/{case.reference}/transitions/",
        {
            "transition": "request_source_check",
            "expected_version": case.version,
            "reason": "again",
        },
        format="json",
    )

    assert response.status_code == 409
    body = response.json()
    assert body["error"] == "transition_not_allowed"
    assert "stop" not in body["allowed"]
    assert set(body["allowed"]) == {"escalate", "cancel"}


def test_a_case_due_now_is_not_overdue_until_the_grace_passes(case, lead, settings):
    settings.FOLLOW_UP_GRACE_MINUTES = 5
    now = timezone.now()
    case_update_followup(case=case, expected_version=case.version, actor=lead, next_check_at=now)
    fresh = reload(case)

    assert not fresh.is_overdue
    assert describe_next_action(fresh, now=now + dt.timedelta(minutes=1)).overdue is False
    assert "Due now" in describe_next_action(fresh, now=now + dt.timedelta(minutes=1)).follow_up
    late = describe_next_action(fresh, now=now + dt.timedelta(minutes=6))
    assert late.overdue is True
    assert late.follow_up.startswith("Follow-up is overdue since")
    assert fresh in type(fresh).objects.overdue(now=now + dt.timedelta(minutes=6))
    assert fresh not in type(fresh).objects.overdue(now=now + dt.timedelta(minutes=1))


def test_a_cancelled_case_reads_as_finished(case, lead):
    case_transition(
        case=case,
        transition="cancel",
        expected_version=case.version,
        reason="Customer withdrew",
        actor=lead,
    )
    client = Client()
    client.force_login(lead)

    content = _page(client, case)
    action = describe_next_action(reload(case), actor=lead)

    assert action.finished
    assert action.why_waiting == ""
    assert action.who_must_answer == ""
    assert "Why it waits" not in content
    assert "Who must answer" not in content
    assert "a worker acts next" not in content
    assert action.permitted == []
    assert "Nothing: the case is finished." in content


def test_cancel_confirm_page_explains_and_is_not_labelled_cancel(case, lead):
    client = Client()
    client.force_login(lead)

    response = client.get(reverse("admin:cases_case_transition", args=[case.pk, "cancel"]))

    content = response.content.decode()
    assert "What this does:" in content
    assert "nothing has been sent to the order system yet" in content.lower()
    assert f'value="Yes, cancel {case.reference}"' in content
    assert 'value="Cancel"' not in content
    assert 'name="reason"' in content


def test_an_action_without_a_reason_changes_nothing_and_says_why(case, lead):
    client = Client()
    client.force_login(lead)
    before = reload(case).version

    response = client.post(
        reverse("admin:cases_case_action", args=[case.pk, "place_legal_hold"]),
        {"expected_version": before, "reason": ""},
        follow=True,
    )

    assert "Nothing was done: give a reason" in response.content.decode()
    assert reload(case).version == before
    assert reload(case).legal_hold is False


def test_marking_the_owner_away_puts_the_handover_on_the_timeline(case, lead, backup):
    until = timezone.localdate() + dt.timedelta(days=2)

    staff_set_away(user=lead, away_until=until, actor=lead)

    event = CaseEvent.objects.filter(case=case).order_by("-id").first()
    assert event.action == "cases.case.responsibility_to_backup"
    assert "Bo Backup" in event.reason
    assert f"{until:%Y-%m-%d}" in event.reason
    assert reload(case).responsible_now == backup

    staff_set_away(user=lead, away_until=None, actor=lead)

    event = CaseEvent.objects.filter(case=case).order_by("-id").first()
    assert event.action == "cases.case.responsibility_to_owner"


def test_marking_away_again_without_a_change_of_hands_writes_nothing(case, lead):
    until = timezone.localdate() + dt.timedelta(days=2)
    staff_set_away(user=lead, away_until=until, actor=lead)
    count = CaseEvent.objects.filter(case=case).count()

    staff_set_away(user=lead, away_until=until + dt.timedelta(days=1), actor=lead)

    assert CaseEvent.objects.filter(case=case).count() == count


def test_home_page_counts_open_their_queues_and_offer_the_away_form(lead, case):
    client = Client()
    client.force_login(lead)

    content = client.get(reverse("admin:index")).content.decode()

    assert f'href="{reverse("admin:cases_heldcase_changelist")}"' in content
    assert f'href="{reverse("admin:cases_attentioncase_changelist")}"' in content
    assert f'action="{reverse("admin:cases_staffprofile_mark_away")}"' in content


def test_home_page_away_form_marks_a_team_member_away(lead, backup, case):
    client = Client()
    client.force_login(lead)
    until = timezone.localdate() + dt.timedelta(days=1)

    response = client.post(
        reverse("admin:cases_staffprofile_mark_away"),
        {"user": lead.pk, "away_until": until.isoformat(), "mark": "away"},
        follow=True,
    )

    assert "is away until" in response.content.decode()
    assert reload(case).responsible_now == backup


def test_home_page_away_form_refuses_another_teams_person(agent, outsider):
    client = Client()
    client.force_login(agent)
    until = timezone.localdate() + dt.timedelta(days=1)

    response = client.post(
        reverse("admin:cases_staffprofile_mark_away"),
        {"user": outsider.pk, "away_until": until.isoformat(), "mark": "away"},
        follow=True,
    )

    assert "Nothing was changed" in response.content.decode()
    assert not hasattr(type(outsider).objects.get(pk=outsider.pk), "staff_profile") or (
        type(outsider).objects.get(pk=outsider.pk).staff_profile.away_until is None
    )


@pytest.mark.parametrize("role", ["lead", "agent", "approver"])
@pytest.mark.parametrize("ready", [False, True], ids=["new", "ready"])
def test_listing_what_may_happen_next_runs_no_statement_twice(request, role, ready):
    """Every transition's guards are asked: the ones that read other tables (work in flight,
    a change applied) came up to six times each, and the actor's team once per action. Each
    is now read once for the list."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    user = request.getfixturevalue(role)
    made = request.getfixturevalue("approved_case")() if ready else request.getfixturevalue("case")
    fresh = reload(made)
    with CaptureQueriesContext(connection) as captured:
        names = [a.name for a in case_actions(fresh, user)]
    statements = [q["sql"] for q in captured.captured_queries]
    repeated = {sql for sql in statements if statements.count(sql) > 1}
    assert not repeated, (names, statements)
    assert fresh._guards_read is None  # nothing remembered past the list


def test_a_guard_read_once_is_read_again_after_the_list(case, lead):
    """What a list remembered does not outlive it: the next list reads the tables again."""
    from cases.models import CancellationRequest

    fresh = reload(case)
    with fresh.guards_read_once():
        assert not fresh.has_late_cancellation()
        with fresh.guards_read_once():  # an inner block keeps the outer one's answers
            assert fresh._guards_read == {"cancellation after_change": False}
        CancellationRequest.objects.create(
            case=fresh,
            reason="Too late",
            via="api",
            requested_by_label="customer",
            outcome="after_change",
        )
        assert not fresh.has_late_cancellation()  # the list's one moment
    assert fresh._guards_read is None
    assert fresh.has_late_cancellation()


def test_a_confirm_refused_for_a_changed_case_keeps_the_reason_and_shows_the_case_now(case, lead):
    """Someone changed the case between the confirm page and the click: nothing is done, and
    the confirm page comes back with the case as it is now and the reason as typed (it went
    to the case page, and the reason was gone). Confirming again then does it."""
    client = Client()
    client.force_login(lead)
    seen = reload(case).version
    case_update_followup(case=reload(case), expected_version=seen, actor=lead, next_check_at=None)
    now = reload(case).version
    assert now > seen
    url = reverse("admin:cases_case_action", args=[case.pk, "place_legal_hold"])
    why = "Legal asked <us> to keep it & all its mail"

    response = client.post(url, {"expected_version": seen, "reason": why})

    assert response.status_code == 200
    content = response.content.decode()
    assert "Nothing was done" in content
    assert f"{case.reference} changed while you were deciding (version {seen} → {now}: " in content
    assert "with your reason kept: check it and confirm again, or go back." in content
    assert "Reload" not in content  # the page is the reload
    assert f"at version {now}." in content
    assert f'name="expected_version" value="{now}"' in content
    assert "Legal asked &lt;us&gt; to keep it &amp; all its mail</textarea>" in content
    assert reload(case).legal_hold is False

    done = client.post(url, {"expected_version": now, "reason": why}, follow=True)
    assert done.status_code == 200
    assert reload(case).legal_hold is True
    assert CaseEvent.objects.filter(case=case, reason=why).exists()


def test_a_confirm_no_longer_possible_says_why_and_gives_back_the_reason(case, lead):
    """The action cannot be taken any more (another lead placed the hold meanwhile): the case
    page says so, and gives back the reason as typed."""
    from cases.services import case_set_legal_hold

    client = Client()
    client.force_login(lead)
    seen = reload(case).version
    case_set_legal_hold(
        case=reload(case), expected_version=seen, actor=lead, hold=True, reason="First"
    )
    url = reverse("admin:cases_case_action", args=[case.pk, "place_legal_hold"])

    response = client.post(url, {"expected_version": seen, "reason": "Second, typed"}, follow=True)

    content = response.content.decode()
    assert response.redirect_chain[-1][0] == reverse("admin:cases_case_change", args=[case.pk])
    assert "Nothing was done" in content
    assert "What you wrote: “Second, typed”" in content
    assert not CaseEvent.objects.filter(case=case, reason="Second, typed").exists()


@pytest.mark.parametrize("surface", ["api", "admin"])
def test_a_case_answer_reads_each_guard_once(request, surface, case, lead, api):
    """The API's case (its next action in words and its allowed transitions) and the admin's
    case page (its buttons and its next action) ask the same guards: each guard's read runs
    once for the answer (three times "a change applied", twice "work in flight" before)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    fresh = reload(case)
    if surface == "api":
        client = api(lead)
        path = f"/api/cases/{fresh.reference}/"
    else:
        client = Client()
        client.force_login(lead)
        path = reverse("admin:cases_case_change", args=[fresh.pk])
    assert client.get(path).status_code == 200
    with CaptureQueriesContext(connection) as captured:
        assert client.get(path).status_code == 200
    guards = [
        q["sql"]
        for q in captured.captured_queries
        if q["sql"].startswith("SELECT 1 AS")
        and any(t in q["sql"] for t in ('"cases_attempt"', '"approvals_operation"'))
    ]
    if surface == "api":
        # The API's case shows its attempts, operations and cancellations: the guards are
        # answered from those rows (``Case.read_with``), with no look of their own.
        assert guards == []
        return
    assert guards, [q["sql"] for q in captured.captured_queries]
    assert len(guards) == len(set(guards)), guards


def test_everyone_on_the_team_is_told_who_is_away(lead, backup, agent, approver, case):
    """The agent's and the approver's home page said "Nobody on your teams is away" while the
    lead was: the notice listed only the people the viewer may mark back."""
    from cases.services import staff_set_away

    until = timezone.localdate() + dt.timedelta(days=2)
    staff_set_away(user=lead, away_until=until, actor=lead)
    for viewer in (agent, approver, backup):
        client = Client()
        client.force_login(viewer)
        home = client.get(reverse("admin:index")).content.decode()
        assert "Nobody on your teams is away" not in home, viewer
        assert f"Away now: <strong>Lena Lead</strong> until {until:%Y-%m-%d}" in home, viewer
    # Only who may mark the lead back is offered to: the agent is not.
    client = Client()
    client.force_login(agent)
    assert (
        'aria-label="Mark someone back"' not in client.get(reverse("admin:index")).content.decode()
    )
    client.force_login(backup)
    assert 'aria-label="Mark someone back"' in client.get(reverse("admin:index")).content.decode()


def test_an_absence_ends_within_a_year(lead, case):
    from cases.exceptions import InvalidCaseInput
    from cases.services import MAX_ABSENCE_DAYS, staff_set_away

    with pytest.raises(InvalidCaseInput) as refused:
        staff_set_away(user=lead, away_until=dt.date(9999, 12, 31), actor=lead)
    assert "reassign" in str(refused.value)
    latest = timezone.localdate() + dt.timedelta(days=MAX_ABSENCE_DAYS)
    staff_set_away(user=lead, away_until=latest, actor=lead)
    assert type(lead).objects.get(pk=lead.pk).staff_profile.away_until == latest


def test_the_last_error_is_not_said_twice(case):
    """ "Needs corrected input: Order ORD-9999 …; last error: Order ORD-9999 …": the case's
    waiting reason was its error, and the next step said it twice."""
    from cases.models import Status

    error = "The order system has no order ORD-9999 of account ACC-100"
    type(case).objects.filter(pk=case.pk).update(
        status=Status.NEEDS_ATTENTION, waiting_reason=error, last_error=error
    )
    case = reload(case)
    words = describe_next_action(case).why_waiting
    assert words.count("has no order ORD-9999") == 1, words
    case.waiting_reason = "Needs corrected input"
    words = describe_next_action(case).why_waiting
    assert f"last error: {error}" in words, words


def test_a_past_absence_on_the_profile_page_is_said_beside_its_field(lead):
    """Saving "Away until 2020-01-01" on the staff profile page answered a bare "403
    Forbidden"; the home page's form said why. Both say it now, and nothing changes."""
    from cases.models import StaffProfile

    profile, _ = StaffProfile.objects.get_or_create(user=lead)
    client = Client()
    client.force_login(lead)

    response = client.post(
        reverse("admin:cases_staffprofile_change", args=[profile.pk]),
        {"away_until": "2020-01-01"},
    )

    assert response.status_code == 200
    assert "An absence ends today or later." in response.content.decode()
    profile.refresh_from_db()
    assert profile.away_until is None


def test_a_refusal_reads_in_words_not_its_code(case):
    """ "Needs a person: order_not_open; last error: order_not_open: Order ORD-7734 is
    shipped": the page shows the order system's words; the code stays stored."""
    from cases.models import Status
    from cases.next_action import error_words

    stored = "order_not_open: Order ORD-7734 is shipped: the order system refuses it"
    type(case).objects.filter(pk=case.pk).update(
        status=Status.NEEDS_ATTENTION,
        waiting_reason="Needs a person: the order system refused the change",
        last_error=stored,
    )
    words = describe_next_action(reload(case)).why_waiting

    assert "order_not_open" not in words, words
    assert "last error: Order ORD-7734 is shipped: the order system refuses it" in words
    assert reload(case).last_error == stored
    assert error_words("connect_failed: ConnectError") == "ConnectError"
    assert error_words("The fence could not be raised: x") == "The fence could not be raised: x"
