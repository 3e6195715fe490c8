"""Every link a page offers opens for the person it is offered to: a read-only relation links
to the related page only for who may view it (``cases.admin.related``). An agent's case page
linked its owner, backup and team to pages that answered a bare "403 Forbidden"."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.cases.helpers import reload


def _admin_links(html: str) -> set[str]:
    hrefs = set(re.findall(r'href="(/admin/[^"#?]*)', html))
    # Leaving is not a page to open; a delete or revocation page asks before it acts.
    return {h for h in hrefs if not h.endswith(("/logout/", "/delete/"))}


@pytest.mark.parametrize("role", ["agent", "approver", "auditor", "lead"])
def test_every_link_on_the_case_and_account_pages_opens_for_who_sees_it(
    client, request, role, case
):
    user = request.getfixturevalue(role)
    case = reload(case)
    client.force_login(user)
    import datetime as dt

    from django.utils import timezone

    from cases.models import CaseEvent, StaffProfile
    from cases.services import staff_set_away

    # An event a person acted in (the owner marked away: the hand-over is on the timeline).
    tomorrow = timezone.localdate() + dt.timedelta(days=1)
    staff_set_away(user=case.owner, away_until=tomorrow, actor=case.owner)
    event = CaseEvent.objects.filter(case=case, actor=case.owner).latest("id")
    profile = StaffProfile.objects.get(user=case.owner)
    pages = [
        reverse("admin:cases_case_change", args=[case.pk]),
        reverse("admin:cases_customeraccount_change", args=[case.account_id]),
        # An event's actor, a team's default owner and backup, a profile's person: each
        # linked to a user page the auditor (and the lead) may not open (the second walk).
        reverse("admin:cases_caseevent_change", args=[event.pk]),
        reverse("admin:cases_team_change", args=[case.team_id]),
        reverse("admin:cases_staffprofile_change", args=[profile.pk]),
    ]

    refused = {}
    for page in pages:
        response = client.get(page)
        if response.status_code in {302, 403} and "/cases/case/" not in page:
            continue  # a page this role does not get at all is not a link it is offered
        assert response.status_code == 200, page
        for link in _admin_links(response.content.decode()):
            status = client.get(link).status_code
            if status == 403:
                refused[link] = page
    assert refused == {}


def test_an_agent_reads_the_owner_backup_and_team_as_text(client, agent, case):
    case = reload(case)
    client.force_login(agent)

    html = client.get(reverse("admin:cases_case_change", args=[case.pk])).content.decode()

    assert "/admin/auth/user/" not in html
    assert "/admin/cases/team/" not in html
    for shown in (case.owner.get_username(), case.backup.get_username(), case.team.name):
        assert shown in html


def test_a_lead_still_chooses_the_owner_and_backup_and_opens_the_team(client, lead, case):
    case = reload(case)
    client.force_login(lead)

    html = client.get(reverse("admin:cases_case_change", args=[case.pk])).content.decode()

    assert '<select name="owner"' in html
    assert '<select name="backup"' in html
    assert reverse("admin:cases_team_change", args=[case.team_id]) in html


@pytest.mark.parametrize("role", ["agent", "approver"])
def test_a_reader_sees_the_accounts_team_once_and_no_reason_field(client, request, role, case):
    user = request.getfixturevalue(role)
    client.force_login(user)

    html = client.get(
        reverse("admin:cases_customeraccount_change", args=[case.account_id])
    ).content.decode()

    assert html.count("<label>Team:</label>") == 1  # it was shown twice
    assert "Change reason" not in html
