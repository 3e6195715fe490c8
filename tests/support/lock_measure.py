"""Measure what the migration lock rule claims, on a scratch PostgreSQL database.

``python -m tests.support.lock_measure [ROWS]`` (default 1,000,000) creates a database
``holdfast_lockmeasure_<pid>`` on the server of ``TEST_DATABASE_URL`` (default the local one),
builds a table of ROWS rows, and times, while each DDL runs in one session, an INSERT from
another session: a plain ``CREATE INDEX`` blocks it for the build, ``CREATE INDEX
CONCURRENTLY`` does not. It also times ``ADD COLUMN`` with a constant and a volatile default,
``ADD CONSTRAINT CHECK`` with and without ``NOT VALID`` and ``SET NOT NULL``. The database is
dropped at the end. ``tests/test_migrations.py`` runs ``measure`` with fewer rows.

``writers_blocked`` measures a running migration from outside: how long, at most, a writer
could not take the lock an INSERT or UPDATE needs on a table (``tests/cases/test_audit_chain.py``
runs ``cases`` 0010's backfill under it).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from urllib.parse import urlsplit, urlunsplit

import psycopg

DEFAULT = "postgres://postgres@127.0.0.1:5432/holdfast"


def server_url(database: str, server: str | None = None) -> str:
    parts = urlsplit(server or os.environ.get("TEST_DATABASE_URL") or DEFAULT)
    scheme = "postgresql" if parts.scheme in ("postgres", "pgsql") else parts.scheme
    return urlunsplit((scheme, parts.netloc, f"/{database}", "", ""))


def blocked_insert(url: str, ddl: str, *, autocommit: bool) -> dict[str, float]:
    """Run ``ddl`` in one session; 50 ms later INSERT from another; time both."""
    started = threading.Event()
    out: dict[str, float] = {}

    def run_ddl():
        with psycopg.connect(url, autocommit=autocommit) as conn:
            began = time.monotonic()
            started.set()
            conn.execute(ddl)
            if not autocommit:
                conn.commit()
            out["ddl"] = time.monotonic() - began

    thread = threading.Thread(target=run_ddl)
    thread.start()
    started.wait()
    time.sleep(0.05)
    with psycopg.connect(url, autocommit=True) as conn:
        began = time.monotonic()
        conn.execute("INSERT INTO big (case_id, note) VALUES (1, 'during ddl')")
        out["insert"] = time.monotonic() - began
    thread.join()
    return out


def writers_blocked(url: str, table: str, running, *, every: float = 0.01) -> dict[str, float]:
    """While ``running()`` is true, try every ``every`` seconds to take ``table``'s ROW
    EXCLUSIVE lock (what INSERT, UPDATE and DELETE take) without waiting; the longest
    stretch in which every try was refused, the time refused in all and the time watched."""
    import psycopg

    longest = refused_total = 0.0
    since: float | None = None
    began = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        while running():
            now = time.monotonic()
            try:
                with conn.transaction():
                    conn.execute(f'LOCK TABLE "{table}" IN ROW EXCLUSIVE MODE NOWAIT')
            except psycopg.errors.LockNotAvailable:
                since = now if since is None else since
            except psycopg.errors.UndefinedTable:
                pass
            else:
                if since is not None:
                    longest = max(longest, now - since)
                    refused_total += now - since
                    since = None
            time.sleep(every)
        if since is not None:
            longest = max(longest, time.monotonic() - since)
            refused_total += time.monotonic() - since
    return {
        "longest_refused": longest,
        "refused": refused_total,
        "watched": time.monotonic() - began,
    }


def timed(url: str, sql: str) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        began = time.monotonic()
        conn.execute(sql)
        return time.monotonic() - began


def measure(rows: int, *, server: str | None = None, extras: bool = True) -> dict[str, object]:
    name = f"holdfast_lockmeasure_{os.getpid()}"
    admin = server_url("postgres", server)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = server_url(name, server)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE big (id bigserial PRIMARY KEY, case_id int, note text)")
            began = time.monotonic()
            conn.execute(
                "INSERT INTO big (case_id, note) SELECT g %% 5000, md5(g::text) "
                "FROM generate_series(1, %s) g",
                [rows],
            )
            conn.execute("ANALYZE big")
            fill = time.monotonic() - began
        result: dict[str, object] = {"rows": rows, "fill_seconds": round(fill, 2)}
        result["create_index"] = blocked_insert(
            url, "CREATE INDEX big_note_plain ON big (note)", autocommit=False
        )
        result["create_index_concurrently"] = blocked_insert(
            url, "CREATE INDEX CONCURRENTLY big_note_conc ON big (note)", autocommit=True
        )
        if not extras:
            return result
        result["add_column_constant_default"] = timed(
            url, "ALTER TABLE big ADD COLUMN retry_count int NOT NULL DEFAULT 0"
        )
        result["add_column_volatile_default"] = timed(
            url, "ALTER TABLE big ADD COLUMN seen_at timestamptz NOT NULL DEFAULT clock_timestamp()"
        )
        result["add_check"] = timed(
            url, "ALTER TABLE big ADD CONSTRAINT big_case_pos CHECK (case_id >= 0)"
        )
        result["add_check_not_valid"] = timed(
            url, "ALTER TABLE big ADD CONSTRAINT big_case_pos2 CHECK (case_id >= 0) NOT VALID"
        )
        result["set_not_null"] = timed(url, "ALTER TABLE big ALTER COLUMN note SET NOT NULL")
        return result
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main(argv: list[str]) -> int:
    rows = int(argv[0]) if argv else 1_000_000
    result = measure(rows)
    for key, value in result.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v:.3f} s" for k, v in value.items())
        elif isinstance(value, float):
            value = f"{value:.3f} s"
        print(f"{key:30} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
