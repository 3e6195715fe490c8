"""Measure Holdfast's hot paths against the ceilings of the machine (``make bench``).

    make bench                                   # BENCH_DATABASE_URL, default bench_holdfast
    make bench BENCH_ARGS="--rounds 5 --cases 500"

Measurement only: nothing here changes how Holdfast works. On PostgreSQL only (the numbers are
meant for PostgreSQL; SQLite is refused), on a database whose name starts with ``bench``: it
writes real rows there (cases, attempts, django-q2 tasks) and leaves the claimed cases
neutralised (no lease, no due time) so later rounds and later runs are not disturbed.

Each round runs every measurement once, in turn (interleaved rounds: a slow moment of the shared
machine spreads over all of them); each line prints the median of the rounds with [min–max], and
each comparison ends with the ratio of the medians.

- pgbench's ceiling: ``pgbench -i -s 1`` then ``pgbench -N -T 5`` with 1 and 4 clients on a
  scratch database ``bench_pgbench``.
- raw SQL ``FOR UPDATE SKIP LOCKED``: claims of N ready rows of a scratch table, one transaction
  per claim, 1 and 4 client threads (psycopg, no Django).
- Holdfast's claim: ``reconciliation.claims.case_claim`` on N ready cases, sequentially; queries
  per claim (``CaptureQueriesContext``) and commits per claim (``pg_stat_database.xact_commit``).
- django-q2: N no-op tasks (``reconciliation.bench_tasks.noop``) through the ORM broker, run by a
  real ``qcluster`` subprocess with ``Q_WORKERS=2``.
- End-to-end safe apply: N approved cases applied by a real ``qcluster`` (``Q_WORKERS=2``) against
  the reference order system (``python -m orders serve``) on its own database ``bench_orders``;
  checked against the order system's own records (each order changed exactly once).
"""

from __future__ import annotations

import contextlib
import datetime as dt
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
from collections import deque
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
NOOP = "reconciliation.bench_tasks.noop"
APPLY = "reconciliation.tasks.apply_case"
PGBENCH_CANDIDATES = ("/usr/lib/postgresql/15/bin/pgbench", "pgbench")
PGBENCH_DB = "bench_pgbench"
ORDERS_DB = "bench_orders"
_TPS = re.compile(r"^tps = ([0-9.]+)", re.MULTILINE)
_READY = re.compile(r"Order system: (http://[^\s/]+)/")


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


def _run_id() -> str:
    return uuid.uuid4().hex[:8]


# --- connections ----------------------------------------------------------------------------


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


def _xact_commit() -> int:
    """Committed transactions of this database so far, this backend's own ones flushed first.

    Other backends flush their counts at most once a second while busy and when they exit."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def _reading_overhead() -> int:
    """The commits that one ``_xact_commit`` reading itself adds."""
    first = _xact_commit()
    return _xact_commit() - first


# --- subprocesses ---------------------------------------------------------------------------


def _child_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **extra}
    env.pop("REDIS_URL", None)  # the ORM broker on the same database
    env["DATABASE_URL"] = _database_url(settings.DATABASES["default"]["NAME"])
    env["HOLDFAST_STATE_DIR"] = str(settings.HOLDFAST_STATE_DIR)
    return env


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM once (django-q2 mishandles a second signal), then the rest of its session."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=15)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


@contextlib.contextmanager
def _qcluster(log_dir: Path, name: str, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    log_path = log_dir / f"qcluster-{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and manage.py
            [sys.executable, "manage.py", "qcluster"],
            cwd=ROOT,
            env=_child_env(Q_WORKERS="2", **env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        _stop(process)


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


class Command(BaseCommand):
    help = "Measure claims, tasks and applies against pgbench and raw SQL (PostgreSQL)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
        parser.add_argument(
            "--cases", type=int, default=200, help="claims / no-op tasks per round (200)"
        )
        parser.add_argument(
            "--raw-rows", type=int, default=2000, help="raw SKIP LOCKED claims per round (2000)"
        )
        parser.add_argument(
            "--apply-cases", type=int, default=20, help="end-to-end applies per round (20)"
        )
        parser.add_argument("--pgbench-seconds", type=int, default=5, help="pgbench -T per run (5)")
        parser.add_argument("--skip-e2e", action="store_true", help="no end-to-end applies")

    def handle(self, *args: Any, **options: Any) -> None:
        if connection.vendor != "postgresql":
            raise CommandError(
                f"bench measures PostgreSQL only; this database is {connection.vendor}. Run "
                "`make bench` (BENCH_DATABASE_URL, default "
                "postgres://postgres@127.0.0.1:5432/bench_holdfast) or set DATABASE_URL to a "
                "PostgreSQL database named bench_*."
            )
        name = settings.DATABASES["default"]["NAME"]
        if not str(name).startswith("bench"):
            raise CommandError(
                f"bench writes real rows: it runs only on a database named bench_*, not {name!r}."
            )
        if "orm" not in settings.Q_CLUSTER:
            raise CommandError("bench measures the ORM broker: unset REDIS_URL.")
        rounds: int = options["rounds"]
        cases: int = options["cases"]
        if rounds < 1 or cases < 1 or options["raw_rows"] < 1 or options["apply_cases"] < 1:
            raise CommandError("--rounds, --cases, --raw-rows and --apply-cases must be positive.")
        self.run_id = _run_id()
        for noisy in ("django-q", "httpx"):  # one line per enqueue, per request
            logging.getLogger(noisy).setLevel(logging.WARNING)
        self.log_dir = ROOT / "var" / "bench"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # Restore detection remembers this database's epoch outside it: keep the bench's own.
        settings.HOLDFAST_STATE_DIR = str(self.log_dir / f"state-{name}")
        started = time.perf_counter()
        self.stdout.write(
            f"bench on {name} (run {self.run_id}): {rounds} rounds, {cases} claims and no-op "
            f"tasks, {options['raw_rows']} raw claims, {options['apply_cases']} applies per round"
        )
        self.stdout.flush()

        s: dict[str, Series] = {
            "pg1": Series("tps"),
            "pg4": Series("tps"),
            "raw1": Series("claims/s"),
            "raw4": Series("claims/s"),
            "claim": Series("claims/s"),
            "queries": Series("queries"),
            "commits": Series("commits"),
            "noop": Series("tasks/s"),
            "e2e": Series("applies/s"),
            "e2e_xact": Series("transactions"),
        }
        pgbench = self._pgbench_binary()
        if pgbench is None:
            s["pg1"].skipped = s["pg4"].skipped = "no pgbench binary found"
        else:
            self._attempt(s["pg1"], lambda: self._pgbench_init(pgbench))
        orders: _OrderSystem | None = None
        if options["skip_e2e"]:
            s["e2e"].skipped = "--skip-e2e"
        else:
            try:
                orders = _OrderSystem(self.log_dir).start()
                self._e2e_setup(orders)
            except (Skip, RuntimeError, httpx.HTTPError, CommandError, AssertionError) as exc:
                s["e2e"].skipped = f"order system not usable: {exc}"
                if orders is not None:
                    orders.stop()
                orders = None
        try:
            for number in range(1, rounds + 1):
                self.stdout.write(f"round {number}/{rounds}…")
                self.stdout.flush()
                if pgbench is not None and not s["pg1"].skipped:
                    seconds = options["pgbench_seconds"]
                    self._attempt(s["pg1"], partial(self._pgbench, pgbench, 1, seconds))
                    self._attempt(s["pg4"], partial(self._pgbench, pgbench, 4, seconds))
                self._attempt(s["raw1"], lambda: self._raw_claims(options["raw_rows"], 1))
                self._attempt(s["raw4"], lambda: self._raw_claims(options["raw_rows"], 4))
                self._attempt(s["claim"], lambda: self._claims(cases, s))
                self._attempt(s["noop"], partial(self._noop, cases, number))
                if orders is not None and not s["e2e"].skipped:
                    self._attempt(
                        s["e2e"], partial(self._e2e, orders, options["apply_cases"], number, s)
                    )
        finally:
            if orders is not None:
                orders.stop()
                _drop_database(ORDERS_DB)
            if pgbench is not None:
                with contextlib.suppress(psycopg.Error):
                    _drop_database(PGBENCH_DB)
        self._report(s, time.perf_counter() - started)

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

    # --- report ---------------------------------------------------------------------------

    def _report(self, s: dict[str, Series], elapsed: float) -> None:
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
            f"claim / raw SQL SKIP LOCKED: {s['claim'].text()} (Holdfast case_claim, "
            f"sequential) vs {s['raw1'].text()} (1 thread) … {_ratio(s['claim'], s['raw1'])}"
        )
        w(f"claim queries per claim: {s['queries'].text(1)} (goal ≤ 4)")
        w(f"commits per claim: {s['commits'].text(2)} (goal 1)")
        w(
            f"django-q2 no-op (ORM broker, 2 workers) / raw SQL SKIP LOCKED 1 thread: "
            f"{s['noop'].text(1)} vs {s['raw1'].text()} … {_ratio(s['noop'], s['raw1'])}"
        )
        if s["e2e"].values:
            w(
                f"end-to-end safe apply / django-q2 no-op: {s['e2e'].text(1)} vs "
                f"{s['noop'].text(1)} … {_ratio(s['e2e'], s['noop'])}"
            )
            w(
                f"transactions per apply: {s['e2e_xact'].text(1)} (goal ≤ 6; includes the "
                "cluster's broker polling and sweeper during the run)"
            )
        else:
            w(f"end-to-end safe apply: not measured yet ({s['e2e'].skipped or 'no value'})")
        w("list pages: not measured yet (10k and 1M cases)")
        w(f"bench took {elapsed:.0f}s; logs in {self.log_dir}")

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
            _recreate_database(PGBENCH_DB)
        except psycopg.Error as exc:
            raise Skip(f"cannot create {PGBENCH_DB}: {exc}") from exc
        result = subprocess.run(  # noqa: S603 - the pgbench binary found above
            [binary, "-i", "-s", "1", "-q", PGBENCH_DB],
            env=self._pgbench_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise Skip(f"pgbench -i failed: {result.stderr.strip()[-300:]}")

    def _pgbench(self, binary: str, clients: int, seconds: int) -> float:
        result = subprocess.run(  # noqa: S603 - the pgbench binary found above
            [binary, "-N", "-c", str(clients), "-j", str(clients), "-T", str(seconds), PGBENCH_DB],
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

    # --- Holdfast's claim -----------------------------------------------------------------

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
        OrderSystemProfile.objects.create(
            base_url=settings.ORDER_SYSTEM_URL.rstrip("/"),
            sandbox_order_id="ORD-BENCH",
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
        self._fixture_rows: dict[str, Any] = {
            "owner": owner,
            "approver": approver,
            "team": team,
            "account": account,
            "next": 0,
        }
        return self._fixture_rows

    def _ready_cases(self, count: int) -> list[int]:
        """``count`` ready cases with an approved proposal, made as the old ``benchmark`` makes
        them (rows written directly: this is what a claim reads)."""
        from cases.fencing import counter_next
        from reconciliation.management.seeding import ready_case_seed

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
        overhead = _reading_overhead()
        before = _xact_commit()
        start = time.perf_counter()
        for pk in timed:
            case_claim(case_id=pk, worker=worker)
        elapsed = time.perf_counter() - start
        commits = _xact_commit() - before - overhead
        # With DEBUG the log is a deque of 9000: once full, the context's slice is wrong.
        connection.queries_log.clear()
        with CaptureQueriesContext(connection) as queries:
            for pk in counted:
                case_claim(case_id=pk, worker=worker)
        self._neutralise(ids)
        s["queries"].add(len(queries.captured_queries) / sample)
        s["commits"].add(commits / count)
        return count / elapsed

    # --- django-q2 no-op ------------------------------------------------------------------

    def _noop(self, count: int, number: int) -> float:
        with _qcluster(self.log_dir, f"noop-{number}") as process:
            _warm(process)
            start = time.perf_counter()
            rows = _enqueue_many(NOOP, [() for _ in range(count)])
            _wait_acked(rows, 120, process)
            elapsed = time.perf_counter() - start
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

    def _approved_cases(self, orders: _OrderSystem, count: int, number: int) -> dict[int, str]:
        """``count`` cases taken from intake to ready through the real services and the live
        order system (as ``tests/support/fixtures.approved_case``); their enqueues are held
        back (``run_in_process``) so that nothing runs before the clock starts."""
        from approvals.models import Proposal
        from approvals.services import proposal_approve
        from cases.kernel import SYSTEM
        from cases.models import Case, Status
        from cases.scheduling import run_in_process
        from cases.services import case_intake
        from reconciliation.sources import source_check
        from reconciliation.tasks import prepare_proposal

        fx = self._fixture()
        account = fx["account"]
        approver = fx["approver"]
        if not approver.groups.filter(name="approver").exists():
            from django.contrib.auth.models import Group

            approver.groups.add(Group.objects.get(name="approver"))
            fx["team"].members.add(approver, fx["owner"])
        today = timezone.localdate()
        order_ids = [f"ORD-E{self.run_id}-{number}-{i}" for i in range(count)]
        orders.seed(
            accounts=[
                {"account_id": account.reference, "name": account.name, "access_active": True}
            ],
            orders=[
                {
                    "order_id": order_id,
                    "account_id": account.reference,
                    "delivery_date": str(today + dt.timedelta(days=3)),
                }
                for order_id in order_ids
            ],
        )
        held: deque[tuple[str, tuple]] = deque()
        run_in_process(held)
        made: dict[int, str] = {}
        try:
            for order_id in order_ids:
                case, _ = case_intake(
                    actor=SYSTEM,
                    account=account,
                    request_key=f"e2e-{order_id}",
                    order_id=order_id,
                    requested_date=today + dt.timedelta(days=7),
                )
                checked = source_check(case_id=case.pk)
                if checked != "checked":
                    raise Skip(f"source_check said {checked!r}")
                submitted = prepare_proposal(case.pk)
                if submitted != "submitted":
                    raise Skip(f"prepare_proposal said {submitted!r}")
                proposal = Proposal.objects.get(case=case, status=Proposal.Status.AWAITING_REVIEW)
                proposal_approve(proposal=proposal, actor=approver)
                case.refresh_from_db()
                if case.status != Status.READY:
                    raise Skip(f"an approved case is {case.status}, not ready")
                made[case.pk] = order_id
        finally:
            run_in_process(None)
        # The dispatcher would otherwise start them during the cluster's start-up.
        Case.objects.filter(pk__in=list(made)).update(next_check_at=None)
        return made

    def _e2e(self, orders: _OrderSystem, count: int, number: int, s: dict[str, Series]) -> float:
        from cases.models import Case, Status

        made = self._approved_cases(orders, count, number)
        versions_before = orders.versions(list(made.values()))
        ids = list(made)
        with _qcluster(self.log_dir, f"e2e-{number}", ORDER_SYSTEM_URL=orders.base_url) as process:
            _warm(process)
            overhead = _reading_overhead()
            before = _xact_commit()
            start = time.perf_counter()
            _enqueue_many(APPLY, [(pk,) for pk in ids])
            deadline = time.monotonic() + 180
            polls = 0
            while True:
                polls += 1
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
                    raise Skip(f"{count - done} of {count} cases not done after 180s: {stuck}")
                time.sleep(0.05)
            elapsed = time.perf_counter() - start
        # The cluster's processes exited, so their counts are flushed.
        commits = _xact_commit() - before - overhead - polls - 1  # our polls and the enqueue
        self._check_orders(orders, made, versions_before)
        s["e2e_xact"].add(commits / count)
        return count / elapsed

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
    """``python -m orders serve`` on its own database ``bench_orders``, test endpoints on."""

    def __init__(self, log_dir: Path) -> None:
        self.log_path = log_dir / "order-system.log"
        self.base_url = ""
        self.process: subprocess.Popen[bytes] | None = None
        self.client: httpx.Client | None = None

    def start(self) -> _OrderSystem:
        _recreate_database(ORDERS_DB)
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "orders.settings",
            "ORDERS_DATABASE_URL": _database_url(ORDERS_DB),
            "ORDERS_FAULTS_ENABLED": "1",  # /_testing/seed
            "APPROVAL_GRANT_KEY": settings.APPROVAL_GRANT_KEY,
            "ORDER_WEBHOOK_SECRET": settings.ORDER_WEBHOOK_SECRET,
            "ORDERS_API_TOKEN": settings.ORDER_SYSTEM_TOKEN,
            "ORDERS_WEBHOOK_URL": "",
            "PYTHONUNBUFFERED": "1",
        }
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
                self.client = httpx.Client(
                    base_url=self.base_url,
                    timeout=10,
                    headers={"Authorization": f"Bearer {settings.ORDER_SYSTEM_TOKEN}"},
                )
                return self
            if self.process.poll() is not None:
                raise RuntimeError(f"the order system exited: {output[-500:]}")
            time.sleep(0.1)
        raise RuntimeError("the order system did not start within 60s")

    def seed(self, **body: list[dict[str, Any]]) -> None:
        if self.client is None:
            raise RuntimeError("the order system is not running")
        payload = {key: body.get(key, []) for key in ("accounts", "orders", "slots")}
        self.client.post("/_testing/seed", json=payload).raise_for_status()

    def versions(self, order_ids: list[str]) -> dict[str, tuple[int, int]]:
        """(version, applied operations) per order, from the order system's own database."""
        with psycopg.connect(_conninfo(ORDERS_DB)) as conn:
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
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.process is not None:
            _stop(self.process)
            self.process = None
