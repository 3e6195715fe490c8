"""``make bench``'s list pages compare the same desk with a shorter and a longer history: the open
work (the latest cases) must hold the same statuses per team at every size, or a filtered queue
compares a page of 75 rows with one of 100 (seed version 7 did, on the ready queue)."""

from __future__ import annotations

import gc
from collections import Counter

import pytest
from django.conf import settings
from django.db import connection, transaction

from cases.paging import BoundedCountAdminMixin
from cases.roles import ensure_roles
from lab.bench.lists import BENCH_TEAM_ID, OPEN_WINDOW, seed

pytestmark = pytest.mark.django_db

# The longer of the admin's and the API's pages.
PAGE = max(BoundedCountAdminMixin.list_per_page, settings.REST_FRAMEWORK["PAGE_SIZE"])


def _open_work(size: int) -> Counter[tuple[int, str]]:
    """Seed ``size`` cases in a savepoint and count the open window's cases by team and status;
    the seed is rolled back after."""
    point = transaction.savepoint()
    try:
        with connection.cursor() as cursor:
            seed(cursor, size)
            cursor.execute(
                "SELECT team_id, status, count(*) FROM cases_case WHERE id > %s GROUP BY 1, 2",
                [size - OPEN_WINDOW],
            )
            return Counter({(team, status): n for team, status, n in cursor.fetchall()})
    finally:
        transaction.savepoint_rollback(point)


def test_the_open_work_is_the_same_desk_at_every_size():
    if connection.vendor != "postgresql":
        pytest.skip("the bench seeds PostgreSQL (hashint4, generate_series)")
    ensure_roles()
    short, longer = _open_work(OPEN_WINDOW), _open_work(OPEN_WINDOW + 4_000)
    assert short == longer
    # Every queue the bench filters on holds a full page of the bench team's cases.
    for status in ("ready", "awaiting_review"):
        assert short[(BENCH_TEAM_ID, status)] >= PAGE, status


def test_each_timed_request_starts_with_the_earlier_garbage_collected():
    """The pages are timed in the bench's own process: a collection of what earlier requests
    (or phases) left must not land inside a page's time. Each timed request starts right after
    a collection: no generation has counted anything yet."""
    from types import SimpleNamespace

    from lab.bench.lists import Page, _requests, _Samples

    seen = []

    class Client:
        def get(self, path, params):
            seen.append(gc.get_count())
            self.kept = [[] for _ in range(20_000)]  # what the next request finds
            return SimpleNamespace(status_code=200)

    _requests(Client(), Page("a page", "/"), _Samples(), 3)
    assert len(seen) == 4  # the warm-up, then three timed
    for counts in seen[1:]:
        assert counts[1:] == (0, 0), seen
        assert counts[0] < 100, seen


def test_the_sizes_take_their_requests_in_turn_neither_always_first():
    """Each page's timed requests alternate between the sizes, request by request: as a block of
    one size's requests then the other's, a slow moment of the shared machine fell on one side
    of the ratio only."""
    from lab.bench.lists import in_turn

    assert list(in_turn((10_000, 1_000_000), 4)) == [
        10_000,
        1_000_000,
        1_000_000,
        10_000,
        10_000,
        1_000_000,
        1_000_000,
        10_000,
    ]


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_each_side_keeps_its_own_connection_open_on_its_database_across_requests(monkeypatch):
    """A size's requests run on a thread of its own whose connection stays open on its database
    (turning to the other size reconnects nothing), without touching the caller's connection;
    a round gives each size its timed requests, in turn, and their query counts."""
    from django.contrib.auth import get_user_model

    from lab.bench import lists
    from lab.bench.lists import BENCH_USERNAME, Page, _measure_in_turn, _Samples, _Side

    asked: list[int] = []
    timed = lists._requests

    def recorded(client, *args, **kwargs):
        asked.append(next(size for size, side in sides.items() if side.client is client))
        return timed(client, *args, **kwargs)

    monkeypatch.setattr(lists, "_requests", recorded)

    get_user_model().objects.create_user(BENCH_USERNAME, password="x", is_staff=True)
    name = connection.settings_dict["NAME"]

    def where() -> tuple[str, int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_database(), pg_backend_pid()")
            return cursor.fetchone()

    mine = where()
    sides = {1: _Side(name), 2: _Side(name)}
    try:
        first = {size: side.run(where) for size, side in sides.items()}
        entries = {size: _Samples() for size in sides}
        _measure_in_turn(sides, Page("the admin's home", "/admin/"), entries, 3)
        after = {size: side.run(where) for size, side in sides.items()}
    finally:
        for side in sides.values():
            side.close()
    assert asked == [1, 2, 2, 1, 1, 2]
    assert first == after  # the same backend before and after the requests
    assert {db for db, _ in first.values()} == {name}
    assert len({pid for _, pid in first.values()} | {mine[1]}) == 3
    assert where() == mine
    assert connection.settings_dict["NAME"] == name
    for entry in entries.values():
        assert len(entry.ms) == 3
        assert not entry.failed
        assert len(entry.queries) == 1


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_each_side_asks_the_server_what_a_served_page_asks_and_the_page_timeout():
    """The pages are measured as the product serves them: a side's connection keeps the
    server settings of ``config.settings`` (each statement planned for its values, no parallel
    workers, no JIT compilation) beside the page timeout. The timeout replaced them: the pages
    were planned generically after five runs and compiled when an estimate passed
    ``jit_above_cost``, as no served request is."""
    from django.contrib.auth import get_user_model

    from lab.bench.lists import BENCH_USERNAME, PAGE_TIMEOUT_S, _database, _Side

    get_user_model().objects.create_user(BENCH_USERNAME, password="x", is_staff=True)
    names = ("plan_cache_mode", "max_parallel_workers_per_gather", "jit", "statement_timeout")

    def asked() -> dict[str, str]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", [list(names)]
            )
            return dict(cursor.fetchall())

    served = asked()
    side = _Side(connection.settings_dict["NAME"])
    try:
        on_side = side.run(asked)
    finally:
        side.close()
    connection.close()
    with _database(connection.settings_dict["NAME"]):
        in_block = asked()
    for settings_seen in (on_side, in_block):
        assert settings_seen["statement_timeout"] == str(PAGE_TIMEOUT_S * 1000)
        assert settings_seen["jit"] == "off"
        for name in ("plan_cache_mode", "max_parallel_workers_per_gather"):
            assert settings_seen[name] == served[name], name
    assert served["plan_cache_mode"] == "force_custom_plan"
