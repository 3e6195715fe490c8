"""Every list page is answered through indexes and counts a bounded number of rows.

The benchmark (``lab.bench.lists``, ``make bench``) measures the pages at 10k
and 1M cases; these tests hold the reasons the pages are flat, without timing anything:

- on PostgreSQL, on the benchmark's own set-based seed (20k cases, analyzed), no query of any
  list page (each changelist filter and search, the queues, the approver queue, the events,
  the API lists) reads a table of cases or webhooks with a sequential scan, except a count
  that stops after a bounded number of rows (``LIMIT``: it reads at most a few thousand rows
  however big the table), and the search asks the trigram indexes;
- the page counts at most ``COUNT_CAP`` rows past the page (``cases.paging``): its count query
  carries the ``LIMIT``, the page says "1,000+", and paging past the cap still works.
"""

from __future__ import annotations

import os
import re

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cases.paging import COUNT_CAP
from lab.bench import lists

SEQ_SCAN = re.compile(
    r"Seq Scan on (cases_case|cases_caseevent|approvals_\w+|reconciliation_inboundevent)\b"
)


def _seed(size: int, *, spread: bool = False) -> None:
    """The benchmark's seed, as the benchmark loads it: the secondary indexes built after the
    rows (inside the test's transaction), so no trigram index starts with a pending list of a
    whole table's inserts (autovacuum or ``gin_clean_pending_list`` would merge it).
    ``spread``: the cases over the whole two years, so a filter by date holds the share of the
    table it holds at 1M (the past week: 1%), and the planner chooses as it would there."""
    with connection.cursor() as cursor:
        lists.seed(
            cursor, size, rebuild_indexes=True, history=size if spread else lists.HISTORY_CASES
        )


@pytest.fixture
def as_bench_lead(client):
    def login():
        client.force_login(get_user_model().objects.get(username=lists.BENCH_USERNAME))
        return client

    return login


def _plans(client, page: lists.Page) -> list[tuple[str, str]]:
    """(SQL, EXPLAIN) of every query the page ran that reads a table of cases, their events,
    accounts or proposals."""
    client.get(page.path, page.params)  # warm: session, permissions, content types
    with CaptureQueriesContext(connection) as captured:
        response = client.get(page.path, page.params)
    assert response.status_code == 200, (page.name, response.status_code)
    found = []
    for query in captured.captured_queries:
        sql = query["sql"]
        if not re.search(
            r'"(cases_case|cases_caseevent|cases_customeraccount|approvals_proposal'
            r'|reconciliation_inboundevent)"',
            sql,
        ):
            continue
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN {sql}")
            found.append((sql, "\n".join(row[0] for row in cursor.fetchall())))
    return found


# The tables a bounded count may read in a sequential scan (under its ``LIMIT``).
COUNTED_BY_A_SCAN = {"cases_case", "reconciliation_inboundevent"}


def _bounded_count(sql: str, plan: str) -> bool:
    """A count of at most a bounded number of rows: ``COUNT(*) FROM (… LIMIT n)``, its scan
    under the Limit (it stops after n rows)."""
    return (
        sql.startswith("SELECT COUNT(*) FROM (")
        and plan.lstrip().startswith(("Aggregate", "Finalize Aggregate"))
        and "->  Limit" in plan.splitlines()[1]
    )


@pytest.mark.postgres_only
def test_no_list_page_reads_every_case(db, as_bench_lead):
    _seed(20_000, spread=True)
    client = as_bench_lead()
    failures = []
    for page in lists.pages():
        plans = _plans(client, page)
        assert plans, page.name
        for sql, plan in plans:
            scans = SEQ_SCAN.findall(plan)
            # A count of the webhooks a lead may see reads them in any order until the cap:
            # whether a case is on each one's order is stored with it (reconciliation 0018),
            # so at 20k the planner expects a quarter of them to count and scans the first.
            if scans and not (
                set(scans) <= COUNTED_BY_A_SCAN
                and (
                    _bounded_count(sql, plan)
                    or (set(scans) == {"cases_case"} and _stops_early(plan))
                )
            ):
                failures.append(f"{page.name}: {sql[:200]}\n{plan}")
    assert not failures, "\n\n".join(failures)


def _stops_early(plan: str) -> bool:
    """Each sequential scan of the cases is a read of the first rows that the planner expects
    to stop after a few thousand rows: a word's key (``cases.search``) it expects in half the
    table, the first ``RESOLVED_MATCHES`` + 1 of them (at 1M cases, where the key is rarer, the
    same read goes through the trigram index). The search reads every word's capped rows in one
    statement, one ``Limit`` over its scan each."""
    lines = [line.strip() for line in plan.splitlines()]
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE relname = 'cases_case'")
        table = cursor.fetchone()[0]
    scans = [at for at, line in enumerate(lines) if line.startswith("->  Seq Scan on cases_case")]
    for at in scans:
        limit = re.match(r"(?:->  )?Limit .*rows=(\d+)", lines[at - 1]) if at else None
        scan = re.match(r"->  Seq Scan on cases_case .*rows=(\d+)", lines[at])
        if not (limit and scan):
            return False
        if int(limit.group(1)) * table / max(1, int(scan.group(1))) > 5_000:
            return False
    return bool(scans)


def _cost(plan: str) -> float:
    """The plan's total estimated cost (its first line's ``cost=start..total``)."""
    return float(re.search(r"cost=[\d.]+\.\.([\d.]+)", plan).group(1))


@pytest.mark.postgres_only
def test_the_events_of_one_action_are_counted_from_their_index_by_a_clear_margin(db, as_bench_lead):
    """The events page filtered by action counts the lead's events of that action up to the
    cap by walking ``event_action_case_idx`` in case order and merging with the team's cases
    by their key: it stops at the cap, however many cases the team has. Through the case's
    index alone, the planner costed that merge within 5% of a hash of every case of the team
    (a quarter of the table), and chose the hash in one CI run: a plan on that edge is the
    planner's coin toss. The hash must cost a fifth more than the plan chosen."""
    _seed(20_000, spread=True)
    page = next(p for p in lists.pages() if p.name == "admin events action filter")
    counts = [
        (sql, plan) for sql, plan in _plans(as_bench_lead(), page) if sql.startswith("SELECT COUNT")
    ]
    assert len(counts) == 1, counts
    sql, plan = counts[0]
    assert "event_action_case_idx" in plan, plan
    assert "Hash" not in plan, plan
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_mergejoin = off")
        cursor.execute("SET LOCAL enable_nestloop = off")
        cursor.execute(f"EXPLAIN {sql}")
        hashed = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("RESET enable_mergejoin")
        cursor.execute("RESET enable_nestloop")
    assert "Hash Join" in hashed, hashed
    assert _cost(hashed) >= 1.2 * _cost(plan), f"{plan}\n\n{hashed}"


@pytest.mark.postgres_only
def test_no_index_of_a_busy_table_is_the_start_of_another(db):
    """Every index costs each insert, and each update that is not HOT; a plain index on the
    leading columns of another index of the same table (the same operator classes) answers
    nothing the longer one does not. The events' case index was the start of
    ``cases_event_chain_idx``: five events an apply updated it for nothing; the case's team,
    the attempt's and the operation's case, the account event's account and the
    notification's event were the same (``cases`` 0030-0031, ``approvals`` 0010)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.relname, ic.relname,
                   ARRAY(SELECT k || ':' || o FROM unnest(i.indkey::int2[], i.indclass::oid[])
                         WITH ORDINALITY AS u(k, o, n) ORDER BY n),
                   i.indisunique,
                   i.indexprs IS NULL AND i.indpred IS NULL AND am.amname = 'btree'
            FROM pg_index i
            JOIN pg_class c ON c.oid = i.indrelid
            JOIN pg_class ic ON ic.oid = i.indexrelid
            JOIN pg_am am ON am.oid = ic.relam
            WHERE c.relname IN ('cases_case', 'cases_caseevent', 'cases_attempt',
                                'cases_accountevent', 'cases_notification',
                                'cases_customeraccount', 'approvals_operation',
                                'approvals_proposal', 'approvals_approval',
                                'reconciliation_inboundevent')
            """
        )
        rows = [row for row in cursor.fetchall() if row[4]]  # plain btree indexes
    assert len({row[0] for row in rows}) == 10, rows
    redundant = [
        f"{table}: {name} is the start of {other}"
        for table, name, keys, unique, _plain in rows
        if not unique
        for other_table, other, other_keys, _unique, _plain in rows
        if other_table == table and other != name and other_keys[: len(keys)] == keys
    ]
    assert not redundant, redundant


@pytest.mark.postgres_only
@pytest.mark.parametrize(
    ("name", "index"),
    [
        ("admin changelist search case reference", "case_reference_trgm"),
        ("admin changelist search order id", "case_order_id_trgm"),
        ("admin changelist search account reference", "account_reference_trgm"),
        ("admin held queue search order id", "case_order_id_trgm"),
        ("admin events search case reference", "case_reference_trgm"),
        ("admin events search reason", "event_reason_trgm"),
        ("admin events search actor", "event_actor_label_trgm"),
        ("admin accounts search reference", "account_reference_trgm"),
        ("admin accounts search name", "account_name_trgm"),
        ("admin inbound events search order id", "recon_inbound_order_trgm"),
    ],
)
def test_search_asks_the_trigram_indexes(db, as_bench_lead, name, index):
    """Each field's part of the search can be answered by its trigram index. (Only bitmap scans
    left to the planner, as in ``test_admin_queries``: 20k cases have only 500 accounts, a table
    that a sequential read, or a walk of its primary key, answers cheapest; at 1M cases, 100k
    accounts, the planner asks the trigram index of its own accord.)"""
    _seed(20_000)
    with connection.cursor() as cursor:
        for scan in ("seqscan", "indexscan", "indexonlyscan"):
            cursor.execute(f"SET LOCAL enable_{scan} = off")
    page = next(p for p in lists.pages() if p.name == name)
    plans = _plans(as_bench_lead(), page)
    assert any(index in plan for _, plan in plans), "\n\n".join(plan for _, plan in plans)


@pytest.mark.postgres_only
def test_a_search_reads_at_most_the_cap_of_cases_for_each_word_and_field(db, as_bench_lead):
    """The search's statement reads at most ``RESOLVED_MATCHES`` + 1 cases in each of its
    capped reads. The cases of the accounts a word names ("Customer": every account) came as
    ``account_id = ANY(ARRAY(…)) ORDER BY account_id LIMIT 501``: the planner expected ten
    keys' rows, read every case of 501 accounts and sorted them (5,011 rows, 16 ms at 1M
    cases; here 20k). Each account's cases in turn, until the cap, read 501."""
    from cases import search

    _seed(20_000)
    client = as_bench_lead()
    page = next(p for p in lists.pages() if p.name == "API case list search three words")
    client.get(page.path, page.params)
    with CaptureQueriesContext(connection) as captured:
        client.get(page.path, page.params)
    statements = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("SELECT 0, ")]
    assert len(statements) == 1, [q["sql"][:80] for q in captured.captured_queries]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, TIMING OFF) {statements[0]}")
        plan = [row[0] for row in cursor.fetchall()]
    cases_read = [
        (int(found.group(1)) * int(found.group(2)), line.strip())
        for line in plan
        if " on cases_case " in line
        and (found := re.search(r"actual rows=(\d+) loops=(\d+)", line))
    ]
    assert cases_read, "\n".join(plan)
    over = [line for rows, line in cases_read if rows > search.RESOLVED_MATCHES + 1]
    assert not over, "\n".join(plan)


@pytest.mark.postgres_only
def test_who_may_see_an_inbound_event_is_read_in_the_pages_index(db, as_bench_lead):
    """For every event the inbound events page shows or counts, whether it is one of the
    lead's teams' accounts' and a case of that account is on its order (``inbound_events_for``)
    is read from the event's own columns, which the page's indexes carry: no account, case or
    team row is read. Through the account's reference it read the account and then each of its
    cases (the count of a filtered page cost 5x as much per event at 1M cases as at 10k); then
    it was one look in ``case_order_idx`` per event (1,042 looks for the failed events' count
    at 1M cases, a few at 10k); now none. Filtered by processing, the page walks
    ``recon_inbound_processing`` newest first, not every event."""
    from reconciliation.models import InboundEvent
    from reconciliation.selectors import inbound_events_for

    _seed(20_000)
    client = as_bench_lead()
    for page in lists.pages():
        if page.path.startswith("/admin/reconciliation/inboundevent/"):
            for sql, _plan in _plans(client, page):
                assert "cases_customeraccount" not in sql, (page.name, sql)
                assert '"cases_case"' not in sql, (page.name, sql)
    # The failed events newest first, as a superuser sees them (no check per event).
    failed = next(p for p in lists.pages() if p.name == "admin inbound events failed")
    client.force_login(get_user_model().objects.create_superuser("bench_root", "", "x"))
    rows = [plan for sql, plan in _plans(client, failed) if not sql.startswith("SELECT COUNT")]
    assert any("recon_inbound_processing" in plan for plan in rows), rows
    # The lead's count of the failed events can read the events from that index alone: it
    # carries every column of the event the count reads (at 1M cases, read so it took 12 ms,
    # against 25 ms through the table; at this size the planner may still choose the table).
    client = as_bench_lead()
    counts = [sql for sql, _plan in _plans(client, failed) if sql.startswith("SELECT COUNT")]
    assert counts, failed.name
    read = set(re.findall(r'"reconciliation_inboundevent"\."(\w+)"', counts[0]))
    assert {"processing", "account_team_id", "on_case"} <= read, counts[0]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_indexdef('recon_inbound_processing'::regclass)")
        definition = cursor.fetchone()[0]
    indexed = set(re.findall(r"\b(\w+)\b", definition.split(" USING ", 1)[1]))
    assert read - {"id"} <= indexed, (read, definition)
    # One event's check, as the page makes it for each event it reads: no other table.
    lead = get_user_model().objects.get(username=lists.BENCH_USERNAME)
    event = InboundEvent.objects.filter(account__team_id=lists.BENCH_TEAM_ID).first()
    assert event is not None
    one = inbound_events_for(lead).filter(pk=event.pk)
    plan = one.explain()
    assert "cases_case" not in plan, plan
    # The lead's teams are named (``account_team_id IN (…)``), not joined through the teams
    # and their members for each event: two lookups more an event.
    assert "cases_team" not in plan, plan
    assert list(one) == [event]


@pytest.mark.postgres_only
@pytest.mark.parametrize(
    ("model", "path", "terms"),
    [
        (
            "cases.Case",
            "/admin/cases/case/",
            [
                "ORD-1000040",
                "00004",
                "Customer 7",
                "D-1",
                "'ORD-10001' Customer",
                "Customer D-1 0",
                "zz-no",
            ],
        ),
        # The reason is a text field, the actor a character field, the case reference through
        # the case: each word must match one of them.
        (
            "cases.CaseEvent",
            "/admin/cases/caseevent/",
            ["reconcile", "Opened", "SYSTEM", "D-1", "D-10 opened", "zz-no", "'a decision'"],
        ),
        (
            "cases.CustomerAccount",
            "/admin/cases/customeraccount/",
            ["ACC-000001", "Customer 1", "zz-no"],
        ),
    ],
)
@pytest.mark.parametrize("cap", [None, 3])
def test_search_finds_what_the_admins_search_finds(
    db, as_bench_lead, monkeypatch, model, path, terms, cap
):
    """The field-by-field search (``cases.admin.search``) finds the same rows as the admin's
    own ``OR`` of ``icontains`` would: a word inside an order id, a whole reference, an account
    name, a phrase in a reason, and two words that must both match. With a cap of 3 rows a
    word resolves to, most words match more: then they are checked on the rows another word
    left, or, when every word matches more than the cap, the answer is said to be cut and
    holds only rows the admin's search finds too."""
    from django.apps import apps
    from django.contrib.admin import ModelAdmin, site

    from cases import search

    if cap is not None:
        monkeypatch.setattr(search, "RESOLVED_MATCHES", cap)
    _seed(200)
    client = as_bench_lead()
    admin = site._registry[apps.get_model(model)]
    request = client.get(path).wsgi_request
    found = {}
    cut = set()
    for term in terms:
        ours, truncated = search.indexed_search(
            admin.get_queryset(request), admin.get_search_fields(request), term
        )
        theirs, _ = ModelAdmin.get_search_results(admin, request, admin.get_queryset(request), term)
        found[term] = set(ours.values_list("pk", flat=True))
        expected = set(theirs.values_list("pk", flat=True))
        if truncated:  # every word matched more than the cap: some of the matches, no other
            cut.add(term)
            assert found[term] <= expected, term
        else:
            assert found[term] == expected, term
    # Only a cap smaller than the matches of every word cuts the answer.
    if cap is None:
        assert not cut, cut
    # Not a comparison of two empty answers: every word but the one nothing has finds rows.
    sizes = {term: len(rows) for term, rows in found.items() if term not in cut}
    assert all(size for term, size in sizes.items() if term != "zz-no"), sizes


@pytest.mark.postgres_only
def test_the_changelist_counts_at_most_the_cap_and_pages_past_it(db, as_bench_lead):
    _seed(8_000)  # 2,000 of them the bench lead's team's: more than the cap
    client = as_bench_lead()
    with CaptureQueriesContext(connection) as captured:
        response = client.get("/admin/cases/case/")
    assert response.status_code == 200
    # The header's unread count counts the person's notifications, not the list's rows.
    counts = [
        q["sql"]
        for q in captured.captured_queries
        if "COUNT(*)" in q["sql"] and "cases_notification" not in q["sql"]
    ]
    assert len(counts) == 1, counts
    assert f"LIMIT {COUNT_CAP + 1}" in counts[0], counts[0]
    cl = response.context["cl"]
    assert cl.result_count == COUNT_CAP
    assert f"{COUNT_CAP:,}+ cases" in response.content.decode()
    # The last page under the cap links on: the bound moves with the page asked for.
    last = COUNT_CAP // cl.list_per_page
    response = client.get("/admin/cases/case/", {"p": str(last)})
    assert response.status_code == 200
    assert len(response.context["cl"].result_list) == cl.list_per_page
    assert response.context["cl"].paginator.num_pages > last


@pytest.mark.postgres_only
def test_the_api_says_when_its_count_is_capped(db, as_bench_lead):
    _seed(4_400)  # 1,100 of the bench lead's team's
    client = as_bench_lead()
    first = client.get("/api/cases/").json()
    assert first["count"] == COUNT_CAP
    assert first["count_capped"] is True
    page = COUNT_CAP // 50 + 1  # past the cap of the first page
    later = client.get("/api/cases/", {"page": page}).json()
    assert later["results"]
    assert later["count_capped"] is False
    assert later["count"] == 1_100


@pytest.mark.postgres_only
def test_a_count_under_the_cap_is_exact(db, as_bench_lead):
    _seed(400)
    answer = as_bench_lead().get("/api/cases/").json()
    assert answer == {**answer, "count": 100, "count_capped": False}


@pytest.mark.django_db
@pytest.mark.parametrize("page", ["", "x", "0", "-1", "1.5"])
def test_the_api_refuses_a_page_that_is_not_a_page_number(api, lead, page):
    """Schemathesis sent ``?page=&status=draft`` and got 200: DRF reads an empty page as the
    first. The schema says ``integer``: every non-number is refused alike."""
    for url in ("/api/cases/", "/api/proposals/"):
        response = api(lead).get(url, {"page": page})
        assert response.status_code == 404, (url, page, response.content)
        assert response.json()["detail"].startswith("Invalid page"), response.json()
    assert api(lead).get("/api/cases/", {"page": "1"}).status_code == 200


@pytest.mark.postgres_only
def test_a_page_is_planned_for_its_values_on_every_request(db, as_bench_lead):
    """A served connection prepares the statements it repeats, but plans each run for its
    values (``plan_cache_mode``: ``config.settings``): PostgreSQL's generic plan, chosen after
    five runs, ignores them, and the approver queue's count of a rare status took 232 ms
    instead of 2 ms at 1M cases from a connection's eleventh request on. A worker's connection
    keeps the generic plans (its statements' one plan fits every value; planning the claim's
    read costs more than running it)."""
    import subprocess
    import sys

    _seed(2_000)
    client = as_bench_lead()
    queue = [p for p in lists.pages() if "approver queue" in p.name]
    assert queue
    for _ in range(12):
        for page in queue:
            assert client.get(page.path, page.params).status_code == 200
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE %s",
            ['%"approvals_proposal"%'],
        )
        prepared = cursor.fetchall()
    assert any(custom >= 12 for _sql, _generic, custom in prepared), prepared
    assert all(generic == 0 for _sql, generic, _custom in prepared), prepared

    def options(command: str) -> str:
        code = (
            "import sys, django; sys.argv = ['manage.py', sys.argv[1]]; "
            "import os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings'); "
            "django.setup(); from django.conf import settings; "
            "print(settings.DATABASES['default'].get('OPTIONS', {}).get('options', ''))"
        )
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DB_PLAN_CACHE_MODE", "DB_PARALLEL_WORKERS_PER_QUERY", "DB_JIT")
        }
        env["DATABASE_URL"] = "postgres://holdfast@127.0.0.1:5432/unused"
        done = subprocess.run(  # noqa: S603 - our own interpreter
            [sys.executable, "-c", code, command],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    serial = "-c max_parallel_workers_per_gather=0 -c jit=off"
    assert options("runserver") == f"-c plan_cache_mode=force_custom_plan {serial}"
    for worker in ("qcluster", "run_cluster", "run_worker"):
        assert options(worker) == f"-c plan_cache_mode=auto {serial}", worker


@pytest.mark.parametrize("text", ["D-41", 'A <b>"case"</b> & more'])
def test_each_rows_checkbox_is_djangos_own_html(text):
    """The list pages write each row's action checkbox out (``cases.paging``): the HTML is
    Django's widget's, escaping included, for a row of any text."""
    from django.contrib import admin

    from cases.models import Case
    from cases.paging import BoundedCountAdminMixin

    class Row:
        pk = 7

        def __str__(self) -> str:
            return text

    site = admin.AdminSite(name="checkbox-test")
    ours = type("Ours", (BoundedCountAdminMixin, admin.ModelAdmin), {})(Case, site)
    theirs = admin.ModelAdmin(Case, site)
    assert ours.action_checkbox(Row()) == theirs.action_checkbox(Row())


def test_every_long_list_shows_the_apis_page_of_rows():
    """Each list that can hold every case (the cases, the queues, the approver's queue, the
    events, the accounts, the inbound events) shows a page of the API's size, as the inbox
    does: Django's 100 rows spent most of the case list's time rendering rows."""
    from django.conf import settings
    from django.contrib import admin

    from cases.paging import BoundedCountAdminMixin

    long_lists = [a for a in admin.site._registry.values() if isinstance(a, BoundedCountAdminMixin)]
    assert len(long_lists) >= 6, [type(a).__name__ for a in long_lists]
    for model_admin in long_lists:
        assert model_admin.list_per_page == settings.REST_FRAMEWORK["PAGE_SIZE"], model_admin


@pytest.mark.postgres_only
def test_a_list_names_the_users_teams_and_joins_no_membership(db, as_bench_lead):
    """The case list's count and rows name the user's teams (``team_id IN (…)``): the join on
    the team membership left PostgreSQL's planner two tables more to order, and at 1M cases it
    planned the page for 9-14 ms to run it in under 1."""
    _seed(200)
    client = as_bench_lead()
    client.get("/admin/cases/case/")
    with CaptureQueriesContext(connection) as captured:
        assert client.get("/admin/cases/case/").status_code == 200
        assert client.get("/api/cases/").status_code == 200
    listing = [q["sql"] for q in captured.captured_queries if 'FROM "cases_case"' in q["sql"]]
    assert len(listing) >= 4, listing  # each page's count and rows
    for sql in listing:
        assert '"cases_team_members"' not in sql, sql
        assert '"cases_case"."team_id" IN (' in sql, sql


@pytest.mark.postgres_only
def test_responsible_now_names_who_is_away_and_joins_no_profile(db, as_bench_lead):
    """The "responsible now" filter names the staff away today (``owner_id IN (…)``) instead of
    joining each case's owner to their staff profile: joined, at 1M cases the page's rows took
    19 ms (a parallel walk of the cases) against 5 ms at 10k, and its count 21 ms against 1.
    The count reads the cases alone; the rows join the profile only to show who is away."""
    _seed(200)
    page = next(p for p in lists.pages() if p.name == "admin changelist responsible now")
    client = as_bench_lead()
    client.get(page.path, page.params)
    with CaptureQueriesContext(connection) as captured:
        assert client.get(page.path, page.params).status_code == 200
    listing = [q["sql"] for q in captured.captured_queries if 'FROM "cases_case"' in q["sql"]]
    counts = [sql for sql in listing if sql.startswith("SELECT COUNT(*)")]
    assert counts, listing
    for sql in counts:
        assert '"cases_staffprofile"' not in sql, sql
    for sql in listing:
        where = sql.split(" WHERE ", 1)[1]
        assert '"cases_staffprofile"' not in where, sql
        assert '"cases_case"."owner_id" IN (' in where, sql


@pytest.mark.django_db
def test_a_change_of_team_shows_at_the_next_request(api, lead, make_case):
    """The teams are read at each request: a person taken off a team sees none of its cases at
    the next one, and sees another team's once made a member."""
    from cases.models import Team

    case = make_case()
    client = api(lead)
    ids = [row["reference"] for row in client.get("/api/cases/").json()["results"]]
    assert case.reference in ids
    case.team.members.remove(lead)
    assert client.get("/api/cases/").json()["results"] == []
    other = Team.objects.create(name="Other desk")
    other.members.add(lead)
    case.team = other
    case.save(update_fields=["team"])
    ids = [row["reference"] for row in client.get("/api/cases/").json()["results"]]
    assert ids == [case.reference]


@pytest.mark.postgres_only
def test_the_owner_filter_counts_through_the_owner_and_team_index(db, as_bench_lead):
    """The list filtered by owner counts that owner's cases in the lead's teams through
    ``case_owner_team_idx``, both conditions in the index. Through the owner's own index each
    case's team was read in the table, so the planner scanned the table: at 1M cases the count
    read 34,548 cases to count 1,001 (10.9 ms, against 1.0 ms at 10k; with the index, 1,001
    index entries and no table: 0.3 ms; cases 0039)."""
    _seed(20_000, spread=True)
    page = next(p for p in lists.pages() if p.name == "admin changelist owner")
    counts = [plan for sql, plan in _plans(as_bench_lead(), page) if sql.startswith("SELECT COUNT")]
    assert counts, page.name
    assert "Seq Scan" not in counts[0], counts[0]
    assert "case_owner_team_idx" in counts[0], counts[0]
    both = r"Index Cond: \(\(owner_id = \d+\) AND \(team_id = \d+\)\)"
    assert re.search(both, counts[0]), counts[0]


@pytest.mark.postgres_only
def test_the_responsible_now_filter_counts_each_part_in_its_own_index(db, as_bench_lead):
    """The list filtered by who is responsible now counts the person's own cases and the cases
    they back up for the owners away apart (``UNION ALL``, each part under its ``LIMIT``), each
    read in an index that holds all its conditions. As one ``OR`` the count built a bitmap of
    every case of the owner, of the backup and of the owners away before counting one: at 1M
    cases 12.8 ms against 1 at 10k (the page 1.31× its time at 10k in ``make bench``); part by
    part, 0.4 ms (cases 0040)."""
    _seed(20_000, spread=True)
    page = next(p for p in lists.pages() if p.name == "admin changelist responsible now")
    counts = [plan for sql, plan in _plans(as_bench_lead(), page) if sql.startswith("SELECT COUNT")]
    assert counts, page.name
    plan = counts[0]
    for unbounded in ("BitmapOr", "BitmapAnd", "Seq Scan"):
        assert unbounded not in plan, plan
    # (In the test's transaction nothing is vacuumed, so a part may read its index entries as
    # a bitmap; at 1M cases, vacuumed, the planner reads the index alone.)
    own = r"Scan (?:using|on) case_owner_team_idx .*\n.*Index Cond: \(\(owner_id = \d+\) AND"
    backing_up = (
        r"Scan (?:using|on) case_backup_owner_idx .*\n.*Index Cond: \(\(backup_id = \d+\) "
        r"AND \(owner_id = ANY"
    )
    assert re.search(own, plan), plan
    assert re.search(backing_up, plan), plan
    assert plan.count("->  Limit") == 2, plan
