"""The bench's view of PostgreSQL: how to reach a database, scratch databases, and the
server's counters it reads (committed transactions, transaction ids, rows written, backends).

Other backends flush their statistics at most once a second while busy, when they exit, and at
most ``STATS_IDLE_FLUSH`` after going idle: a reading right after someone else's work may miss
its last statements.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import psycopg
from django.conf import settings
from django.db import connection

# An idle backend flushes its statistics at most this long after its last transaction
# (PostgreSQL 15's PGSTAT_IDLE_INTERVAL, 10 s, plus a margin).
STATS_IDLE_FLUSH = 10.5


@contextmanager
def planned_as_a_worker() -> Iterator[None]:
    """This process's connection plans its prepared statements as a worker's does (``auto``,
    or ``DB_PLAN_CACHE_MODE``: ``config.settings``) while the bench measures a worker's path
    in this process (the claims); a process that is no worker plans every run afresh."""
    mode = os.environ.get("DB_PLAN_CACHE_MODE", "auto").strip()
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('plan_cache_mode', %s, false)", [mode])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET plan_cache_mode")


def database_name() -> str:
    return str(settings.DATABASES["default"]["NAME"])


def conninfo(dbname: str | None = None) -> str:
    db = settings.DATABASES["default"]
    parts = {
        "host": db.get("HOST") or "127.0.0.1",
        "port": str(db.get("PORT") or 5432),
        "user": db.get("USER") or "postgres",
        "dbname": dbname or db["NAME"],
    }
    if db.get("PASSWORD"):
        parts["password"] = db["PASSWORD"]
    return " ".join(f"{key}={value}" for key, value in parts.items())


def database_url(dbname: str) -> str:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        db = settings.DATABASES["default"]
        password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
        url = (
            f"postgres://{db.get('USER') or 'postgres'}{password}@{db.get('HOST') or '127.0.0.1'}"
            f":{db.get('PORT') or 5432}/{db['NAME']}"
        )
    return urlunsplit(urlsplit(url)._replace(path=f"/{dbname}", query=""))


def recreate_database(name: str) -> None:
    with psycopg.connect(conninfo("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(name: str) -> None:
    with psycopg.connect(conninfo("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def xact_commits() -> dict[str, int]:
    """Committed transactions per database so far, this backend's own ones flushed first."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT datname, xact_commit FROM pg_stat_database WHERE datname <> ''")
        rows = cursor.fetchall()
    return {str(name): int(commits) for name, commits in rows}


def xact_commit() -> int:
    """Committed transactions of this database so far (see ``xact_commits``)."""
    return xact_commits().get(database_name(), 0)


def settled_xact_commit() -> int:
    """:func:`xact_commit` once the setup just before is counted: a backend's statistics of
    its last statements (the seeding's, its ANALYZE's) reach the view one read late. Read once,
    a window of 150 claims counted 151 commits, every time; read twice first, 150."""
    xact_commit()
    return xact_commit()


def xid() -> int:
    """The server's transaction id counter; the probe itself takes one id (it asks for it)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_xact_id()::text::bigint")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def rows_written() -> dict[str, int]:
    """Rows inserted, updated and deleted per database so far (statistics as flushed)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT datname, tup_inserted + tup_updated + tup_deleted FROM pg_stat_database "
            "WHERE datname <> ''"
        )
        rows = cursor.fetchall()
    return {str(name): int(written) for name, written in rows}


@dataclass(frozen=True)
class Counters:
    """One reading: when, commits and rows written per database, the transaction id counter."""

    at: float
    commits: dict[str, int]
    xid: int
    rows: dict[str, int]


def counters() -> Counters:
    ids = xid()
    commits = xact_commits()  # (its snapshot is kept until the next clear: rows match it)
    return Counters(time.perf_counter(), commits, ids, rows_written())


@dataclass(frozen=True)
class Overhead:
    """What one ``counters`` (or ``xact_commit``) reading adds to what it reads."""

    commits: int
    xids: int
    xact_commit_reading: int


def reading_overhead() -> Overhead:
    name = database_name()
    first = counters()
    second = counters()
    a = xact_commit()
    b = xact_commit()
    return Overhead(
        commits=second.commits.get(name, 0) - first.commits.get(name, 0),
        xids=second.xid - first.xid,
        xact_commit_reading=b - a,
    )


def backend_pids(dbname: str | None = None) -> set[int]:
    """The client backends connected to a database (default: this one), not this one."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = coalesce(%s, current_database()) "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
            [dbname],
        )
        return {int(row[0]) for row in cursor.fetchall()}


def backends(dbname: str | None = None) -> int:
    """How many client backends are connected to a database (default: this one), not this one."""
    return len(backend_pids(dbname))


def backends_gone(timeout: float = 10) -> None:
    """Wait until no other backend is connected to this database (a killed cluster's backends
    exit, flushing their statistics, once they see the connection closed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and backends():
        time.sleep(0.05)
