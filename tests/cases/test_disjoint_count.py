"""A list filtered by who is responsible now counts its cases part by part (``cases.disjoint``,
``cases.paging.count_at_most``): the person's own cases, and the cases they back up for the
owners away. The count is the same as the filter's rows however the list is narrowed; only
the way it is read changes (on PostgreSQL, a ``UNION ALL`` of the parts, each under its own
``LIMIT``)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.models import Q
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cases.disjoint import EitherOf, split_parts
from cases.models import Case, StaffProfile
from cases.paging import BoundedCountPaginator, count_at_most

pytestmark = pytest.mark.django_db


@pytest.fixture
def desk(make_case, team, lead, backup, agent):
    """Three cases of the lead's (backed up by ``backup``), two of ``backup``'s own (backed up
    by the lead), one of the agent's; the lead and the agent are away today."""
    theirs = [make_case() for _ in range(3)]
    team.default_owner, team.default_backup = backup, lead
    team.save()
    own = [make_case() for _ in range(2)]
    team.default_owner, team.default_backup = agent, backup
    team.save()
    agents = [make_case()]
    until = timezone.localdate() + dt.timedelta(days=2)
    for person in (lead, agent):
        StaffProfile.objects.create(user=person, away_until=until)
    return {"theirs": theirs, "own": own, "agents": agents}


def _pks(rows):
    return sorted(rows.values_list("pk", flat=True))


def test_the_filter_is_read_as_its_parts(desk, backup):
    """While someone is away and the person is not, "responsible now" is the person's own cases
    or the cases they back up for the owners away: two parts, which hold the filter's rows
    once each."""
    responsible = Case.objects.responsible(backup)
    expected = {c.pk for c in desk["own"] + desk["theirs"] + desk["agents"]}
    assert set(_pks(responsible)) == expected
    parts = split_parts(responsible)
    assert parts is not None
    assert len(parts) == 2
    assert sorted(pk for part in parts for pk in _pks(part)) == sorted(expected)


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 6, 7, 50])
def test_a_bounded_count_reads_at_most_its_limit(desk, backup, limit):
    assert count_at_most(Case.objects.responsible(backup), limit) == min(6, limit)


@pytest.mark.parametrize("cap", [1, 3, 5, 6, 7])
def test_the_page_count_says_when_it_is_a_bound(desk, backup, cap):
    paginator = BoundedCountPaginator(Case.objects.responsible(backup).order_by("-pk"), 2)
    paginator.cap = cap
    assert int(paginator.count) == min(6, cap)
    assert paginator.count.capped is (cap < 6)


def test_filters_added_after_are_counted_in_every_part(desk, backup):
    """A list narrows the filter further (the team, a status, a search): each part keeps it."""
    lowest = min(c.number for c in desk["agents"] + desk["own"])
    narrowed = (
        Case.objects.responsible(backup).filter(number__gte=lowest).exclude(pk=desk["own"][0].pk)
    )
    assert split_parts(narrowed) is not None
    assert count_at_most(narrowed, 100) == len(_pks(narrowed)) == 2


def test_under_a_not_or_an_or_the_filter_is_counted_whole(desk, backup, agent):
    """Split under a NOT or an OR, the parts would not hold the same rows: such a list is
    counted as it is (one count of the whole filter)."""
    either = EitherOf(Q(owner=backup), Q(owner=agent))
    negated = Case.objects.exclude(either)
    assert split_parts(negated) is None
    assert count_at_most(negated, 100) == len(_pks(negated)) == 3
    widened = Case.objects.responsible(backup) | Case.objects.filter(owner=agent)
    assert split_parts(widened) is None
    assert count_at_most(widened, 100) == len(_pks(widened)) == 6
    assert split_parts(Case.objects.responsible(backup).distinct()) is None


def test_without_anyone_away_the_filter_is_the_persons_own_cases(desk, backup, lead):
    StaffProfile.objects.all().delete()
    responsible = Case.objects.responsible(backup)
    assert split_parts(responsible) is None
    assert set(_pks(responsible)) == {c.pk for c in desk["own"]}
    assert set(_pks(Case.objects.responsible(lead))) == {c.pk for c in desk["theirs"]}


@pytest.mark.postgres_only
def test_on_postgresql_each_part_is_counted_under_its_own_limit(desk, backup):
    """One statement: the parts' rows, each part cut at the limit, in a ``UNION ALL``."""
    with CaptureQueriesContext(connection) as captured:
        assert count_at_most(Case.objects.responsible(backup), 4) == 4
    (sql,) = [q["sql"] for q in captured.captured_queries if '"cases_case"' in q["sql"]]
    assert sql.count("LIMIT 4") == 2, sql
    assert " UNION ALL " in sql, sql
