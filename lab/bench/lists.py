"""The admin and API list pages at 10k and 1M cases: each page's time and query count.

    lines, ok = measure_list_pages()          # rounds=3, sizes=(10_000, 1_000_000)

PostgreSQL only, on a database whose name starts with ``bench``. Each size gets its own
database next to it (``<name>_lists_10k``, ``<name>_lists_1m``), created, migrated and seeded
with set-based SQL (``INSERT … SELECT … FROM generate_series``) into the real tables, then
vacuumed and analyzed (autovacuum is off on this machine; a served database's is on, so its
settled rows are marked visible and an index-only scan reads no table row). A seeded database
is reused while its
``bench_list_seed`` row names this module's :data:`SEED_VERSION` and its size; otherwise it is
dropped and seeded again.

The pages are requested through Django's test ``Client`` as ``bench_lead``, a staff member of one of
the four teams (lead and approver, not a superuser: the team scoping is exercised), in interleaved
rounds: in each, every page after a warm-up request at every size, then ``repeat`` times at each
size in turn, request by request (the first size first, then the last first: :func:`in_turn`). Each
size is served by a thread of its own whose connection stays open on its database (:class:`_Side`),
so turning from one size to the other reconnects nothing; as blocks of a size's requests, a slow
moment of the shared machine (its calibration read 16.7 ms at the start of one run and 25.4 at its
end) fell on one side of a ratio only. The requests run in the bench's own process, which holds what
its earlier phases left (the end-to-end runs, the memory run): a full garbage collection there
paused a request for up to 102 ms (five in one run's list pages, 372 ms in all), where a served
worker's own heap is small. So every object alive when the pages start is frozen out of collection
(``gc.freeze``), and each timed request starts after a collection it does not time: a request's own
garbage is collected inside its time, as a server would. Each line gives the page's median time at
the large size and the small one with [min–max], its p95 at the large size, the query count at each
size (``CaptureQueriesContext``), and the ratio of the medians; a page meets the goal when the ratio
is at most :data:`GOAL_RATIO`, its p95 at the large size at most :data:`GOAL_P95_MS` and its query
count the same at every size.
"""

# ruff: noqa: S608 - the seed's SQL interpolates this module's own integers and names only.
from __future__ import annotations

import datetime as dt
import gc
import logging
import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils import timezone

SEED_VERSION = 9  # 9: the webhooks say their case is on their order (on_case)
GOAL_RATIO = 1.3
GOAL_P95_MS = 500.0  # at the largest size
PAGE_TIMEOUT_S = 30
TEAMS = 4
STAFF_PER_TEAM = 10  # the last of each team is its approver
BENCH_USER_ID = TEAMS * STAFF_PER_TEAM + 1
BENCH_USERNAME = "bench_lead"
BENCH_TEAM_ID = 1
# A member of the bench user's team: the owner / responsible-now filters' person.
FILTER_USER_ID = BENCH_TEAM_ID + TEAMS
EVENTS_PER_CASE = 2

# Every size is the same desk with a shorter or longer history: cases open at one rate, a
# million in two years (about 1,370 a day), so the 10k database holds the last week and the 1M
# one two years. A page of recent work (the past week's webhooks) holds the same rows at every
# size; a page that reaches into the history (failed webhooks) holds more at 1M. (Before seed
# version 5 each size spread its cases over the two years: the 10k desk was a hundredth as
# busy, and its past week held a hundredth of the 1M desk's.)
HISTORY_CASES, HISTORY_DAYS = 1_000_000, 730
# The open work is the latest cases': older cases are closed. The desk's queues hold what the
# team is working on now, however long its history (at 10k every case is in the window).
OPEN_WINDOW = 10_000
# Closed cases beyond the window: (first, last) of ``hash % 100``, status.
_CLOSED_MIX = [(0, 89, "done"), (90, 97, "cancelled"), (98, 99, "stopped")]
# The latest OPEN_WINDOW cases: (first, last) of ``hash % 100``, status, waiting on, waiting
# reason, open. The hash is of the case's age (its place counted from the latest), so the open
# window holds the same statuses per team at every size and a filtered queue lists the same
# rows (before seed version 8 it was of the case's id: the 10k desk had 75 ready cases of the
# bench team, fewer than a page, and the 1M desk 169). Ready takes 6%: a full page per team.
_STATUS_MIX = [
    (0, 61, "done", "nobody", "", False),
    (62, 66, "cancelled", "nobody", "", False),
    (67, 67, "stopped", "nobody", "", False),
    (68, 70, "new", "nobody", "", True),
    (71, 74, "waiting_source", "order_system", "Reading the order", True),
    (75, 76, "preparing_proposal", "worker", "Preparing a proposal", True),
    (77, 77, "preparing_proposal", "customer", "Asked the customer for a date", True),
    (78, 82, "awaiting_review", "approvers", "Awaiting a decision", True),
    (83, 88, "ready", "worker", "Queued to apply", True),
    (89, 89, "applying", "worker", "Applying", True),
    (90, 93, "held", "owner", "Effect unknown: reconcile from evidence", True),
    (94, 97, "needs_attention", "owner", "Attempts exhausted", True),
    (98, 99, "done", "nobody", "", False),
]
# Cases whose proposal is approved (and has an approval); awaiting review has an open one.
_APPROVED = ("ready", "applying", "held")


def _label(size: int) -> str:
    if size % 1_000_000 == 0:
        return f"{size // 1_000_000}M"
    if size % 1_000 == 0:
        return f"{size // 1_000}k"
    return str(size)


# --- seeding ------------------------------------------------------------------------------------


def seed_sql(size: int, *, prefix: str, history: int = HISTORY_CASES) -> list[str]:
    """The statements that seed ``size`` cases into empty tables (ids from 1), in order.

    Deterministic: case ``i`` has the same team, account and owner at every size, so a search
    or a filter finds comparable rows in each database; the latest :data:`OPEN_WINDOW` cases
    carry the open work (the same mix at every size, by age), older ones are closed. Statuses,
    owners and accounts are spread by ``hashint4`` (never correlated with the team, ``i % 4``).
    Cases open at :data:`HISTORY_CASES` in :data:`HISTORY_DAYS` days, the latest now; a
    smaller ``history`` spreads them thinner (``history=size``: over the whole two years).
    """
    per_team_accounts = max(1, size // (10 * TEAMS))  # ~10 cases per account
    mix = ", ".join(
        [
            f"(true, {lo}, {hi}, '{status}', '{waiting}', '{reason}', "
            f"{'true' if is_open else 'false'})"
            for lo, hi, status, waiting, reason, is_open in _STATUS_MIX
        ]
        + [
            f"(false, {lo}, {hi}, '{status}', 'nobody', '', false)"
            for lo, hi, status in _CLOSED_MIX
        ]
    )
    staff = TEAMS * STAFF_PER_TEAM
    owners = STAFF_PER_TEAM - 1  # owners and backups are the team's members but its approver
    approved = ", ".join(f"'{s}'" for s in _APPROVED)
    return [
        f"""
        INSERT INTO auth_user (id, password, is_superuser, username, first_name, last_name,
                               email, is_staff, is_active, date_joined)
        SELECT u, '!', false, 'bench_staff_' || u, 'Staff', 'No. ' || u, '', true, true, now()
        FROM generate_series(1, {staff}) u
        UNION ALL
        SELECT {BENCH_USER_ID}, '!', false, '{BENCH_USERNAME}', 'Bench', 'Lead', '', true, true,
               now()
        """,
        f"""
        INSERT INTO cases_team (id, name, case_prefix, default_owner_id, default_backup_id)
        SELECT t, 'Bench team ' || t,
               CASE WHEN t = 1 THEN '{prefix}'
                    ELSE 'BT' || chr(65 + (t - 1) / 26) || chr(65 + (t - 1) % 26) END,
               t, t + {TEAMS}
        FROM generate_series(1, {TEAMS}) t
        """,
        f"""
        INSERT INTO cases_team_members (team_id, user_id)
        SELECT ((u - 1) % {TEAMS}) + 1, u FROM generate_series(1, {staff}) u
        UNION ALL SELECT {BENCH_TEAM_ID}, {BENCH_USER_ID}
        """,
        f"""
        INSERT INTO auth_user_groups (user_id, group_id)
        SELECT u, g.id FROM generate_series(1, {staff}) u
        JOIN auth_group g ON g.name = CASE WHEN u > {staff - TEAMS} THEN 'approver'
                                           WHEN u % 3 = 0 THEN 'lead' ELSE 'agent' END
        UNION ALL
        SELECT {BENCH_USER_ID}, g.id FROM auth_group g WHERE g.name IN ('lead', 'approver')
        """,
        # Every third owner (by position in the team) is away: their backups answer.
        f"""
        INSERT INTO cases_staffprofile (user_id, away_until)
        SELECT u, CASE WHEN ((u - 1) / {TEAMS}) % 3 = 2 THEN current_date + 5 END
        FROM generate_series(1, {BENCH_USER_ID}) u
        """,
        f"""
        INSERT INTO cases_customeraccount (id, reference, name, email, team_id, verified,
                                           access_active)
        SELECT a, 'ACC-' || lpad(a::text, 7, '0'), 'Customer ' || a, '', ((a - 1) % {TEAMS}) + 1,
               true, true
        FROM generate_series(1, {per_team_accounts * TEAMS}) a
        """,
        f"""
        WITH mix(recent, lo, hi, status, waiting_on, reason, is_open) AS (VALUES {mix}),
        g AS (
            SELECT i, (i % {TEAMS}) + 1 AS t,
                   -- by age: the latest case is the same desk's latest at every size
                   (hashint4({size} - i) & 2147483647) % 100 AS b,
                   hashint4(i + 7) & 2147483647 AS h2,
                   hashint4(i + 13) & 2147483647 AS h3,
                   hashint4(i + 29) & 2147483647 AS h4,
                   now() - ({size} - i) * (interval '{HISTORY_DAYS} days' / {history})
                     AS c_at
            FROM generate_series(1, {size}) i
        )
        INSERT INTO cases_case (
            id, reference, number, request_key, order_id, kind, change, note, status, version,
            waiting_on, waiting_reason, outstanding_question, next_check_at, last_error,
            created_at, updated_at, closed_at, legal_hold, backup_id, owner_id, account_id,
            team_id, retry_count, revocation_kind, retry_counts
        )
        SELECT i, '{prefix}-' || i, i, 'req-' || i, 'ORD-' || (1000000 + i), 'delivery_date',
               jsonb_build_object('kind', 'delivery_date',
                                  'delivery_date', (date '2027-01-01' + (h2 % 300)::int)::text),
               '', mix.status, 2, mix.waiting_on,
               mix.reason, '',
               CASE WHEN mix.is_open THEN now() + ((h2 % 240) - 48) * interval '1 hour' END, '',
               c_at, least(now(), c_at + (h2 % 72) * interval '1 hour'),
               CASE WHEN NOT mix.is_open THEN least(now(), c_at + (h2 % 72) * interval '1 hour')
               END,
               false,
               t + {TEAMS} * ((h3 % {owners} + 1) % {owners}), t + {TEAMS} * (h3 % {owners}),
               {TEAMS} * (h4 % {per_team_accounts}) + t, t, 0, '', '{{}}'::jsonb
        FROM g JOIN mix
          ON mix.recent = (g.i > {size - OPEN_WINDOW}) AND g.b BETWEEN mix.lo AND mix.hi
        """,
        f"""
        INSERT INTO cases_caseevent (id, action, from_status, to_status, reason, actor_label,
                                     version, detail, created_at, actor_id, case_id, prev_hash,
                                     hash)
        SELECT {EVENTS_PER_CASE} * c.id - 1, 'cases.case.created', '', 'new', 'Opened',
               'system', 1, '{{}}'::jsonb, c.created_at, NULL::integer, c.id, '',
               md5('event-' || ({EVENTS_PER_CASE} * c.id - 1))
        FROM cases_case c
        UNION ALL
        SELECT {EVENTS_PER_CASE} * c.id, 'cases.case.transitioned', 'new', c.status,
               c.waiting_reason, 'system', 2, '{{}}'::jsonb, c.updated_at, NULL::integer, c.id,
               md5('event-' || ({EVENTS_PER_CASE} * c.id - 1)),
               md5('event-' || ({EVENTS_PER_CASE} * c.id))
        FROM cases_case c
        """,
        # One operation and one proposal per case that got as far as a proposal (awaiting
        # review, approved, or done with a quarter of the done cases), ids the case's.
        f"""
        CREATE TEMPORARY TABLE bench_proposed ON COMMIT DROP AS
        SELECT c.id, c.order_id, c.change, c.created_at, c.status, c.team_id
        FROM cases_case c
        WHERE c.status IN ('awaiting_review', {approved})
           OR (c.status = 'done' AND c.id % 4 = 0)
        """,
        """
        INSERT INTO approvals_operation (id, key, sequence, order_id, change, change_hash,
                                         created_at, confirmed_at, case_id)
        SELECT p.id, 'DATE-' || p.id || '-1', 1, p.order_id, p.change,
               -- cases.kinds.change_hash: SHA-256 of the canonical JSON (sorted keys, no spaces)
               encode(sha256(convert_to('{"delivery_date":"' || (p.change ->> 'delivery_date')
                                        || '","kind":"delivery_date"}', 'UTF8')), 'hex'),
               p.created_at + interval '1 minute',
               CASE WHEN p.status = 'done' THEN p.created_at + interval '2 hours' END, p.id
        FROM bench_proposed p
        """,
        """
        INSERT INTO approvals_proposal (id, order_id, change, evidence_order_version,
                                        evidence_ids, advisory_note, content_hash,
                                        prepared_by_label,
                                        status, status_reason, created_at, submitted_at,
                                        closed_at, case_id, operation_id)
        SELECT p.id, p.order_id, p.change, 1, '[]'::jsonb, '', md5('proposal-' || p.id),
               'system', CASE WHEN p.status = 'awaiting_review' THEN 'awaiting_review'
                              ELSE 'approved' END, '',
               p.created_at + interval '1 minute', p.created_at + interval '1 minute',
               CASE WHEN p.status = 'done' THEN p.created_at + interval '2 hours' END, p.id, p.id
        FROM bench_proposed p
        """,
        f"""
        INSERT INTO approvals_approval (id, reference, proposal_hash, decision, reason,
                                        decided_at, expires_at, revoked_reason, "grant",
                                        decided_by_id, operation_id, proposal_id)
        SELECT p.id, 'AP-' || p.id, md5('proposal-' || p.id), 'approved', '',
               p.created_at + interval '1 hour', p.created_at + interval '3 days', '', '',
               {staff - TEAMS} + p.team_id, p.id, p.id
        FROM bench_proposed p WHERE p.status <> 'awaiting_review'
        """,
        # The case's owner opened it: an author of its proposal (four eyes).
        """
        INSERT INTO approvals_proposalauthor (proposal_id, user_id, role, recorded_at)
        SELECT p.id, c.owner_id, 'opened_case', p.created_at
        FROM bench_proposed p JOIN cases_case c ON c.id = p.id
        """,
        # Two evidence references per held case (the held queue shows them).
        """
        INSERT INTO cases_evidencereference (source_system, external_reference, kind,
                                             permitted_basis, captured_at, summary,
                                             order_version, recorded_by, case_id)
        SELECT 'order_system', c.reference || '-E' || k, 'order_read', 'contract',
               c.updated_at + k * interval '1 minute', 'Order read', k, 'system', c.id
        FROM cases_case c CROSS JOIN generate_series(1, 2) k WHERE c.status = 'held'
        """,
        # One order.updated webhook per case, processed (its account known, and its case on
        # its order), one in fifty failed and due again: the inbound events page and its
        # filters.
        """
        INSERT INTO reconciliation_inboundevent (
            id, event_id, type, order_id, order_version, occurred_at, body, received_at,
            deliveries, last_received_at, processing, attempts, last_error, processed_at,
            next_attempt_at, outcome, account_reference, account_id, account_team_id, on_case
        )
        SELECT c.id, 'evt-' || md5('inbound-' || c.id), 'order.updated', c.order_id, 2,
               c.updated_at, '{}'::jsonb, c.updated_at, 1, c.updated_at,
               CASE WHEN c.id % 50 = 0 THEN 'failed' ELSE 'processed' END, 1,
               CASE WHEN c.id % 50 = 0 THEN 'The order system did not answer' ELSE '' END,
               CASE WHEN c.id % 50 <> 0 THEN c.updated_at END,
               CASE WHEN c.id % 50 = 0 THEN now() + interval '5 minutes' END, '', a.reference,
               a.id, a.team_id, TRUE
        FROM cases_case c JOIN cases_customeraccount a ON a.id = c.account_id
        """,
        f"""
        INSERT INTO cases_counterrow (name, value) VALUES ('case_number', {size})
        ON CONFLICT (name) DO UPDATE SET value = excluded.value
        """,
        # The approvals' references (AP-<id>) taken: the next approval's number comes after
        # them (the load's approvers approve through the product's counter).
        """
        INSERT INTO cases_counterrow (name, value)
        SELECT 'approval_number', coalesce(max(id), 0) FROM approvals_approval
        ON CONFLICT (name) DO UPDATE SET value = excluded.value
        """,
        *(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
            f"(SELECT coalesce(max(id), 0) + 1 FROM {table}), false)"
            for table in _SEEDED_TABLES
        ),
    ]


_SEEDED_TABLES = (
    "auth_user",
    "auth_user_groups",
    "cases_team",
    "cases_team_members",
    "cases_staffprofile",
    "cases_customeraccount",
    "cases_case",
    "cases_caseevent",
    "approvals_operation",
    "approvals_proposal",
    "approvals_approval",
    "approvals_proposalauthor",
    "cases_evidencereference",
    "reconciliation_inboundevent",
)
# Secondary indexes of these are dropped before the load and built again after it (a bulk
# build is many times faster than a million inserts into each b-tree and trigram index).
_REBUILT_TABLES = (
    "cases_case",
    "cases_caseevent",
    "approvals_operation",
    "approvals_proposal",
    "approvals_approval",
    "approvals_proposalauthor",
    "reconciliation_inboundevent",
)


def seed(
    cursor: Any, size: int, *, rebuild_indexes: bool = False, history: int = HISTORY_CASES
) -> None:
    """Seed ``size`` cases (and their teams, staff, accounts, events, proposals, approvals and
    held cases' evidence) through ``cursor`` into tables that hold none, then ANALYZE.

    ``rebuild_indexes`` (the benchmark's own databases only: it needs the tables to itself)
    drops the tables' secondary indexes for the load and builds them again from their own
    definitions, and skips the per-row triggers (foreign keys; the rows are valid by
    construction). ``history``: as :func:`seed_sql`'s."""
    cursor.execute("SELECT count(*) FROM cases_case")
    if cursor.fetchone()[0]:
        raise RuntimeError("seed: cases_case already holds rows")
    indexes: list[str] = []
    if rebuild_indexes:
        cursor.execute("SET maintenance_work_mem = '512MB'")
        cursor.execute("SET synchronous_commit = off")
        cursor.execute("SET session_replication_role = replica")
        cursor.execute(
            """
            SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
            FROM pg_index i
            WHERE i.indrelid::regclass::text = ANY(%s)
              AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
            """,
            [list(_REBUILT_TABLES)],
        )
        found = cursor.fetchall()
        for name, definition in found:
            cursor.execute(f"DROP INDEX {name}")
            indexes.append(definition)
    for statement in seed_sql(size, prefix=settings.CASE_REFERENCE_PREFIX, history=history):
        cursor.execute(statement)
    for definition in indexes:
        cursor.execute(definition)
    if rebuild_indexes:  # (a failed seed rolls these SETs back with its transaction)
        cursor.execute("SET session_replication_role = DEFAULT")
    cursor.execute("ANALYZE")


# --- the pages ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    name: str
    path: str
    params: dict[str, str] = field(default_factory=dict)


def pages() -> list[Page]:
    """Every list page with each filter and search, as ``bench_lead`` sees them."""
    prefix = settings.CASE_REFERENCE_PREFIX
    changelist = "/admin/cases/case/"
    owner = str(FILTER_USER_ID)
    # Case 10000 is the bench team's (i % 4 == 0) and exists at every size measured.
    case, account = f"{prefix}-10000", "ACC-0000001"
    inbound = "/admin/reconciliation/inboundevent/"
    # As the admin's date filter writes its "Past 7 days" link: local midnights, with offset.
    today = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    week_ago, tomorrow = today - dt.timedelta(days=7), today + dt.timedelta(days=1)
    return [
        Page("admin changelist", changelist),
        Page("admin changelist page 5", changelist, {"p": "5"}),
        Page("admin changelist status", changelist, {"status__exact": "ready"}),
        Page("admin changelist waiting on", changelist, {"waiting_on__exact": "approvers"}),
        Page("admin changelist owner", changelist, {"owner": owner}),
        Page("admin changelist responsible now", changelist, {"responsible": owner}),
        Page("admin changelist overdue", changelist, {"overdue": "yes"}),
        Page("admin changelist not overdue", changelist, {"overdue": "no"}),
        Page("admin changelist team", changelist, {"team": str(BENCH_TEAM_ID)}),
        Page("admin changelist search case reference", changelist, {"q": case}),
        Page("admin changelist search order id", changelist, {"q": "ORD-1005000"}),
        Page("admin changelist search account reference", changelist, {"q": account}),
        # Three words, none selective alone -- every account's name has "Customer", many order
        # ids "ORD-100" -- each of which must match one of the fields (``cases.search``).
        Page("admin changelist search three words", changelist, {"q": "Customer 1000 ORD-100"}),
        # A word of the cases' texts: the full-text search (``cases.fulltext``) finds it in
        # about a hundred events' reasons at every size, beside the references' search.
        Page("admin changelist search full text", changelist, {"q": "customer"}),
        Page("admin held queue", "/admin/cases/heldcase/"),
        Page("admin held queue search order id", "/admin/cases/heldcase/", {"q": "ORD-1005000"}),
        Page("admin needs-attention queue", "/admin/cases/attentioncase/"),
        Page(
            "admin needs-attention queue search order id",
            "/admin/cases/attentioncase/",
            {"q": "ORD-1005000"},
        ),
        Page("admin approver queue", "/admin/approvals/proposal/", {"status": "awaiting_review"}),
        Page(
            "admin approver queue search order id",
            "/admin/approvals/proposal/",
            {"status": "awaiting_review", "q": "ORD-1005000"},
        ),
        Page("admin events", "/admin/cases/caseevent/"),
        Page(
            "admin events action filter",
            "/admin/cases/caseevent/",
            {"action__exact": "cases.case.transitioned"},
        ),
        Page("admin events search case reference", "/admin/cases/caseevent/", {"q": case}),
        # About a hundred events at every size carry this word in their reason ("Asked the
        # customer for a date"); none has this actor.
        Page("admin events search reason", "/admin/cases/caseevent/", {"q": "customer"}),
        Page("admin events search actor", "/admin/cases/caseevent/", {"q": "bench_lead"}),
        Page("admin accounts", "/admin/cases/customeraccount/"),
        Page("admin accounts search reference", "/admin/cases/customeraccount/", {"q": account}),
        Page("admin accounts search name", "/admin/cases/customeraccount/", {"q": "Customer 1000"}),
        Page("admin inbound events", inbound),
        Page("admin inbound events failed", inbound, {"processing__exact": "failed"}),
        Page("admin inbound events type", inbound, {"type": "order.updated"}),
        Page("admin inbound events search order id", inbound, {"q": "ORD-1005000"}),
        Page(
            "admin inbound events received past 7 days",
            inbound,
            {"received_at__gte": f"{week_ago}", "received_at__lt": f"{tomorrow}"},
        ),
        Page("API case list", "/api/cases/"),
        Page("API case list status", "/api/cases/", {"status": "ready"}),
        Page("API case list overdue", "/api/cases/", {"overdue": "true"}),
        Page("API case list search three words", "/api/cases/", {"q": "Customer 1000 ORD-100"}),
        Page("API approver queue", "/api/proposals/", {"status": "awaiting_review"}),
    ]


# --- databases ----------------------------------------------------------------------------------


def _with_page_timeout(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with each statement cut at PAGE_TIMEOUT_S, beside the server settings the
    product's connections ask for (``config.settings``: how a page's statements are planned, no
    JIT), which the pages are measured with: the timeout replaced them, and the pages were
    measured as no served request runs."""
    asked = options.get("options", "")
    timeout = f"-c statement_timeout={PAGE_TIMEOUT_S * 1000}"
    return {**options, "options": f"{asked} {timeout}".strip()}


@contextmanager
def _database(name: str) -> Iterator[None]:
    """The default connection on database ``name`` inside the block, then back."""
    original = connection.settings_dict["NAME"]
    options = connection.settings_dict["OPTIONS"]
    connection.close()
    connection.settings_dict["NAME"] = name
    # A page that reads every case at 1M would hold the bench for minutes per request: each
    # statement of the measured pages is cut at PAGE_TIMEOUT_S, and the page counts as missed.
    connection.settings_dict["OPTIONS"] = _with_page_timeout(options)
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict["NAME"] = original
        connection.settings_dict["OPTIONS"] = options


def _exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        return cursor.fetchone() is not None


def _seeded_size(name: str) -> int | None:
    """The size of the seed this module's version put in ``name``, or None."""
    with _database(name), connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('bench_list_seed')")
        if cursor.fetchone()[0] is None:
            return None
        cursor.execute("SELECT version, cases FROM bench_list_seed")
        row = cursor.fetchone()
        if row is None or row[0] != SEED_VERSION:
            return None
        cursor.execute("SELECT count(*) FROM cases_case")
        return int(row[1]) if cursor.fetchone()[0] == row[1] else None


def prepare_database(name: str, size: int, progress: Callable[[str], None]) -> float | None:
    """Make ``name`` a migrated database seeded with ``size`` cases; the seconds the seed took,
    or None when the database already held this seed (it is migrated either way)."""
    if _exists(name) and _seeded_size(name) == size:
        with _database(name):
            call_command("migrate", verbosity=0, interactive=False)
        return None
    with connection.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
        cursor.execute(f'CREATE DATABASE "{name}"')
    with _database(name):
        call_command("migrate", verbosity=0, interactive=False)
        progress(f"seeding {_label(size)} cases into {name}")
        started = time.perf_counter()
        with transaction.atomic(), connection.cursor() as cursor:
            seed(cursor, size, rebuild_indexes=True)
            cursor.execute(
                "CREATE TABLE bench_list_seed (version integer, cases bigint, "
                "seeded_at timestamptz DEFAULT now())"
            )
            cursor.execute("INSERT INTO bench_list_seed VALUES (%s, %s)", [SEED_VERSION, size])
        with connection.cursor() as cursor:  # (not in a transaction: VACUUM refuses one)
            cursor.execute("VACUUM (ANALYZE)")
        return time.perf_counter() - started


# --- measuring ----------------------------------------------------------------------------------


@dataclass
class _Samples:
    ms: list[float] = field(default_factory=list)
    queries: set[int] = field(default_factory=set)
    failed: str = ""

    def summary(self) -> str:
        return f"{statistics.median(self.ms):.0f} ms [{min(self.ms):.0f}–{max(self.ms):.0f}]"


def _client() -> Client:
    """A test client logged in as ``bench_lead`` (its session lives in the current database)."""
    from django.contrib.auth import get_user_model

    client = Client(HTTP_HOST="localhost")
    client.force_login(get_user_model().objects.get(username=BENCH_USERNAME))
    return client


class _Side:
    """One size's side of the comparison: a thread of its own, whose Django connection (one per
    thread) stays open on database ``name`` for every request it is given, and its logged-in
    client. Only this side's thread uses them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"bench-{name}")
        self.client: Client = self.run(self._attach)

    def _attach(self) -> Client:
        # This thread's connection, on its own copy of the settings (the wrappers of every
        # thread share the configured dict): its database, each statement of the measured
        # pages cut at PAGE_TIMEOUT_S (a page reading every case at 1M would hold the bench
        # for minutes per request; it counts as missed).
        settings_dict = connection.settings_dict
        connection.close()
        connection.settings_dict = {
            **settings_dict,
            "NAME": self.name,
            "OPTIONS": _with_page_timeout(settings_dict["OPTIONS"]),
        }
        return _client()

    def run(self, work: Callable[..., Any], *args: Any) -> Any:
        """``work(*args)`` on this side's thread and connection; its result (or its error)."""
        return self._thread.submit(work, *args).result()

    def close(self) -> None:
        self.run(lambda: connection.close())  # this side's connection, read on its thread
        self._thread.shutdown()


def in_turn(sizes: tuple[int, ...], repeat: int) -> Iterator[int]:
    """The sizes of ``repeat`` rounds of one request at each size: in order, then reversed,
    and so on (neither size always first after the other's request)."""
    for number in range(repeat):
        yield from (sizes if number % 2 == 0 else reversed(sizes))


def _measure_in_turn(
    sides: dict[int, _Side], page: Page, entries: dict[int, _Samples], repeat: int
) -> None:
    """One round of ``page``: a warm-up request at each size, then ``repeat`` timed ones at each
    size, alternated (:func:`in_turn`)."""
    sizes = tuple(sides)
    for size in sizes:
        _measure(sides[size], page, entries[size], warm=True)
    for size in in_turn(sizes, repeat):
        _measure(sides[size], page, entries[size])


def _measure(side: _Side, page: Page, entry: _Samples, *, warm: bool = False) -> None:
    if entry.failed:
        return  # timed out once: not asked again
    try:
        if warm:  # this connection, caches, the session
            side.run(side.client.get, page.path, page.params)
        else:
            side.run(lambda: _requests(side.client, page, entry, 1, warm=False))
    except DatabaseError as exc:  # the statement timeout
        entry.failed = f"{type(exc).__name__} after {PAGE_TIMEOUT_S} s"
        entry.ms.append(PAGE_TIMEOUT_S * 1000.0)


def _requests(client: Client, page: Page, entry: _Samples, repeat: int, warm: bool = True) -> None:
    """``repeat`` timed requests of ``page`` (after a warm-up one, if ``warm``), each started
    right after a collection it does not time; on the calling thread's connection."""
    if warm:
        client.get(page.path, page.params)  # this connection, caches, the session
    for _ in range(repeat):
        gc.collect()  # (untimed: the earlier requests' garbage, not this page's)
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = client.get(page.path, page.params)
            elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            raise RuntimeError(f"{page.name}: HTTP {response.status_code}")
        entry.ms.append(elapsed)
        entry.queries.add(len(captured.captured_queries))


def database_name_for(size: int) -> str:
    """The list pages' database of ``size`` cases, named after this bench database."""
    return f"{connection.settings_dict['NAME']}_lists_{_label(size).lower()}"


def measure_list_pages(
    *,
    rounds: int = 3,
    sizes: tuple[int, ...] = (10_000, 1_000_000),
    progress: Callable[[str], None] = print,
    repeat: int = 4,
) -> tuple[list[str], bool, str]:
    """Each list page's time at the largest size over its time at the smallest: printable
    lines (one per page, ending in the ratio as ``N×``), whether every page met the goal
    (ratio ≤ :data:`GOAL_RATIO`, p95 ≤ :data:`GOAL_P95_MS`, the same query count at every
    size), and the worst page's ratio and p95."""
    if connection.vendor != "postgresql":
        raise RuntimeError("measure_list_pages runs on PostgreSQL only")
    base = connection.settings_dict["NAME"]
    if not base.startswith("bench"):
        raise RuntimeError(f"measure_list_pages needs a bench* database, not {base!r}")
    small, large = min(sizes), max(sizes)
    names = {size: database_name_for(size) for size in sizes}
    lines: list[str] = []
    for size in sizes:
        took = prepare_database(names[size], size, progress)
        lines.append(
            f"list pages seed {_label(size)} ({names[size]}): "
            + (f"seeded in {took:.1f} s" if took is not None else "reused")
        )
    listed = pages()
    samples: dict[tuple[str, int], _Samples] = {}
    api: dict[str, Any] = settings.REST_FRAMEWORK
    # The API's rate limits would refuse a benchmark's hundreds of requests a minute.
    unthrottled = {**api, "DEFAULT_THROTTLE_RATES": dict.fromkeys(api["DEFAULT_THROTTLE_RATES"])}
    axes = logging.getLogger("axes")
    axes_level = axes.level
    axes.setLevel(logging.WARNING)  # not a login line per round
    with override_settings(REST_FRAMEWORK=unthrottled, DEBUG=False):
        sides = {size: _Side(names[size]) for size in sizes}
        gc.collect()
        gc.freeze()  # what the earlier phases left is not collected during the pages
        try:
            # Interleaved: each round takes every page at every size in turn, request by
            # request, so a slow moment of the shared machine falls on both sides of a ratio.
            for number in range(rounds):
                progress(f"list pages round {number + 1}/{rounds}")
                for page in listed:
                    entries = {
                        size: samples.setdefault((page.name, size), _Samples()) for size in sizes
                    }
                    _measure_in_turn(sides, page, entries, repeat)
        finally:
            gc.unfreeze()
            for side in sides.values():
                side.close()
    axes.setLevel(axes_level)
    ok = True
    worst_ratio, worst_p95 = (0.0, ""), (0.0, "")
    for page in listed:
        big, few = samples[(page.name, large)], samples[(page.name, small)]
        ratio = statistics.median(big.ms) / statistics.median(few.ms)
        p95 = _p95(big.ms)
        worst_ratio = max(worst_ratio, (ratio, page.name))
        worst_p95 = max(worst_p95, (p95, page.name))
        counts = sorted(big.queries | few.queries)
        flat_queries = len(counts) == 1
        queries = (
            f"{counts[0]} queries both"
            if flat_queries
            else f"{'/'.join(map(str, sorted(big.queries)))} vs "
            f"{'/'.join(map(str, sorted(few.queries)))} queries"
        )
        failed = big.failed or few.failed
        met = ratio <= GOAL_RATIO and p95 <= GOAL_P95_MS and flat_queries and not failed
        ok = ok and met
        lines.append(
            f"{page.name} {_label(large)}/{_label(small)}: {big.summary()} vs {few.summary()}, "
            f"p95 {p95:.0f} ms, {queries}{f' ({failed})' if failed else ''}"
            f"{'' if met else ' (goal missed)'} … {ratio:.2f}×"
        )
    worst = (
        f"{_label(large)} vs {_label(small)}, {len(listed)} pages; worst ratio "
        f"{worst_ratio[0]:.2f}× ({worst_ratio[1]}), worst p95 {worst_p95[0]:.0f} ms "
        f"({worst_p95[1]})"
        + ("" if large >= 1_000_000 else f"; NOTE the largest size was {_label(large)}, not 1M")
    )
    return lines, ok, worst


def _p95(values: list[float]) -> float:
    """The nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(0, -(-95 * len(ordered) // 100) - 1)]
