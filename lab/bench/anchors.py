"""The machine's ceilings the bench compares Holdfast with, measured with nothing of Holdfast's:

- pgbench: ``pgbench -i -s 1`` once, then ``pgbench -N -T <s>`` with 1 and 4 clients;
- raw SQL ``FOR UPDATE SKIP LOCKED``: claims of N ready rows of a scratch table, one
  transaction per claim, 1 and 4 client threads (psycopg, no Django); with 1 thread also
  committed as Holdfast's claim commits, without waiting for the disk (``synchronous_commit``
  off): the goal's anchor waits, and this one shows what the same commit buys the raw claim;
- django-q2: N no-op tasks (``lab.bench.tasks.noop``) through the ORM broker, run by a real
  ``qcluster`` (``lab.bench.cluster``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import threading
import time

import psycopg
from django.conf import settings

from lab.bench.cluster import NOOP, enqueue_many, qcluster, wait_acked, warm
from lab.bench.context import Run
from lab.bench.cpu import CpuSplit
from lab.bench.postgres import conninfo, recreate_database
from lab.bench.seeding import quiet
from lab.bench.series import Skip

PGBENCH_CANDIDATES = ("/usr/lib/postgresql/15/bin/pgbench", "pgbench")
_TPS = re.compile(r"^tps = ([0-9.]+)", re.MULTILINE)
RAW_TABLE = "bench_raw_claim"


# --- pgbench ------------------------------------------------------------------------------


def pgbench_binary() -> str | None:
    for candidate in PGBENCH_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def pgbench_env() -> dict[str, str]:
    db = settings.DATABASES["default"]
    env = {
        **os.environ,
        "PGHOST": str(db.get("HOST") or "127.0.0.1"),
        "PGPORT": str(db.get("PORT") or 5432),
        "PGUSER": str(db.get("USER") or "postgres"),
    }
    if db.get("PASSWORD"):
        env["PGPASSWORD"] = str(db["PASSWORD"])
    return env


def pgbench_init(run: Run, binary: str) -> None:
    try:
        recreate_database(run.pgbench_db)
    except psycopg.Error as exc:
        raise Skip(f"cannot create {run.pgbench_db}: {exc}") from exc
    result = subprocess.run(  # noqa: S603 - the pgbench binary found above
        [binary, "-i", "-s", "1", "-q", run.pgbench_db],
        env=pgbench_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise Skip(f"pgbench -i failed: {result.stderr.strip()[-300:]}")


def pgbench(run: Run, binary: str, clients: int, seconds: int) -> float:
    result = subprocess.run(  # noqa: S603 - the pgbench binary found above
        [binary, "-N", "-c", str(clients), "-j", str(clients), "-T", str(seconds), run.pgbench_db],
        env=pgbench_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    match = _TPS.search(result.stdout)
    if result.returncode != 0 or match is None:
        raise Skip(f"pgbench -c {clients} failed: {(result.stderr or result.stdout)[-300:]}")
    return float(match.group(1))


# --- raw SQL SKIP LOCKED ------------------------------------------------------------------


def _raw_table(rows: int) -> None:
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {RAW_TABLE}")
        conn.execute(
            f"CREATE TABLE {RAW_TABLE} (id bigserial PRIMARY KEY, state text NOT NULL, "
            "claimed_by text, claimed_at timestamptz)"
        )
        conn.execute(f"CREATE INDEX {RAW_TABLE}_ready ON {RAW_TABLE} (id) WHERE state = 'ready'")
        conn.execute(
            f"INSERT INTO {RAW_TABLE} (state) SELECT 'ready' FROM generate_series(1, %s)",  # noqa: S608
            (rows,),
        )
        conn.execute(f"ANALYZE {RAW_TABLE}")


def _claim_until_empty(conn: psycopg.Connection, index: int) -> int:
    """Claim the next ready row, one transaction per claim, until none is left; the count."""
    claimed = 0
    while True:
        with conn.transaction():
            row = conn.execute(
                f"SELECT id FROM {RAW_TABLE} WHERE state = 'ready' ORDER BY id "  # noqa: S608
                "LIMIT 1 FOR UPDATE SKIP LOCKED"
            ).fetchone()
            if row is None:
                return claimed
            conn.execute(
                f"UPDATE {RAW_TABLE} SET state = 'claimed', claimed_by = %s, "  # noqa: S608
                "claimed_at = now() WHERE id = %s",
                (f"t{index}", row[0]),
            )
        claimed += 1


def raw_claims(rows: int, threads: int, *, asynchronous: bool = False) -> float:
    """Claims per second of ``rows`` ready rows by ``threads`` threads; ``asynchronous``: each
    claim's commit does not wait for the disk (as Holdfast's claim's own commit)."""
    _raw_table(rows)
    claimed = [0] * threads
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads + 1)

    def claimer(index: int) -> None:
        try:
            with psycopg.connect(conninfo(), autocommit=True) as conn:
                if asynchronous:
                    conn.execute("SET synchronous_commit = off")
                barrier.wait()
                claimed[index] = _claim_until_empty(conn, index)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.abort()

    workers = [threading.Thread(target=claimer, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise Skip(f"raw claims failed: {errors[0]!r}")
    if sum(claimed) != rows:
        raise Skip(f"raw claims: {sum(claimed)} of {rows} rows claimed")
    return rows / elapsed


# --- django-q2 no-op ----------------------------------------------------------------------


def noop_tasks(run: Run, count: int, number: int) -> float:
    """django-q2 no-op tasks by a fresh cluster: their rate; their CPU per task goes to the
    ``cpu noop`` series."""
    rate, cpu = _noop_run(run, count, f"noop-{number}")
    if cpu is not None:
        run.series["cpu noop"].add(cpu)
    return rate


def noop_cpu(run: Run, count: int, number: int) -> float | None:
    """The no-op tasks' CPU per task, read again before the round's end-to-end run: with the
    reading after it, the end-to-end run's CPU is compared with a no-op read on both sides
    of it, not only a minute later (this machine's speed moved 70% within one run)."""
    return _noop_run(run, count, f"noop-before-{number}")[1]


def _noop_run(run: Run, count: int, name: str) -> tuple[float, float | None]:
    """``count`` no-op tasks by a fresh cluster: their rate, and the CPU per task of its
    cluster and PostgreSQL backends (None when /proc cannot be read)."""
    quiet()
    cpu_ms = None
    with qcluster(run.log_dir, name) as process:
        warm(process)
        cpu = CpuSplit.start(sessions={"workers": process.pid}, databases={"pg": run.db_name})
        start = time.perf_counter()
        rows = enqueue_many(NOOP, [() for _ in range(count)])
        wait_acked(rows, 120, process)
        elapsed = time.perf_counter() - start
        if cpu is not None:
            # The cluster's side only: the enqueue is the bench's.
            cpu_ms = sum(cpu.per_apply_ms(count).values())
    return count / elapsed, cpu_ms
