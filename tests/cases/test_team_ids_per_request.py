"""A person's teams are read once per web request (``cases.middleware``), and only then: a
page scopes each of its panels to them, and the next request, or a service outside any
request, reads them again."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cases.selectors import team_ids_of, team_ids_read_once


def _team_reads(queries) -> int:
    """The reads of a person's team ids (``cases.selectors.team_ids_of``)."""
    return sum(
        1
        for q in queries
        if q["sql"].startswith(
            'SELECT "cases_team"."id" AS "pk" FROM "cases_team" INNER JOIN "cases_team_members"'
        )
        and q["sql"].endswith("ORDER BY 1 ASC")
    )


@pytest.mark.django_db
def test_the_case_page_reads_the_person_s_teams_once(client, lead, make_case):
    case = make_case()
    client.force_login(lead)
    client.get(f"/admin/cases/case/{case.pk}/change/")  # the session's first request

    with CaptureQueriesContext(connection) as page:
        response = client.get(f"/admin/cases/case/{case.pk}/change/")

    assert response.status_code == 200
    assert case.reference in response.content.decode()
    assert _team_reads(page.captured_queries) == 1


@pytest.mark.django_db
def test_a_person_added_to_a_team_sees_its_cases_on_the_next_request(
    client, lead, other_team, other_case
):
    case = other_case
    client.force_login(lead)
    url = f"/admin/cases/case/{case.pk}/change/"
    assert client.get(url).status_code in (302, 404)  # not one of the lead's teams

    other_team.members.add(lead)

    response = client.get(url)
    assert response.status_code == 200
    assert case.reference in response.content.decode()

    other_team.members.remove(lead)
    assert client.get(url).status_code in (302, 404)


@pytest.mark.django_db
def test_outside_a_request_every_read_is_fresh_and_inside_one_the_first_read_holds(
    lead, team, other_team
):
    assert team_ids_of(lead) == [team.pk]
    other_team.members.add(lead)
    assert team_ids_of(lead) == sorted([team.pk, other_team.pk])  # a service sees it at once

    with team_ids_read_once(), CaptureQueriesContext(connection) as inside:
        first = team_ids_of(lead)
        other_team.members.remove(lead)
        again = team_ids_of(lead)
    assert first == again == sorted([team.pk, other_team.pk])
    assert _team_reads(inside.captured_queries) == 1

    assert team_ids_of(lead) == [team.pk]  # the block ended: read afresh
