"""Review: the staff profile admin lets a lead of one team mark another team's people away.

Absence decides who is responsible for a case (the owner's cases fall to the backup), so it is
team data: another team's lead must neither list these people nor change their absence.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse

from cases.models import StaffProfile
from cases.services import staff_set_away

ADD = "admin:cases_staffprofile_add"
# Within the year an absence may last (``services.MAX_ABSENCE_DAYS``).
AWAY = dt.date.today() + dt.timedelta(days=30)


def test_add_form_does_not_list_another_teams_people(client, lead, outsider):
    client.force_login(outsider)

    page = client.get(reverse(ADD))

    offered = set(page.context["adminform"].form.fields["user"].queryset)
    assert lead not in offered


def test_lead_of_another_team_cannot_mark_a_team_member_away_in_the_admin(
    client, case, lead, outsider
):
    client.force_login(outsider)

    client.post(reverse(ADD), {"user": lead.pk, "away_until": AWAY.isoformat()})

    assert not StaffProfile.objects.filter(user=lead, away_until=AWAY).exists()
    case.refresh_from_db()
    assert case.responsible_now == lead


def test_staff_set_away_refuses_a_lead_of_another_team(lead, outsider):
    from cases.exceptions import ActionNotPermitted

    with pytest.raises(ActionNotPermitted):
        staff_set_away(user=lead, away_until=AWAY, actor=outsider)
    assert not StaffProfile.objects.filter(user=lead, away_until=AWAY).exists()
