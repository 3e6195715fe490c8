"""Measure Holdfast's hot paths against the ceilings of the machine (``make bench``).

    make bench                                   # BENCH_DATABASE_URL, default bench_holdfast
    make bench BENCH_ARGS="--rounds 5 --apply-cases 60 --skip-lists"

Measurement only: nothing here changes how Holdfast works. On PostgreSQL only (the numbers are
meant for PostgreSQL; SQLite is refused), on a database whose name starts with ``bench``: it
writes real rows there (cases, attempts, django-q2 tasks) and leaves the claimed cases
neutralised (no lease running out, no due time) so later rounds and later runs are not
disturbed. Its scratch databases are named after that database (``<name>_pgbench``,
``<name>_orders``), so runs on two bench databases never collide.

Each round runs every measurement once, in turn (interleaved rounds: a slow moment of the shared
machine spreads over all of them); each line prints the median of the rounds with [min–max], and
each comparison ends with the ratio of the medians.

- pgbench's ceiling: ``pgbench -i -s 1`` once, then ``pgbench -N -T <s>`` with 1 and 4 clients.
- raw SQL ``FOR UPDATE SKIP LOCKED``: claims of N ready rows of a scratch table, one transaction
  per claim, 1 and 4 client threads (psycopg, no Django).
- Holdfast's claims, sequentially on N ready cases: ``case_claim`` by id, and (when it exists)
  ``claim_next_due``, the claim a worker makes of the next due case. Queries per claim
  (``CaptureQueriesContext``) and commits per claim (``pg_stat_database.xact_commit``, minus the
  reading's own). Every seeding is followed by ``VACUUM (ANALYZE)`` of the tables it wrote, what
  a served database's autovacuum does (it is off on this machine's PostgreSQL): without
  statistics the claim's approval lookup is planned as a walk over every live approval, which
  grows by the cases of every round (the claim rate then fell round after round: 84 → 30 → 18
  claims/s); without the vacuum the claims and every update between rounds leave dead row
  versions in the cases' indexes that each next-due pick steps over (227 → 206 → 176 next-due
  claims/s over three rounds).
- django-q2: N no-op tasks (``lab.bench.tasks.noop``) through the ORM broker, run by a
  real ``qcluster`` subprocess with ``Q_WORKERS=2`` (plus the sweeper's worker), in every round.
- End-to-end safe apply: N approved cases applied by a real ``qcluster`` of the same
  configuration against the reference order system (``python -m orders serve``) on its own
  database, run as deployed (fault injection off); every order checked to have changed exactly
  once by the order system's own records.
  Enqueued as two ``reconciliation.tasks.apply_due`` (one per worker) when that task exists,
  else one ``apply_case`` per case. Before the work, the warmed cluster's idle rate (broker
  polling, sweeper) is measured over a window and subtracted; the raw figure is printed too.
  Write transactions come from the server-wide transaction id counter (only writing
  transactions get one); the order system's from its own database's ``xact_commit``.
- Bare writes: as many fresh approved cases' writes sent by two
  ``lab.bench.tasks.bare_writes`` tasks (one per worker) of the same cluster, with
  nothing of Holdfast's around them (no claim, no record): the end-to-end rate's ceiling on the
  machine, printed beside the end-to-end goal.
- List pages (``lab.bench.lists``) and several worker hosts
  (``lab.bench.multihost``) when those modules are present.

The report ends with the issue's three goals, each met or NOT met with its figure.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import importlib.util
import inspect
import json
import logging
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

ROOT = Path(settings.BASE_DIR)
NOOP = "lab.bench.tasks.noop"
BARE = "lab.bench.tasks.bare_writes"
APPLY = "reconciliation.tasks.apply_case"
APPLY_DUE = "reconciliation.tasks.apply_due"
LISTS = "lab.bench.lists"
MULTIHOST = "lab.bench.multihost"
PGBENCH_CANDIDATES = ("/usr/lib/postgresql/15/bin/pgbench", "pgbench")
WORKERS = 2  # Q_WORKERS of every cluster (the settings add one for the sweeper)
# An idle backend flushes its statistics at most this long after its last transaction
# (PostgreSQL 15's PGSTAT_IDLE_INTERVAL, 10 s, plus a margin).
STATS_IDLE_FLUSH = 10.5
_TPS = re.compile(r"^tps = ([0-9.]+)", re.MULTILINE)
_READY = re.compile(r"Order system: (http://[^\s/]+)/")


# Django's query log also holds the transaction control it issued (BEGIN, COMMIT, savepoints):
# those are not queries; the commits are counted apart (xact_commit).
_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")


def _statements(captured: list[dict[str, Any]], out: Any, label: str) -> int:
    """The queries among ``captured`` (transaction control left out); the kinds of the first
    claim's are printed once so the count can be checked."""
    # A statement bound on the server (the claim's read) is logged without its text.
    sql = [q["sql"] or "(prepared)" for q in captured]
    sql = [text for text in sql if not text.upper().startswith(_CONTROL)]
    if not getattr(_statements, label, False):
        setattr(_statements, label, True)
        kinds = [" ".join(text.split()[:3]) for text in sql[: max(1, len(sql) // 20)]]
        out.write(f"  {label}: queries of one claim: {'; '.join(kinds)}")
    return len(sql)


class Skip(Exception):  # noqa: N818 - a measurement that cannot run here, with the reason
    pass


@dataclass
class Series:
    """One measurement over the rounds."""

    unit: str
    values: list[float] = field(default_factory=list)
    skipped: str = ""

    def add(self, value: float) -> None:
        self.values.append(value)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def text(self, digits: int = 0) -> str:
        if not self.values:
            return f"not measured ({self.skipped or 'no value'})"
        fmt = f"{{:,.{digits}f}}"
        return (
            f"{fmt.format(self.median)} {self.unit} "
            f"[{fmt.format(min(self.values))}–{fmt.format(max(self.values))}]"
        )


def _ratio(a: Series, b: Series) -> str:
    if not a.values or not b.values or b.median == 0:
        return "n/a"
    return f"{a.median / b.median:.2f}×"


def _ratio_value(a: Series, b: Series) -> float | None:
    if not a.values or not b.values or b.median == 0:
        return None
    return a.median / b.median


def _run_id() -> str:
    return uuid.uuid4().hex[:8]


def _optional_module(name: str) -> Any | None:
    """The module if it is there (other people are writing some of them), else None."""
    try:
        if importlib.util.find_spec(name) is None:
            return None
    except ModuleNotFoundError:
        return None
    return importlib.import_module(name)


def _has_task(dotted: str) -> bool:
    module, _, name = dotted.rpartition(".")
    found = _optional_module(module)
    return found is not None and callable(getattr(found, name, None))


# --- connections and counters ---------------------------------------------------------------


def _conninfo(dbname: str | None = None) -> str:
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


def _database_url(dbname: str) -> str:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        db = settings.DATABASES["default"]
        password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
        url = (
            f"postgres://{db.get('USER') or 'postgres'}{password}@{db.get('HOST') or '127.0.0.1'}"
            f":{db.get('PORT') or 5432}/{db['NAME']}"
        )
    return urlunsplit(urlsplit(url)._replace(path=f"/{dbname}", query=""))


def _recreate_database(name: str) -> None:
    with psycopg.connect(_conninfo("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def _drop_database(name: str) -> None:
    with psycopg.connect(_conninfo("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _xact_commits() -> dict[str, int]:
    """Committed transactions per database so far, this backend's own ones flushed first.

    Other backends flush their counts at most once a second while busy, when they exit, and at
    most ``STATS_IDLE_FLUSH`` after going idle."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT datname, xact_commit FROM pg_stat_database WHERE datname <> ''")
        rows = cursor.fetchall()
    return {str(name): int(commits) for name, commits in rows}


def _xact_commit() -> int:
    """Committed transactions of this database so far (see ``_xact_commits``)."""
    return _xact_commits().get(str(settings.DATABASES["default"]["NAME"]), 0)


def _settled_xact_commit() -> int:
    """:func:`_xact_commit` once the setup just before is counted: a backend's statistics of
    its last statements (the seeding's, its ANALYZE's) reach the view one read late. Read once,
    a window of 150 claims counted 151 commits, every time; read twice first, 150."""
    _xact_commit()
    return _xact_commit()


def _xid() -> int:
    """The server's transaction id counter; the probe itself takes one id (it asks for it)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_xact_id()::text::bigint")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def _rows_written() -> dict[str, int]:
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


def _counters() -> Counters:
    xid = _xid()
    commits = _xact_commits()  # (its snapshot is kept until the next clear: rows match it)
    return Counters(time.perf_counter(), commits, xid, _rows_written())


@dataclass(frozen=True)
class Overhead:
    """What one ``_counters`` (or ``_xact_commit``) reading adds to what it reads."""

    commits: int
    xids: int
    xact_commit_reading: int


def _reading_overhead() -> Overhead:
    name = str(settings.DATABASES["default"]["NAME"])
    first = _counters()
    second = _counters()
    a = _xact_commit()
    b = _xact_commit()
    return Overhead(
        commits=second.commits.get(name, 0) - first.commits.get(name, 0),
        xids=second.xid - first.xid,
        xact_commit_reading=b - a,
    )


# --- subprocesses ---------------------------------------------------------------------------


def _child_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **extra}
    env.pop("REDIS_URL", None)  # the ORM broker on the same database
    env["DATABASE_URL"] = _database_url(settings.DATABASES["default"]["NAME"])
    env["HOLDFAST_STATE_DIR"] = str(settings.HOLDFAST_STATE_DIR)
    return env


def _stop(process: subprocess.Popen[bytes], grace: float = 15) -> None:
    """SIGTERM once (django-q2 mishandles a second signal), then the rest of its session."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


@contextlib.contextmanager
def _qcluster(log_dir: Path, name: str, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``qcluster`` (``Q_WORKERS=2``) on an empty ORM broker queue."""
    from django_q.models import OrmQ

    OrmQ.objects.all().delete()  # a task left by an interrupted run would run in the window
    log_path = log_dir / f"qcluster-{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and manage.py
            [sys.executable, "manage.py", "qcluster"],
            cwd=ROOT,
            env=_child_env(Q_WORKERS=str(WORKERS), **env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        # The workers stop within a second of SIGTERM, but the sentinel then waits for the
        # sweeper's long-lived task (up to the task timeout): the rest is killed after 2 s.
        _stop(process, grace=2)
        _backends_gone()


def _ormq_sequence() -> int:
    """How many tasks were ever enqueued on the ORM broker (its id sequence; no write)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce((SELECT last_value FROM pg_sequences WHERE schemaname = "
            "current_schema() AND sequencename = "
            "split_part(pg_get_serial_sequence('django_q_ormq', 'id'), '.', 2)), 0)"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


CPU_ORDERS_PG = "cpu the order system's"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _process_ticks() -> dict[int, tuple[int, int]]:
    """Every process's (session id, CPU ticks used so far), from ``/proc`` (Linux)."""
    ticks = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # it exited meanwhile
        # After the command's closing parenthesis: state is field 3, session 6, utime 14, stime 15.
        fields = stat.rpartition(")")[2].split()
        ticks[int(entry.name)] = (int(fields[3]), int(fields[11]) + int(fields[12]))
    return ticks


def _backend_pids(dbname: str | None = None) -> set[int]:
    """The client backends connected to a database (default: this one), not this one."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = coalesce(%s, current_database()) "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
            [dbname],
        )
        return {int(row[0]) for row in cursor.fetchall()}


@dataclass
class CpuSplit:
    """The CPU each side of an end-to-end run used in its window, per apply: the cluster's
    processes (its session), the order system's process, and the PostgreSQL backends of each
    database, from ``/proc``. Who belongs to each side is read at the end (the order system
    opens a connection per client connection, the cluster may start workers), and a process
    that started in the window counts whole; one that started and exited in it is lost, which
    persistent connections make rare."""

    sessions: dict[str, int]
    databases: dict[str, str]
    before: dict[int, tuple[int, int]]

    @classmethod
    def start(cls, *, sessions: dict[str, int], databases: dict[str, str]) -> CpuSplit | None:
        if not Path("/proc/self/stat").exists():
            return None
        return cls(sessions=sessions, databases=databases, before=_process_ticks())

    def per_apply_ms(self, applies: int) -> dict[str, float]:
        """Two reads of ``pg_stat_activity`` (transactions of this database)."""
        after = _process_ticks()
        groups = {
            label: {pid for pid, (sid, _) in after.items() if sid == session}
            for label, session in self.sessions.items()
        }
        groups |= {label: _backend_pids(db) for label, db in self.databases.items()}
        used = {}
        for label, pids in groups.items():
            ticks = sum(
                after[pid][1] - self.before.get(pid, (0, 0))[1] for pid in pids if pid in after
            )
            used[label] = ticks / _CLOCK_TICKS * 1000 / applies
        return used


def _backends(dbname: str | None = None) -> int:
    """How many client backends are connected to a database (default: this one), not this one."""
    return len(_backend_pids(dbname))


def _backends_gone(timeout: float = 10) -> None:
    """Wait until no other backend is connected to this database (a killed cluster's backends
    exit, flushing their statistics, once they see the connection closed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _backends():
        time.sleep(0.05)


def _enqueue_many(func: str, args: list[tuple[Any, ...]]) -> list[int]:
    """Enqueue tasks in one transaction (so the cluster sees them all at once); their rows."""
    from django_q.models import OrmQ
    from django_q.tasks import async_task

    before = OrmQ.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    with transaction.atomic():
        for task_args in args:
            async_task(func, *task_args, group=func.rsplit(".", 1)[-1])
    return list(OrmQ.objects.filter(pk__gt=before).values_list("pk", flat=True))


def _wait_acked(rows: list[int], timeout: float, process: subprocess.Popen[bytes]) -> int:
    """Wait until the ORM broker rows are gone (acknowledged); return the polls made."""
    from django_q.models import OrmQ

    deadline = time.monotonic() + timeout
    polls = 0
    while True:
        polls += 1
        if not OrmQ.objects.filter(pk__in=rows).exists():
            return polls
        if process.poll() is not None:
            raise Skip(f"the qcluster exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise Skip(f"tasks not done after {timeout:.0f}s")
        time.sleep(0.05)


def _warm(process: subprocess.Popen[bytes]) -> None:
    """One no-op through the cluster: it is up and polling."""
    _wait_acked(_enqueue_many(NOOP, [()]), 60, process)


@dataclass
class _PendingOrders:
    """The order system's transactions of one end-to-end run, read once its backends flushed."""

    before: int
    applies: int
    own: int  # transactions the bench itself made there meanwhile
    ended: float


class Command(BaseCommand):
    help = "Measure claims, tasks and applies against pgbench and raw SQL (PostgreSQL)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
        parser.add_argument(
            "--cases", type=int, default=150, help="claims of each kind per round (150)"
        )
        parser.add_argument(
            "--noop-tasks",
            type=int,
            default=400,
            help="django-q2 no-op tasks per round (400)",
        )
        parser.add_argument(
            "--raw-rows", type=int, default=2000, help="raw SKIP LOCKED claims per round (2000)"
        )
        parser.add_argument(
            "--apply-cases",
            type=int,
            default=500,
            help="end-to-end applies per round (500, the backlog the issue's first measurement "
            "used: long enough that the workers' first statements are a small part of it)",
        )
        parser.add_argument("--pgbench-seconds", type=int, default=3, help="pgbench -T per run (3)")
        parser.add_argument(
            "--idle-seconds",
            type=float,
            default=5.0,
            help="window for the warmed cluster's idle transaction rate (5; the sweep interval)",
        )
        parser.add_argument("--skip-e2e", action="store_true", help="no end-to-end applies")
        parser.add_argument("--skip-lists", action="store_true", help="no list page timings")
        parser.add_argument(
            "--list-sizes",
            default="10000,1000000",
            help="case counts for the list pages, comma separated (10000,1000000)",
        )
        parser.add_argument(
            "--skip-multihost", action="store_true", help="no multi-host end-to-end"
        )
        parser.add_argument(
            "--multihost-cases",
            type=int,
            default=0,
            help="applies per multi-host round (default: --apply-cases)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if connection.vendor != "postgresql":
            raise CommandError(
                f"bench measures PostgreSQL only; this database is {connection.vendor}. Run "
                "`make bench` (BENCH_DATABASE_URL, default "
                "postgres://postgres@127.0.0.1:5432/bench_holdfast) or set DATABASE_URL to a "
                "PostgreSQL database named bench_*."
            )
        name = str(settings.DATABASES["default"]["NAME"])
        if not name.startswith("bench"):
            raise CommandError(
                f"bench writes real rows: it runs only on a database named bench_*, not {name!r}."
            )
        if "orm" not in settings.Q_CLUSTER:
            raise CommandError("bench measures the ORM broker: unset REDIS_URL.")
        rounds: int = options["rounds"]
        cases: int = options["cases"]
        counts = ("rounds", "cases", "noop_tasks", "raw_rows", "apply_cases")
        if any(options[name] < 1 for name in counts):
            raise CommandError(
                "--rounds, --cases, --noop-tasks, --raw-rows and --apply-cases must be positive."
            )
        try:
            list_sizes = tuple(int(size) for size in options["list_sizes"].split(",") if size)
        except ValueError:
            raise CommandError("--list-sizes: comma-separated case counts") from None
        if len(list_sizes) < 2:
            raise CommandError("--list-sizes needs at least two sizes (e.g. 10000,1000000).")
        self.db_name = name
        self.orders_db = f"{name}_orders"
        self.pgbench_db = f"{name}_pgbench"
        self.idle_seconds: float = max(0.5, options["idle_seconds"])
        self.run_id = _run_id()
        for noisy in ("django-q", "httpx"):  # one line per enqueue, per request
            logging.getLogger(noisy).setLevel(logging.WARNING)
        self.log_dir = ROOT / "var" / "bench" / name
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # Restore detection remembers this database's epoch outside it: keep the bench's own.
        settings.HOLDFAST_STATE_DIR = str(self.log_dir / "state")
        started = time.perf_counter()
        self.e2e_mode = (
            "2 × apply_due (one per worker)" if _has_task(APPLY_DUE) else "1 apply_case per case"
        )
        self.stdout.write(
            f"bench on {name} (run {self.run_id}): {rounds} rounds, {cases} claims, "
            f"{options['noop_tasks']} no-op tasks, {options['raw_rows']} raw claims, "
            f"{options['apply_cases']} applies per round"
            f" ({self.e2e_mode}); pgbench -T {options['pgbench_seconds']}"
        )
        self.stdout.flush()
        self.overhead = _reading_overhead()
        self.pending_orders: _PendingOrders | None = None
        self._quiet()
        self._analyze()

        s: dict[str, Series] = {
            "pg1": Series("tps"),
            "pg4": Series("tps"),
            "raw1": Series("claims/s"),
            "raw4": Series("claims/s"),
            "claim": Series("claims/s"),
            "queries": Series("queries"),
            "commits": Series("commits"),
            "next": Series("claims/s"),
            "next_queries": Series("queries"),
            "next_commits": Series("commits"),
            "noop": Series("tasks/s"),
            "e2e": Series("applies/s"),
            "e2e_vs_noop": Series("×"),
            "e2e_xact_raw": Series("transactions"),
            "e2e_xact": Series("transactions"),
            "idle_xact": Series("transactions/s"),
            "e2e_writes_raw": Series("write commits"),
            "e2e_writes": Series("write commits"),
            "idle_writes": Series("write commits/s"),
            "orders_xact": Series("transactions"),
            "cpu workers": Series("ms"),
            "cpu its PostgreSQL": Series("ms"),
            "cpu order system": Series("ms"),
            "cpu the order system's": Series("ms"),
            "cpu all": Series("ms"),
            "cpu noop": Series("ms"),
            "multi": Series("applies/s"),
            "bare": Series("writes/s"),
            "cpu bare order system": Series("ms"),
            "cpu bare all": Series("ms"),
        }
        self.series = s
        self.others_active: dict[str, int] = {}
        self.writes_clean: list[bool] = []  # per end-to-end round: no other database's burst
        self.cluster_enqueued: list[int] = []  # per end-to-end round
        pgbench = self._pgbench_binary()
        if pgbench is None:
            s["pg1"].skipped = s["pg4"].skipped = "no pgbench binary found"
        else:
            self._attempt(s["pg1"], lambda: self._pgbench_init(pgbench))
            s["pg4"].skipped = s["pg1"].skipped
        from reconciliation import claims

        if not callable(getattr(claims, "claim_next_due", None)):
            s["next"].skipped = "reconciliation.claims.claim_next_due does not exist"
        multihost = None if options["skip_multihost"] else _optional_module(MULTIHOST)
        if options["skip_multihost"]:
            s["multi"].skipped = "--skip-multihost"
        elif multihost is None:
            s["multi"].skipped = f"{MULTIHOST} does not exist"
        orders: _OrderSystem | None = None
        if options["skip_e2e"]:
            s["e2e"].skipped = "--skip-e2e"
            s["multi"].skipped = s["multi"].skipped or "--skip-e2e"
        else:
            try:
                orders = _OrderSystem(self.log_dir, self.orders_db).start()
                self._e2e_setup(orders)
            except (Skip, RuntimeError, httpx.HTTPError, CommandError, AssertionError) as exc:
                s["e2e"].skipped = f"order system not usable: {exc}"
                s["multi"].skipped = s["multi"].skipped or s["e2e"].skipped
                if orders is not None:
                    orders.stop()
                orders = None
        list_lines: list[str] = []
        lists_met: bool | None = None
        lists_skipped = ""
        try:
            for number in range(1, rounds + 1):
                self.stdout.write(f"round {number}/{rounds}…")
                self.stdout.flush()
                timings: list[str] = []

                def timed(
                    label: str,
                    series: Series,
                    measure: Callable[[], float | None],
                    timings: list[str] = timings,
                ) -> None:
                    began, measured = time.perf_counter(), len(series.values)
                    self._attempt(series, measure)
                    value = (
                        f" {series.values[-1]:,.1f} {series.unit}"
                        if len(series.values) > measured
                        else ""
                    )
                    timings.append(f"{label}{value} in {time.perf_counter() - began:.0f}s")

                if pgbench is not None and not s["pg1"].skipped:
                    seconds = options["pgbench_seconds"]
                    timed("pgbench", s["pg1"], partial(self._pgbench, pgbench, 1, seconds))
                    self._attempt(s["pg4"], partial(self._pgbench, pgbench, 4, seconds))
                timed("raw", s["raw1"], lambda: self._raw_claims(options["raw_rows"], 1))
                self._attempt(s["raw4"], lambda: self._raw_claims(options["raw_rows"], 4))
                backlog: dict[int, str] | None = None
                if orders is not None and not s["e2e"].skipped:
                    # Seeded early: the order system's statistics of the seeding are flushed
                    # (idle backends: within STATS_IDLE_FLUSH) before the run's first reading.
                    try:
                        backlog = self._approved_cases(orders, options["apply_cases"], number)
                    except Skip as exc:
                        s["e2e"].skipped = f"seeding failed: {exc}"
                timed("claim", s["claim"], lambda: self._claims(cases, s))
                timed("next-due claim", s["next"], lambda: self._claims_next_due(cases, s))
                e2e_before, noop_before = len(s["e2e"].values), len(s["noop"].values)
                if orders is not None and backlog is not None:
                    timed("end-to-end", s["e2e"], partial(self._e2e, orders, backlog, number, s))
                    timed(
                        "bare writes",
                        s["bare"],
                        partial(self._bare, orders, options["apply_cases"], number),
                    )
                # After the end-to-end run: the order system's backends flush meanwhile.
                timed("no-op", s["noop"], partial(self._noop, options["noop_tasks"], number))
                if len(s["e2e"].values) > e2e_before and len(s["noop"].values) > noop_before:
                    s["e2e_vs_noop"].add(s["e2e"].values[-1] / s["noop"].values[-1])
                if orders is not None and not s["multi"].skipped and multihost is not None:
                    count = options["multihost_cases"] or options["apply_cases"]
                    timed(
                        "multi-host",
                        s["multi"],
                        partial(self._multihost, multihost, orders, count, number),
                    )
                self.stdout.write(f"  {'; '.join(timings)}")
                self.stdout.flush()
            if orders is not None:
                self._orders_settle(wait=True)
            if options["skip_lists"]:
                lists_skipped = "--skip-lists"
            else:
                lists = _optional_module(LISTS)
                if lists is None:
                    lists_skipped = f"{LISTS} does not exist"
                else:
                    began = time.perf_counter()
                    try:
                        list_lines, lists_met = lists.measure_list_pages(
                            rounds=rounds, sizes=list_sizes, progress=self.stdout.write
                        )
                    except Exception as exc:  # noqa: BLE001 - reported, the rest still prints
                        lists_skipped = f"failed: {exc!r}"
                    self.stdout.write(f"  list pages {time.perf_counter() - began:.0f}s")
        finally:
            if orders is not None:
                orders.stop()
                _drop_database(self.orders_db)
            if pgbench is not None:
                with contextlib.suppress(psycopg.Error):
                    _drop_database(self.pgbench_db)
        self._report(s, list_lines, lists_met, lists_skipped, time.perf_counter() - started)

    def _attempt(self, series: Series, measure: Callable[[], float | None]) -> None:
        if series.skipped:
            return
        try:
            value = measure()
        except Skip as exc:
            series.skipped = str(exc)
            self.stdout.write(f"  skipped: {exc}")
            return
        if value is not None:
            series.add(value)

    # --- the database between measurements ------------------------------------------------

    def _analyze(self) -> None:
        """What autovacuum would do for the tables the bench writes (it is off here): fresh
        planner statistics (without them the claim's approval lookup walks every live approval)
        and no dead row versions left in their indexes by earlier rounds."""
        from django_q.models import OrmQ

        from approvals.models import Approval, Operation, Proposal
        from cases.models import (
            Attempt,
            CancellationRequest,
            Case,
            CaseEvent,
            CounterRow,
            SystemMarker,
        )

        models = (
            Case,
            CaseEvent,
            Attempt,
            CancellationRequest,
            CounterRow,
            SystemMarker,
            Proposal,
            Operation,
            Approval,
            OrmQ,
        )
        with connection.cursor() as cursor:
            cursor.execute(
                "VACUUM (ANALYZE) "
                + ", ".join(connection.ops.quote_name(m._meta.db_table) for m in models)
            )

    def _quiet(self) -> None:
        """Nothing left due from earlier runs or rounds: no case the sweeper would dispatch or a
        next-due claim would take first, no active attempt whose lease would run out."""
        from cases.models import Attempt, Case

        far = timezone.now() + dt.timedelta(days=3650)
        Case.objects.exclude(next_check_at=None).update(next_check_at=None)
        Attempt.objects.filter(state__in=Attempt.ACTIVE, lease_expires_at__lt=far).update(
            lease_expires_at=far
        )

    # --- report ---------------------------------------------------------------------------

    def _report(
        self,
        s: dict[str, Series],
        list_lines: list[str],
        lists_met: bool | None,
        lists_skipped: str,
        elapsed: float,
    ) -> None:
        w = self.stdout.write
        w("")
        w(
            f"pgbench -N 4 clients / 1 client: {s['pg4'].text()} vs {s['pg1'].text()} "
            f"… {_ratio(s['pg4'], s['pg1'])}"
        )
        w(
            f"raw SQL SKIP LOCKED 1 thread / pgbench -N 1 client: {s['raw1'].text()} vs "
            f"{s['pg1'].text()} … {_ratio(s['raw1'], s['pg1'])}"
        )
        w(
            f"raw SQL SKIP LOCKED 4 threads / pgbench -N 4 clients: {s['raw4'].text()} vs "
            f"{s['pg4'].text()} … {_ratio(s['raw4'], s['pg4'])}"
        )
        w(
            f"raw SQL SKIP LOCKED 4 threads / 1 thread: {s['raw4'].text()} vs "
            f"{s['raw1'].text()} … {_ratio(s['raw4'], s['raw1'])}"
        )
        w(
            f"claim / raw SQL SKIP LOCKED: {s['claim'].text()} (Holdfast case_claim by id, "
            f"sequential) vs {s['raw1'].text()} (1 thread) … {_ratio(s['claim'], s['raw1'])}"
        )
        w(f"  case_claim queries per claim: {s['queries'].text(1)} (goal ≤ 4)")
        w(f"  case_claim commits per claim: {s['commits'].text(2)} (goal 1)")
        if s["next"].values:
            w(
                f"next-due claim / raw SQL SKIP LOCKED: {s['next'].text()} (Holdfast "
                f"claim_next_due, sequential) vs {s['raw1'].text()} (1 thread) "
                f"… {_ratio(s['next'], s['raw1'])}"
            )
            w(f"  claim_next_due queries per claim: {s['next_queries'].text(1)} (goal ≤ 4)")
            w(f"  claim_next_due commits per claim: {s['next_commits'].text(2)} (goal 1)")
        else:
            w(f"next-due claim: not measured ({s['next'].skipped or 'no value'})")
        w(
            f"django-q2 no-op (ORM broker, {WORKERS} workers) / raw SQL SKIP LOCKED 1 thread: "
            f"{s['noop'].text(1)} vs {s['raw1'].text()} … {_ratio(s['noop'], s['raw1'])}"
        )
        ceiling = self._ceiling(s)
        if s["e2e"].values:
            w(
                f"end-to-end safe apply ({self.e2e_mode}, {WORKERS} workers) / django-q2 no-op: "
                f"{s['e2e'].text(1)} vs {s['noop'].text(1)} (per round "
                f"{s['e2e_vs_noop'].text(3)}) … {_ratio(s['e2e'], s['noop'])}"
            )
            w(
                "  transactions per apply in Holdfast's database (xact_commit delta, reads "
                f"included): raw {s['e2e_xact_raw'].text(1)}, including the cluster's broker "
                f"polling and sweeper; idle-corrected {s['e2e_xact'].text(1)} (minus the warmed "
                f"idle cluster's {s['idle_xact'].text(1)} × the run's time) (goal ≤ 6)"
            )
            w(
                "  write commits per apply, all databases (server-wide transaction ids): raw "
                f"{self._clean_writes(s['e2e_writes_raw']).text(1)}; idle-corrected "
                f"{self._clean_writes(s['e2e_writes']).text(1)} (idle "
                f"{self._clean_writes(s['idle_writes']).text(1)})" + self._others_note()
            )
            w(
                "  the order system's own transactions per apply (xact_commit of "
                f"{self.orders_db}): {s['orders_xact'].text(1)}"
            )
            if s["cpu all"].values:
                cores = os.cpu_count() or 1
                w(
                    "  CPU per apply (/proc, over each run): the cluster's workers "
                    f"{s['cpu workers'].text(2)}, Holdfast's PostgreSQL backends "
                    f"{s['cpu its PostgreSQL'].text(2)}, the order system "
                    f"{s['cpu order system'].text(2)}, its PostgreSQL backends "
                    f"{s[CPU_ORDERS_PG].text(2)}; {s['cpu all'].text(2)} in all: "
                    f"{cores} cores could do {cores * 1000 / s['cpu all'].median:,.0f} applies/s "
                    "if they did nothing else"
                    + (
                        f"; a django-q2 no-op task costs {s['cpu noop'].text(2)} (its cluster and "
                        "PostgreSQL backends)"
                        if s["cpu noop"].values
                        else ""
                    )
                )
            if len(s["e2e_xact_raw"].values) > 1:

                def rounds(series: Series) -> str:
                    return ", ".join(f"{value:.2f}" for value in series.values)

                # A round that costs more shows here whole, not only as the range's end.
                w(
                    f"  per round, in order: transactions per apply {rounds(s['e2e_xact_raw'])}; "
                    f"the workers' CPU per apply {rounds(s['cpu workers'])} ms; applies/s "
                    f"{rounds(s['e2e'])}"
                )
            if any(self.cluster_enqueued):
                w(
                    f"  during the runs the cluster enqueued tasks of its own: "
                    f"{', '.join(map(str, self.cluster_enqueued))} per round (the dispatcher "
                    "enqueues apply_case for cases due in its pass; the sweeper its successor)"
                )
            if ceiling is not None:
                writes, rate = ceiling
                clean = sum(self.writes_clean)
                basis = (
                    "idle-corrected write commits"
                    if clean == len(self.writes_clean)
                    else f"idle-corrected write commits, {clean} clean round(s)"
                    if clean
                    else "idle-corrected write commits, unreliable: no clean round"
                )
                w(
                    f"end-to-end safe apply / (pgbench -N 4 clients ÷ write commits per apply): "
                    f"{s['e2e'].text(1)} vs {rate:,.0f} applies/s ({s['pg4'].median:,.0f} tps "
                    f"÷ {writes:.1f} {basis}) "
                    f"… {s['e2e'].median / rate:.3f}×"
                )
        else:
            w(f"end-to-end safe apply: not measured ({s['e2e'].skipped or 'no value'})")
        if s["bare"].values:
            # The order system's side of an apply alone: the end-to-end rate cannot pass it.
            w(
                f"bare writes ({WORKERS} bare_writes tasks, one per worker, sending the same "
                "backlog's writes with nothing of Holdfast's around them) / django-q2 no-op: "
                f"{s['bare'].text(1)} vs {s['noop'].text(1)} … {_ratio(s['bare'], s['noop'])}"
            )
            w(
                f"end-to-end safe apply / bare writes: {s['e2e'].text(1)} vs "
                f"{s['bare'].text(1)} … {_ratio(s['e2e'], s['bare'])}"
            )
            if s["cpu bare all"].values:
                w(
                    "  CPU per bare write: the order system and its PostgreSQL backends "
                    f"{s['cpu bare order system'].text(2)}; {s['cpu bare all'].text(2)} in all"
                )
        if s["multi"].values:
            w(
                "multi-host (2 network namespaces, Redis broker) end-to-end / django-q2 no-op: "
                f"{s['multi'].text(1)} vs {s['noop'].text(1)} … {_ratio(s['multi'], s['noop'])}"
            )
        else:
            w(f"multi-host end-to-end: not measured ({s['multi'].skipped or 'no value'})")
        if list_lines:
            w("")
            for line in list_lines:
                w(line)
        else:
            w(f"list pages: not measured ({lists_skipped or 'no value'})")
        w("")
        w("GOALS")
        for line in self._goals(s, lists_met, lists_skipped):
            w(f"  {line}")
        w("")
        w(f"bench took {elapsed:.0f}s ({elapsed / 60:.1f} min); logs in {self.log_dir}")

    def _clean_writes(self, series: Series) -> Series:
        """The write counts of the rounds no other database burst into, if there are any."""
        clean = [v for v, ok in zip(series.values, self.writes_clean, strict=False) if ok]
        if not clean or len(clean) == len(series.values):
            return series
        return Series(series.unit, clean)

    def _ceiling(self, s: dict[str, Series]) -> tuple[float, float] | None:
        writes_series = self._clean_writes(s["e2e_writes"])
        if not s["pg4"].values or not writes_series.values or writes_series.median <= 0:
            return None
        writes = writes_series.median
        return writes, s["pg4"].median / writes

    def _others_note(self) -> str:
        if all(self.writes_clean):
            return ""
        busiest = sorted(self.others_active.items(), key=lambda item: -item[1])[:3]
        named = ", ".join(f"{name} {count:,} rows" for name, count in busiest) or (
            "server-wide transaction ids grew faster than 5/s in the idle window"
        )
        clean = sum(self.writes_clean)
        used = (
            f"the figures above use the {clean} clean round(s) of {len(self.writes_clean)}"
            if clean
            else "no round was clean: the figures above are unreliable"
        )
        return (
            f"; NOTE other databases wrote during some runs ({named}), and their "
            f"writes take transaction ids too: {used}"
        )

    def _goals(self, s: dict[str, Series], lists_met: bool | None, lists_skipped: str) -> list[str]:
        def verdict(ok: bool | None) -> str:
            return "not measured" if ok is None else ("met" if ok else "NOT met")

        lines = []
        rate = _ratio_value(s["e2e"], s["noop"])
        xact = s["e2e_xact"].median if s["e2e_xact"].values else None
        raw = s["e2e_xact_raw"].median if s["e2e_xact_raw"].values else None
        e2e_ok = None if rate is None or xact is None else rate >= 1.0 and xact <= 6
        lines.append(
            f"[{verdict(e2e_ok)}] end-to-end safe apply ≥ 1.0× django-q2 no-op and ≤ 6 "
            "transactions per apply: "
            + (
                f"{rate:.2f}×, {xact:.1f} transactions per apply (idle-corrected; raw {raw:.1f})"
                if rate is not None and xact is not None and raw is not None
                else s["e2e"].skipped or "no value"
            )
        )
        ceiling = _ratio_value(s["bare"], s["noop"])
        if ceiling is not None:
            # The order system's side alone: no end-to-end rate on this machine passes it.
            lines.append(
                f"    its ceiling here: bare writes {ceiling:.2f}× the no-op; the safe apply "
                f"reaches {_ratio(s['e2e'], s['bare'])} of that"
            )
        use_next = bool(s["next"].values)
        claim, queries, commits = (
            (s["next"], s["next_queries"], s["next_commits"])
            if use_next
            else (s["claim"], s["queries"], s["commits"])
        )
        which = "claim_next_due" if use_next else "case_claim"
        ratio = _ratio_value(claim, s["raw1"])
        claim_ok = (
            None
            if ratio is None or not queries.values or not commits.values
            else ratio >= 0.3 and queries.median <= 4 and round(commits.median, 2) <= 1
        )
        lines.append(
            f"[{verdict(claim_ok)}] claim ≥ 0.3× raw SQL SKIP LOCKED, ≤ 4 queries, 1 commit: "
            + (
                f"{which} {ratio:.2f}×, {queries.median:.1f} queries, "
                f"{commits.median:.2f} commits per claim"
                if claim_ok is not None and ratio is not None
                else claim.skipped or "no value"
            )
        )
        lines.append(
            f"[{verdict(lists_met)}] every list page at 1M ≤ 1.5× its time at 10k, constant "
            "queries: "
            + (
                "all pages within (see above)"
                if lists_met
                else "some page missed (see above)"
                if lists_met is not None
                else lists_skipped or "no value"
            )
        )
        return lines

    # --- pgbench --------------------------------------------------------------------------

    def _pgbench_binary(self) -> str | None:
        for candidate in PGBENCH_CANDIDATES:
            found = shutil.which(candidate)
            if found:
                return found
        return None

    def _pgbench_env(self) -> dict[str, str]:
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

    def _pgbench_init(self, binary: str) -> None:
        try:
            _recreate_database(self.pgbench_db)
        except psycopg.Error as exc:
            raise Skip(f"cannot create {self.pgbench_db}: {exc}") from exc
        result = subprocess.run(  # noqa: S603 - the pgbench binary found above
            [binary, "-i", "-s", "1", "-q", self.pgbench_db],
            env=self._pgbench_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise Skip(f"pgbench -i failed: {result.stderr.strip()[-300:]}")

    def _pgbench(self, binary: str, clients: int, seconds: int) -> float:
        result = subprocess.run(  # noqa: S603 - the pgbench binary found above
            [
                binary,
                "-N",
                "-c",
                str(clients),
                "-j",
                str(clients),
                "-T",
                str(seconds),
                self.pgbench_db,
            ],
            env=self._pgbench_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        match = _TPS.search(result.stdout)
        if result.returncode != 0 or match is None:
            raise Skip(f"pgbench -c {clients} failed: {(result.stderr or result.stdout)[-300:]}")
        return float(match.group(1))

    # --- raw SQL SKIP LOCKED --------------------------------------------------------------

    def _raw_claims(self, rows: int, threads: int) -> float:
        table = "bench_raw_claim"
        with psycopg.connect(_conninfo(), autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute(
                f"CREATE TABLE {table} (id bigserial PRIMARY KEY, state text NOT NULL, "
                "claimed_by text, claimed_at timestamptz)"
            )
            conn.execute(f"CREATE INDEX {table}_ready ON {table} (id) WHERE state = 'ready'")
            conn.execute(
                f"INSERT INTO {table} (state) SELECT 'ready' FROM generate_series(1, %s)",  # noqa: S608
                (rows,),
            )
            conn.execute(f"ANALYZE {table}")
        claimed = [0] * threads
        errors: list[BaseException] = []
        barrier = threading.Barrier(threads + 1)

        def claimer(index: int) -> None:
            try:
                with psycopg.connect(_conninfo(), autocommit=True) as conn:
                    barrier.wait()
                    while True:
                        with conn.transaction():
                            row = conn.execute(
                                f"SELECT id FROM {table} WHERE state = 'ready' ORDER BY id "  # noqa: S608
                                "LIMIT 1 FOR UPDATE SKIP LOCKED"
                            ).fetchone()
                            if row is None:
                                return
                            conn.execute(
                                f"UPDATE {table} SET state = 'claimed', claimed_by = %s, "  # noqa: S608
                                "claimed_at = now() WHERE id = %s",
                                (f"t{index}", row[0]),
                            )
                        claimed[index] += 1
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

    # --- Holdfast's claims ----------------------------------------------------------------

    def _fixture(self) -> dict[str, Any]:
        """An account, users and an autonomous order system profile for ready cases."""
        if getattr(self, "_fixture_rows", None):
            return self._fixture_rows
        from cases.models import CustomerAccount, Team
        from cases.roles import ensure_roles
        from reconciliation.models import OrderSystemProfile

        ensure_roles()
        users = get_user_model().objects
        owner = users.create(username=f"bench-owner-{self.run_id}")
        approver = users.create(username=f"bench-approver-{self.run_id}")
        team = Team.objects.create(name=f"Bench {self.run_id}", default_owner=owner)
        account = CustomerAccount.objects.create(
            reference=f"ACC-BENCH-{self.run_id}",
            name="Bench",
            team=team,
            verified=True,
        )
        from reconciliation.selectors import current_autonomy

        if not current_autonomy().is_autonomous:  # the live order system's probe said so
            self._bench_profile(OrderSystemProfile)
        self._fixture_rows: dict[str, Any] = {
            "owner": owner,
            "approver": approver,
            "team": team,
            "account": account,
            "next": 0,
        }
        return self._fixture_rows

    def _bench_profile(self, model: Any) -> None:
        """An autonomous profile for the claims measured without a live order system."""
        model.objects.create(
            base_url=settings.ORDER_SYSTEM_URL.rstrip("/"),
            sandbox_order_id=settings.ORDER_SYSTEM_SANDBOX_ORDERS[0],
            reachable=True,
            idempotent_replay=True,
            key_reuse_refused=True,
            fencing_enforced=True,
            version_check=True,
            approval_expiry_enforced=True,
            consistent_lookup=True,
            autonomy="autonomous",
            autonomy_reason="bench fixture",
        )

    def _ready_cases(self, count: int, *, due: bool = False) -> list[int]:
        """``count`` ready cases with an approved proposal, written as rows (this is what a
        claim reads); ``due``: due now, for a next-due claim. Statistics refreshed after."""
        from cases.fencing import counter_next
        from cases.models import Case
        from lab.bench.seeding import ready_case_seed

        fx = self._fixture()
        now = timezone.now()
        ready = []
        with transaction.atomic():
            for _ in range(count):
                n = fx["next"] = fx["next"] + 1
                tag = f"{self.run_id}-{n}"
                case = ready_case_seed(
                    tag=f"B{tag}",
                    reference=f"BENCH-{tag}",
                    number=counter_next("case_number"),  # the numbers intake uses
                    account=fx["account"],
                    owner=fx["owner"],
                    approver=fx["approver"],
                    now=now,
                )
                ready.append(case.pk)
            if due:
                Case.objects.filter(pk__in=ready).update(
                    next_check_at=now - dt.timedelta(seconds=1)
                )
        self._analyze()
        return ready

    def _neutralise(self, case_ids: list[int]) -> None:
        """Claimed bench cases never wake the watchdog or the dispatcher of a later cluster."""
        from cases.models import Attempt, Case

        far = timezone.now() + dt.timedelta(days=3650)
        Attempt.objects.filter(case_id__in=case_ids).update(lease_expires_at=far)
        Case.objects.filter(pk__in=case_ids).update(next_check_at=None)

    def _claims(self, count: int, s: dict[str, Series]) -> float:
        from cases.kernel import Worker
        from reconciliation.claims import case_claim

        sample = min(count, 20)
        ids = self._ready_cases(count + sample)
        timed, counted = ids[:count], ids[count:]
        worker = Worker("bench")
        before = _settled_xact_commit()
        start = time.perf_counter()
        for pk in timed:
            case_claim(case_id=pk, worker=worker)
        elapsed = time.perf_counter() - start
        commits = _xact_commit() - before - self.overhead.xact_commit_reading
        # With DEBUG the log is a deque of 9000: once full, the context's slice is wrong.
        connection.queries_log.clear()
        with CaptureQueriesContext(connection) as queries:
            for pk in counted:
                case_claim(case_id=pk, worker=worker)
        self._neutralise(ids)
        s["queries"].add(_statements(queries.captured_queries, self.stdout, "case_claim") / sample)
        s["commits"].add(commits / count)
        return count / elapsed

    def _claims_next_due(self, count: int, s: dict[str, Series]) -> float:
        """``claim_next_due`` on ``count`` due ready cases (and nothing else due)."""
        from cases.kernel import Worker
        from reconciliation import claims

        claim_next_due = getattr(claims, "claim_next_due", None)
        if not callable(claim_next_due):
            raise Skip("reconciliation.claims.claim_next_due does not exist")
        kwargs: dict[str, Any] = {}
        if "source_checked" in inspect.signature(claim_next_due).parameters:
            # As case_claim: the comparison with the order system is the worker's, not the claim's.
            kwargs["source_checked"] = True
        sample = min(count, 20)
        self._quiet()
        ids = self._ready_cases(count + sample, due=True)
        worker = Worker("bench")
        taken: list[int] = []

        def claim() -> None:
            result = claim_next_due(worker=worker, **kwargs)
            attempt = getattr(result, "attempt", result)  # Claimed or Attempt
            if attempt is None:
                raise Skip(f"claim_next_due found nothing due after {len(taken)} claims")
            taken.append(attempt.case_id)

        try:
            before = _settled_xact_commit()
            start = time.perf_counter()
            for _ in range(count):
                claim()
            elapsed = time.perf_counter() - start
            commits = _xact_commit() - before - self.overhead.xact_commit_reading
            connection.queries_log.clear()
            with CaptureQueriesContext(connection) as queries:
                for _ in range(sample):
                    claim()
            left = claim_next_due(worker=worker, **kwargs)
        finally:
            self._neutralise(ids)
        if left is not None:
            raise Skip("claim_next_due claimed a case the bench did not make due")
        if sorted(taken) != sorted(ids):
            raise Skip("claim_next_due took other cases than the due ones")
        s["next_queries"].add(
            _statements(queries.captured_queries, self.stdout, "claim_next_due") / sample
        )
        s["next_commits"].add(commits / count)
        return count / elapsed

    # --- django-q2 no-op ------------------------------------------------------------------

    def _noop(self, count: int, number: int) -> float:
        self._quiet()
        with _qcluster(self.log_dir, f"noop-{number}") as process:
            _warm(process)
            cpu = CpuSplit.start(sessions={"workers": process.pid}, databases={"pg": self.db_name})
            start = time.perf_counter()
            rows = _enqueue_many(NOOP, [() for _ in range(count)])
            _wait_acked(rows, 120, process)
            elapsed = time.perf_counter() - start
            if cpu is not None:
                # The cluster's side only: the enqueue is the bench's.
                self.series["cpu noop"].add(sum(cpu.per_apply_ms(count).values()))
        return count / elapsed

    # --- end-to-end safe apply ------------------------------------------------------------

    def _e2e_setup(self, orders: _OrderSystem) -> None:
        """Point Holdfast at the order system and run the real capability probe."""
        from reconciliation.probe import order_system_probe

        settings.ORDER_SYSTEM_URL = orders.base_url
        today = timezone.localdate()
        orders.seed(
            accounts=[{"account_id": "ACC-PROBE", "name": "Probe", "access_active": True}],
            orders=[
                {
                    "order_id": "ORD-PROBE",
                    "account_id": "ACC-PROBE",
                    "delivery_date": str(today + dt.timedelta(days=40)),
                }
            ],
            # The probe needs a free slot within 14 days (as tests/support/fixtures.live_orders).
            slots=[
                {"date": str(today + dt.timedelta(days=d)), "capacity": 100000}
                for d in [*range(1, 29), 40]
            ],
        )
        profile = order_system_probe(sandbox_order_id="ORD-PROBE")
        if profile.autonomy != "autonomous":
            raise Skip(f"the order system probe says {profile.autonomy}: {profile.autonomy_reason}")

    def _approved_cases(
        self, orders: _OrderSystem, count: int, number: int | str
    ) -> dict[int, str]:
        """``count`` ready cases with an approved proposal on fresh orders of the live order
        system, written as rows (as ``_ready_cases``, and as intake → source check → prepare →
        approve leave them) with a real signed grant, so the real claim and apply accept them.
        Nothing is enqueued and nothing is due: nothing runs before the clock starts."""
        from approvals.grants import grant_issue
        from approvals.models import Approval, Operation
        from cases.fencing import counter_next
        from cases.models import Case
        from lab.bench.seeding import ready_case_seed

        self._orders_settle(wait=True)  # seeding talks to the order system
        fx = self._fixture()
        account = fx["account"]
        today = timezone.localdate()
        delivery = today + dt.timedelta(days=3)
        requested = today + dt.timedelta(days=7)
        now = timezone.now()
        expires = (now + dt.timedelta(minutes=settings.APPROVAL_DEFAULT_MINUTES)).replace(
            microsecond=0
        )
        order_ids = [f"ORD-E{self.run_id}-{number}-{i}" for i in range(count)]
        orders.seed(
            accounts=[
                {"account_id": account.reference, "name": account.name, "access_active": True}
            ],
            orders=[
                {
                    "order_id": order_id,
                    "account_id": account.reference,
                    "delivery_date": str(delivery),
                }
                for order_id in order_ids
            ],
        )
        seeded = orders.versions(order_ids)
        made: dict[int, str] = {}
        with transaction.atomic():
            for order_id in order_ids:
                case_number = counter_next("case_number")
                tag = f"E{case_number}"  # unique; short enough for AP-{tag} (20)
                case = ready_case_seed(
                    tag=tag,
                    reference=f"BE-{case_number}",
                    number=case_number,
                    account=account,
                    owner=fx["owner"],
                    approver=fx["approver"],
                    now=now,
                )
                key = f"DATE-{case_number}-1"  # the product's operation keys
                approval_reference = f"AP-{counter_next('approval_number')}"
                version = seeded[order_id][0]
                Case.objects.filter(pk=case.pk).update(
                    order_id=order_id,
                    requested_date=requested,
                    last_checked_order_version=version,
                    next_check_at=None,
                )
                Operation.objects.filter(case=case).update(
                    key=key, order_id=order_id, delivery_date=requested
                )
                case.proposals.update(
                    order_id=order_id, delivery_date=requested, evidence_order_version=version
                )
                Approval.objects.filter(proposal__case=case).update(
                    reference=approval_reference,
                    expires_at=expires,
                    grant=grant_issue(
                        operation_key=key,
                        order_id=order_id,
                        delivery_date=requested,
                        approval_id=approval_reference,
                        expires_at=expires,
                    ),
                )
                made[case.pk] = order_id
        self._analyze()
        return made

    def _e2e(
        self, orders: _OrderSystem, made: dict[int, str], number: int, s: dict[str, Series]
    ) -> float:
        """Apply the ``made`` backlog by a real cluster; every order changed exactly once."""
        from cases.models import Case, Status

        versions_before = orders.versions(list(made.values()))
        ids = list(made)
        count = len(ids)
        per_case = not _has_task(APPLY_DUE)
        self._quiet()
        with _qcluster(self.log_dir, f"e2e-{number}", ORDER_SYSTEM_URL=orders.base_url) as process:
            _warm(process)
            time.sleep(1.0)  # the warm-up task's counts flushed (a busy backend: ≤ 1 s)
            idle_start = _counters()
            time.sleep(self.idle_seconds)
            before = _counters()
            orders_before = before.commits.get(self.orders_db, 0)
            queued_before = _ormq_sequence()
            cpu = CpuSplit.start(
                sessions={"workers": process.pid, "order system": orders.process_session()},
                databases={"its PostgreSQL": self.db_name, "the order system's": self.orders_db},
            )
            start = time.perf_counter()
            # The enqueue's transaction, the two reads of the broker's sequence, and the CPU
            # meter's two reads of the backends at the end.
            own = 5
            if per_case:
                _enqueue_many(APPLY, [(pk,) for pk in ids])
                own += 2  # its two reads of the queue
            else:
                from django_q.tasks import async_task

                with transaction.atomic():
                    # Due now (the next-due claim takes them), and the tasks in one commit.
                    Case.objects.filter(pk__in=ids).update(next_check_at=timezone.now())
                    for _ in range(WORKERS):
                        async_task(APPLY_DUE, group="apply_due")
            deadline = time.monotonic() + 180
            while True:
                own += 1
                done = Case.objects.filter(pk__in=ids, status=Status.DONE).count()
                if done == count:
                    break
                if process.poll() is not None:
                    raise Skip(f"the qcluster exited with {process.returncode}")
                if time.monotonic() > deadline:
                    stuck = dict(
                        Case.objects.filter(pk__in=ids)
                        .exclude(status=Status.DONE)
                        .values_list("reference", "status")[:5]
                    )
                    self._quiet()
                    raise Skip(f"{count - done} of {count} cases not done after 180s: {stuck}")
                time.sleep(0.05)
            elapsed = time.perf_counter() - start
            if cpu is not None:
                split = cpu.per_apply_ms(count)
                for label, ms in split.items():
                    s[f"cpu {label}"].add(ms)
                s["cpu all"].add(sum(split.values()))
            stopping = time.perf_counter()
            # Tasks the cluster enqueued itself meanwhile (dispatcher, sweeper's successor).
            queued = _ormq_sequence() - queued_before - (count if per_case else WORKERS)
        # The cluster's processes exited, so their counts are flushed.
        after = _counters()
        window = stopping - before.at  # the cluster ran (and idled) this long in the window
        name = self.db_name
        idle_span = before.at - idle_start.at
        idle_commits = (
            before.commits.get(name, 0) - idle_start.commits.get(name, 0) - self.overhead.commits
        )
        idle_xids = before.xid - idle_start.xid - self.overhead.xids
        idle_rate, idle_write_rate = idle_commits / idle_span, idle_xids / idle_span
        commits = after.commits.get(name, 0) - before.commits.get(name, 0)
        commits -= self.overhead.commits + own
        writes = after.xid - before.xid - self.overhead.xids - 1  # the enqueue wrote
        # Transaction ids are server-wide: other databases' writes take them too. A steady
        # background is in the idle rate; a round where another database wrote more rows
        # than its idle rate, or wrote busily even then, is not clean (reads take no id).
        burst = 0
        for other, value in after.rows.items():
            if other in (name, self.orders_db):
                continue
            delta = value - before.rows.get(other, value)
            idle = before.rows.get(other, value) - idle_start.rows.get(other, value)
            extra = delta - idle / idle_span * window
            if extra > 20 or idle / idle_span > 20:  # a burst, or a background too busy
                burst += max(int(extra), 1)
                self.others_active[other] = self.others_active.get(other, 0) + max(int(delta), 0)
        self._check_orders(orders, made, versions_before)
        self.pending_orders = _PendingOrders(
            before=orders_before, applies=count, own=1, ended=time.perf_counter()
        )
        s["idle_xact"].add(idle_rate)
        s["idle_writes"].add(idle_write_rate)
        s["e2e_xact_raw"].add(commits / count)
        s["e2e_xact"].add((commits - idle_rate * window) / count)
        s["e2e_writes_raw"].add(writes / count)
        s["e2e_writes"].add((writes - idle_write_rate * window) / count)
        # The warmed idle cluster alone writes well under one transaction a second: more in
        # the idle window is another database's (catalog writes of a test run count too).
        self.writes_clean.append(not burst and idle_write_rate <= 5)
        self.stdout.write(
            f"  end-to-end: {count} applies in {elapsed:.1f}s ({self.e2e_mode}; the cluster "
            f"enqueued {queued} more tasks meanwhile), every order changed exactly once"
        )
        self.cluster_enqueued.append(queued)
        return count / elapsed

    def _bare(self, orders: _OrderSystem, count: int, number: int) -> float:
        """The same backlog's writes sent by two ``bare_writes`` tasks (one per worker) of the
        same cluster, with nothing of Holdfast's around them; every order changed once."""
        from approvals.models import Approval

        # Orders of their own (the round's end-to-end run changed its own already); the last
        # run's counts at the order system are settled first.
        made = self._approved_cases(orders, count, f"{number}b")
        rows = Approval.objects.filter(proposal__case_id__in=list(made)).values_list(
            "operation__key",
            "operation__order_id",
            "operation__delivery_date",
            "grant",
            "proposal__evidence_order_version",
        )
        writes = [
            {
                "operation_key": key,
                "order_id": order_id,
                "delivery_date": day.isoformat(),
                "approval_grant": grant,
                "expected_version": version,
                "fencing_token": 1,  # a fresh order has seen none
            }
            for key, order_id, day, grant, version in rows
        ]
        versions_before = orders.versions(list(made.values()))
        self._quiet()
        with _qcluster(self.log_dir, f"bare-{number}", ORDER_SYSTEM_URL=orders.base_url) as process:
            _warm(process)
            cpu = CpuSplit.start(
                sessions={"workers": process.pid, "order system": orders.process_session()},
                databases={"its PostgreSQL": self.db_name, "the order system's": self.orders_db},
            )
            start = time.perf_counter()
            tasks = _enqueue_many(BARE, [(writes[n::WORKERS],) for n in range(WORKERS)])
            _wait_acked(tasks, 180, process)
            elapsed = time.perf_counter() - start
            if cpu is not None:
                split = cpu.per_apply_ms(len(writes))
                self.series["cpu bare order system"].add(
                    split["order system"] + split["the order system's"]
                )
                self.series["cpu bare all"].add(sum(split.values()))
        self._check_orders(orders, made, versions_before)
        return len(writes) / elapsed

    def _orders_settle(self, *, wait: bool) -> None:
        """Read the order system's transactions of the last end-to-end run once its backends
        have flushed their statistics (an idle backend may hold them ``STATS_IDLE_FLUSH``)."""
        pending = self.pending_orders
        if pending is None:
            return
        rest = pending.ended + STATS_IDLE_FLUSH - time.perf_counter()
        if rest > 0 and _backends(self.orders_db):  # none left: every count is flushed
            if not wait:
                return
            time.sleep(rest)
        self.pending_orders = None
        now = _xact_commits().get(self.orders_db, 0)
        self.series["orders_xact"].add((now - pending.before - pending.own) / pending.applies)

    def _multihost(self, module: Any, orders: _OrderSystem, count: int, number: int) -> float:
        """``count`` applies by two worker hosts (``lab.bench.multihost``)."""
        self._orders_settle(wait=True)
        versions: dict[str, tuple[int, int]] = {}

        def make_backlog(n: int) -> dict[int, str]:
            made = self._approved_cases(orders, n, number * 1000 + len(versions))
            versions.update(orders.versions(list(made.values())))
            return made

        def check_orders(made: dict[int, str]) -> None:
            self._check_orders(orders, made, versions)

        self._quiet()
        try:
            return float(
                module.measure_multihost(
                    count=count,
                    orders_base_url=orders.base_url,
                    make_backlog=make_backlog,
                    check_orders=check_orders,
                    log_dir=self.log_dir / f"multihost-{number}",
                    hosts=2,
                )
            )
        except Skip:
            raise
        except Exception as exc:  # HostsUnavailable, or the measurement failed: say why
            raise Skip(f"multi-host: {type(exc).__name__}: {exc}") from exc
        finally:
            self._quiet()

    def _check_orders(
        self, orders: _OrderSystem, made: dict[int, str], before: dict[str, tuple[int, int]]
    ) -> None:
        """Each order changed exactly once, by the order system's own records."""
        after = orders.versions(list(made.values()))
        wrong = [
            f"{order_id}: version {before[order_id][0]}→{after[order_id][0]}, "
            f"{after[order_id][1] - before[order_id][1]} applied operations"
            for order_id in made.values()
            if after[order_id][0] != before[order_id][0] + 1
            or after[order_id][1] != before[order_id][1] + 1
        ]
        if wrong:
            raise Skip(f"{len(wrong)} orders not changed exactly once: {wrong[:3]}")


class _OrderSystem:
    """``python -m orders serve`` on its own database (``<bench database>_orders``), as deployed:
    fault injection and the testing endpoints off (with them on, every request reads the fault
    rules first: one more transaction a request at the order system). Its rows are seeded by
    its own ``seed_data`` command."""

    def __init__(self, log_dir: Path, database: str) -> None:
        self.database = database
        self.log_path = log_dir / "order-system.log"
        self.base_url = ""
        self.process: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}

    def start(self) -> _OrderSystem:
        _recreate_database(self.database)
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "orders.settings",
            "ORDERS_DATABASE_URL": _database_url(self.database),
            "ORDERS_FAULTS_ENABLED": "0",
            # As deployed: without Django's debug query log (on by default in development).
            "ORDERS_DEBUG": "0",
            "APPROVAL_GRANT_KEY": settings.APPROVAL_GRANT_KEY,
            "ORDER_WEBHOOK_SECRET": settings.ORDER_WEBHOOK_SECRET,
            "ORDERS_API_TOKEN": settings.ORDER_SYSTEM_TOKEN,
            "ORDERS_WEBHOOK_URL": "",
            "PYTHONUNBUFFERED": "1",
        }
        self.env = env
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(  # noqa: S603 - our own interpreter
                [sys.executable, "-m", "orders", "serve", "--host", "127.0.0.1", "--port", "0"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            output = self.log_path.read_text(errors="replace")
            if match := _READY.search(output):
                self.base_url = match.group(1)
                return self
            if self.process.poll() is not None:
                raise RuntimeError(f"the order system exited: {output[-500:]}")
            time.sleep(0.1)
        raise RuntimeError("the order system did not start within 60s")

    def process_session(self) -> int:
        """The session of the server's process (its own: ``start_new_session``)."""
        if self.process is None:
            raise RuntimeError("the order system is not running")
        return self.process.pid

    def seed(self, **body: list[dict[str, Any]]) -> None:
        """Upsert rows through the order system's ``seed_data`` command, on its database."""
        if self.process is None:
            raise RuntimeError("the order system is not running")
        payload = {key: body.get(key, []) for key in ("accounts", "orders", "slots")}
        done = subprocess.run(  # noqa: S603 - our own interpreter
            [sys.executable, "-m", "orders", "seed_data", "-"],
            cwd=ROOT,
            env=self.env,
            input=json.dumps(payload).encode(),
            capture_output=True,
            check=False,
        )
        if done.returncode:
            raise RuntimeError(f"seeding the order system failed: {done.stderr.decode()[-500:]}")

    def versions(self, order_ids: list[str]) -> dict[str, tuple[int, int]]:
        """(version, applied operations) per order, from the order system's own database."""
        with psycopg.connect(_conninfo(self.database)) as conn:
            rows = conn.execute(
                "SELECT o.order_id, o.version, count(a.id) FROM orders_order o "
                "LEFT JOIN orders_appliedoperation a ON a.order_id = o.order_id "
                "WHERE o.order_id = ANY(%s) GROUP BY o.order_id, o.version",
                (order_ids,),
            ).fetchall()
        found = {row[0]: (int(row[1]), int(row[2])) for row in rows}
        missing = set(order_ids) - set(found)
        if missing:
            raise Skip(f"orders missing in the order system: {sorted(missing)[:3]}")
        return found

    def stop(self) -> None:
        if self.process is not None:
            _stop(self.process)
            self.process = None
