"""Sentences the walks of ``make run`` read against the facts: a closed case named a person
"responsible now", a reassignment of one case said "1 cases", and the lists' times named no
zone beside pages that all say UTC."""

from __future__ import annotations

import datetime as dt

from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from cases.models import Case, Status
from cases.services import case_cancel_request, case_update_followup
from tests.cases.helpers import reload

CASE_LIST = "/admin/cases/case/"


def test_a_closed_case_is_nobodys_responsibility_now(client, lead, agent, make_case):
    case = make_case()
    case_cancel_request(case=case, actor=agent, reason="The customer withdrew", via="admin")
    case = reload(case)
    assert case.status == Status.CANCELLED
    client.force_login(lead)

    page = client.get(reverse("admin:cases_case_change", args=[case.pk])).content.decode()
    listing = client.get(CASE_LIST, {"status__exact": Status.CANCELLED})

    assert "Nobody: the case is closed (owner Lena Lead)" in page
    row = listing.context["cl"].model_admin.responsible_now_display(case)
    assert row == "—"


def test_reassigning_one_case_says_one_case(client, lead, backup, make_case):
    case = make_case()
    client.force_login(lead)

    done = client.post(
        CASE_LIST,
        {
            "action": "reassign_selected",
            "_selected_action": [case.pk],
            "apply": "1",
            "owner": backup.pk,
            "backup": lead.pk,
            "reason": "Lena is on leave",
        },
    )

    texts = [str(m) for m in get_messages(done.wsgi_request)]
    assert any(t.startswith(f"Reassigned 1 case: {case.reference}") for t in texts), texts


def test_the_case_lists_times_name_their_zone(client, lead, make_case):
    case = make_case()
    at = timezone.now() + dt.timedelta(days=2)
    case_update_followup(
        case=case, expected_version=case.version, actor=lead, next_check_at=at, reason="Callback"
    )
    client.force_login(lead)

    listing = client.get(CASE_LIST).content.decode()

    shown = f"{timezone.localtime(at):%Y-%m-%d %H:%M} UTC"
    assert shown in listing, shown
    assert Case.objects.get(pk=case.pk).next_check_at is not None


def test_the_audit_trail_s_action_filter_is_in_words_and_filters_by_code(client, lead, make_case):
    """The filter listed 49 codes ("cases.case.transitioned"); it lists what the timeline says
    of such an event, and choosing one still filters by the code."""
    import re

    from cases.codes import Action

    case = make_case()
    client.force_login(lead)
    events = reverse("admin:cases_caseevent_changelist")

    page = client.get(events)
    chosen = client.get(events, {"action": Action.CASE_CREATED.value})

    filter_block = page.text.split('id="changelist-filter"', 1)[1].split("</nav>", 1)[0]
    shown = re.findall(r'<a href="\?action=[^"]*">([^<]+)</a>', filter_block)
    assert "Moved from one status to another" in shown
    assert "Claimed by someone as an attempt" in shown
    assert "An attempt released its claim (in older records)" in shown
    assert len(shown) == len(set(shown)) == len(Action)
    assert not [words for words in shown if "." in words.split()[0] or "{" in words]
    assert shown == sorted(shown)
    assert [e.action for e in chosen.context["cl"].result_list] == [Action.CASE_CREATED.value]
    assert chosen.context["cl"].result_list[0].case_id == case.pk


def test_the_backup_s_home_names_the_cases_that_fell_to_them(
    client, lead, backup, agent, make_case, owner_away
):
    """The lead is away: the backup's home page said only "Their cases fall to their named
    backups" and linked to the whole list. It names the ones that fell to them (the newest
    five, then how many more), each a link to its page; the agent, who covers none, is not
    told any fell to them."""
    from cases.templatetags.holdfast import COVERING_NAMED

    cases = [make_case() for _ in range(COVERING_NAMED + 2)]
    closed = cases.pop(0)
    case_cancel_request(case=closed, actor=agent, reason="The customer withdrew", via="admin")
    client.force_login(backup)

    home = client.get(reverse("admin:index")).content.decode()

    line = home.split('id="hf-covering">', 1)[1].split("</p>", 1)[0]
    newest = sorted(cases, key=lambda c: c.number, reverse=True)[:COVERING_NAMED]
    assert line.startswith(f"{len(cases)} of them fell to you: ")
    for case in newest:
        assert (
            f'href="{reverse("admin:cases_case_change", args=[case.pk])}">{case.reference}</a>'
            in line
        )
    assert f"and {len(cases) - COVERING_NAMED} more." in line
    assert closed.reference not in line
    assert f"?responsible={backup.pk}" in line
    listed = client.get(CASE_LIST, {"responsible": backup.pk})
    assert {c.pk for c in listed.context["cl"].result_list} >= {c.pk for c in cases}

    client.force_login(agent)
    assert 'id="hf-covering"' not in client.get(reverse("admin:index")).content.decode()
