"""The pages' own words: titles name the case, "Delete" says what it does (revoke authority)
and is shown only where it does something, and no role is offered an action it may not take."""

from __future__ import annotations

import re

from django.urls import reverse

from cases.services import case_transition
from tests.cases.helpers import reload


def _page(client, user, url):
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_the_case_page_is_titled_by_the_case_not_change_case(client, lead, case):
    case = reload(case)

    html = _page(client, lead, reverse("admin:cases_case_change", args=[case.pk]))

    title = re.search(r"<title>(.*?)</title>", html, re.S).group(1).strip()
    # What it asks for, never a statement that it happened.
    assert title.startswith(f"{case.reference} asks: {case.change_description}"), title
    assert f"<h1>{case.reference} asks: " in html
    assert "Change case" not in html


def test_the_case_page_breadcrumbs_name_each_step_once(client, lead, case):
    """The desk, the list, the case: never "Cases › Cases", the app and its model named alike."""
    case = reload(case)

    html = _page(client, lead, reverse("admin:cases_case_change", args=[case.pk]))

    crumbs = re.search(r'<div class="breadcrumbs">(.*?)</div>', html, re.S).group(1)
    steps = [re.sub(r"<[^>]+>", "", step).strip() for step in crumbs.split("&rsaquo;")]
    assert steps[:3] == ["Home", "Case desk", "Cases"], steps
    assert steps[3].startswith(case.reference), steps
    assert len(set(steps)) == len(steps), steps


def test_the_account_page_is_titled_by_the_account(client, lead, account):
    html = _page(client, lead, reverse("admin:cases_customeraccount_change", args=[account.pk]))

    assert f"<h1>{account.reference}: {account.name}</h1>" in html
    assert "Change customer account" not in html


def test_delete_says_it_revokes_authority_and_only_where_it_does_something(
    client, lead, agent, case
):
    url = reverse("admin:cases_case_change", args=[case.pk])

    as_lead = _page(client, lead, url)
    assert "Revoke authority (settle its work)…" in as_lead
    assert ">Delete<" not in as_lead

    as_agent = _page(client, agent, url)
    assert 'class="deletelink"' not in as_agent  # an agent may not revoke

    case = reload(case)
    case_transition(
        case=case, transition="stop", expected_version=case.version, reason="Done", actor=lead
    )
    stopped = _page(client, lead, url)
    assert 'class="deletelink"' not in stopped  # nothing left to revoke: no button


def _actions(client, user) -> list[str]:
    client.force_login(user)
    response = client.get(reverse("admin:cases_customeraccount_changelist"))
    form = response.context["action_form"]
    if form is None:  # no bulk action at all
        return []
    return [name for name, _ in form.fields["action"].choices if name]


def test_the_agent_is_not_offered_the_leads_account_actions(client, agent, lead, account):
    assert "verify" not in _actions(client, agent)
    assert "revoke_access" not in _actions(client, agent)

    offered = _actions(client, lead)
    assert "verify" in offered
    assert "revoke_access" in offered


def test_a_page_fetched_to_update_in_place_leaves_the_messages_for_the_next_page(
    client, agent, case
):
    client.force_login(agent)
    page = reverse("admin:cases_case_change", args=[case.pk])
    # A refusal is stored for the next page the person opens.
    client.get(reverse("admin:cases_case_transition", args=[case.pk, "stop"]))

    live = client.get(page, HTTP_X_HOLDFAST_LIVE="1").content.decode()
    shown = client.get(page).content.decode()

    assert "is not offered to you" not in live
    assert "is not offered to you" in shown


def test_putting_a_case_back_in_the_queue_says_what_stopped_it(case):
    """D-48's slot had no room: put back, it stopped the same way within a second, and the
    confirm page had not said why it stopped."""
    from cases.actions import get_action
    from cases.models import Case

    Case.objects.filter(pk=case.pk).update(
        last_error="slot_unavailable: Slot 2026-12-05 has no room. Repeating it would change "
        "nothing; a person must correct the cause."
    )
    words = get_action("requeue").confirm_for(reload(case))

    assert "It stopped on: slot_unavailable: Slot 2026-12-05 has no room." in words
    assert words.endswith(
        "Put it back only once that cause is gone; otherwise the order system answers the same."
    )
    Case.objects.filter(pk=case.pk).update(last_error="")
    assert "stopped on" not in get_action("requeue").confirm_for(reload(case))


def test_an_integration_user_is_offered_neither_as_an_owner_nor_as_someone_away(
    client, make_user, team, lead, case
):
    """The demo's API user (agent role, no admin seat) was among the owners and backups a lead
    could choose, and in the home page's "away and back" list."""
    make_user("intake-bot", "agent", teams=[team], is_staff=False)
    client.force_login(lead)

    case_page = _page(client, lead, reverse("admin:cases_case_change", args=[reload(case).pk]))
    home = _page(client, lead, reverse("admin:index"))
    case_list = _page(client, lead, reverse("admin:cases_case_changelist"))  # its filters

    assert "intake-bot" not in case_page
    assert "intake-bot" not in home
    assert "intake-bot" not in case_list
    assert "lead" in case_page  # the staff still are offered


def test_an_audit_events_page_is_titled_by_its_case_not_a_row_id(client, lead, case):
    """It read "3 v1 cases.case.created": 3 was the case's database id; then "D-1 v1:
    cases.case.created", its code. It is titled by the case and what happened."""
    from cases.case_story import event_sentence
    from cases.models import CaseEvent

    event = CaseEvent.objects.filter(case=case).order_by("pk").first()

    html = _page(client, lead, reverse("admin:cases_caseevent_change", args=[event.pk]))

    assert f"{case.reference} v{event.version}: {event_sentence(event).text}" in html
    assert f"{case.pk} v{event.version} {event.action}" not in html


def test_every_date_on_a_case_page_is_one_form_with_its_zone(client, lead, case):
    """Django's "Dec. 5, 2026, 4:50 p.m." stood beside the desk's "2026-12-05 16:50 UTC"."""
    from django.utils import timezone

    case = reload(case)

    html = _page(client, lead, reverse("admin:cases_case_change", args=[case.pk]))

    assert f"{timezone.localtime(case.created_at):%Y-%m-%d %H:%M} UTC" in html
    assert not re.search(r"\b[ap]\.m\.", html)


def test_a_refused_action_is_named_by_its_button(case, auditor):
    """A reader who tried an action read "auditor may not cancel (nothing has been sent yet) on
    D-1": the action's long words spliced into the refusal. It names the button instead."""
    import pytest

    from cases.actions import action_run
    from cases.exceptions import ActionNotPermitted

    with pytest.raises(ActionNotPermitted) as refused:
        action_run(case=case, name="cancel", actor=auditor, expected_version=case.version)
    assert str(refused.value).startswith(
        f"auditor may not use \u201cCancel the request\u201d on {case.reference}: that is for "
    ), str(refused.value)
