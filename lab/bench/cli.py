"""``manage.py bench_hot_paths`` (``make bench``): its options, its checks, and its rounds.

Each round runs every measurement once, in turn (interleaved rounds: a slow moment of the shared
machine spreads over all of them): the anchors (``lab.bench.anchors``), the claims
(``lab.bench.claims``), the end-to-end applies and bare writes (``lab.bench.end_to_end``), the
no-op tasks, the worker hosts (``lab.bench.multihost``); after the rounds, the list pages
(``lab.bench.lists``). Then the report (``lab.bench.report``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx
import psycopg
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from lab.bench import anchors, claims, cluster, end_to_end
from lab.bench.cluster import ROOT
from lab.bench.context import Run
from lab.bench.deployed_orders import DeployedOrderSystem
from lab.bench.goals import ListsOutcome
from lab.bench.machine import Machine
from lab.bench.mailsink import MailSink
from lab.bench.postgres import drop_database, reading_overhead
from lab.bench.report import report
from lab.bench.seeding import E2E_KINDS, analyze, quiet
from lab.bench.series import Series, Skip, optional_module

LISTS = "lab.bench.lists"
LOAD_SERIES = ("load_admin_p95", "load_api_p95", "load_errors", "load_e2e")
COUNTS = ("rounds", "cases", "noop_tasks", "raw_rows", "apply_cases", "approve_cases")


def add_arguments(parser: CommandParser) -> None:
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    parser.add_argument(
        "--cases", type=int, default=150, help="claims of each kind per round (150)"
    )
    parser.add_argument(
        "--noop-tasks", type=int, default=400, help="django-q2 no-op tasks per round (400)"
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
    parser.add_argument(
        "--e2e-kinds",
        default=",".join(E2E_KINDS),
        help="change kinds the end-to-end backlogs take in turn, comma separated "
        f"({','.join(E2E_KINDS)})",
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
    parser.add_argument("--skip-multihost", action="store_true", help="no multi-host end-to-end")
    parser.add_argument(
        "--approve-cases",
        type=int,
        default=30,
        help="approvals one at a time per round, workers idle before each (30): approve → done",
    )
    parser.add_argument(
        "--memory-applies",
        type=int,
        default=0,
        help="goal 8, opt-in: applies by one cluster whose workers' RSS is read after the "
        "first tenth and at the end (10000 for the goal; 0: not measured)",
    )
    parser.add_argument(
        "--load",
        action="store_true",
        help="goal 7, opt-in: 20 users on gunicorn while workers apply (needs locust)",
    )
    parser.add_argument(
        "--multihost-cases",
        type=int,
        default=0,
        help="applies per multi-host round (default: --apply-cases)",
    )


def bench_database() -> str:
    """The name of this database, if the bench may write to it; else refuse."""
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
    return name


def list_sizes(options: dict[str, Any]) -> tuple[int, ...]:
    """The checked counts and list sizes of the options; the list sizes."""
    if any(options[name] < 1 for name in COUNTS):
        raise CommandError(
            "--rounds, --cases, --noop-tasks, --raw-rows, --apply-cases and --approve-cases "
            "must be positive."
        )
    try:
        sizes = tuple(int(size) for size in options["list_sizes"].split(",") if size)
    except ValueError:
        raise CommandError("--list-sizes: comma-separated case counts") from None
    if len(sizes) < 2:
        raise CommandError("--list-sizes needs at least two sizes (e.g. 10000,1000000).")
    return sizes


def e2e_kinds(options: dict[str, Any]) -> tuple[str, ...]:
    """The checked ``--e2e-kinds``."""
    chosen = tuple(code.strip() for code in options["e2e_kinds"].split(",") if code.strip())
    unknown = [code for code in chosen if code not in E2E_KINDS]
    if not chosen or unknown:
        raise CommandError(f"--e2e-kinds: some of {', '.join(E2E_KINDS)} (not {unknown})")
    return chosen


def start_run(out: Any, name: str, options: dict[str, Any]) -> Run:
    """Print what the run measures, then take the readings' own cost and quiet the database."""
    run_id = uuid.uuid4().hex[:8]
    machine = Machine.now()  # before this run adds its own load
    for noisy in ("django-q", "httpx"):  # one line per enqueue, per request
        logging.getLogger(noisy).setLevel(logging.WARNING)
    log_dir = ROOT / "var" / "bench" / name
    log_dir.mkdir(parents=True, exist_ok=True)
    # Restore detection remembers this database's epoch outside it: keep the bench's own.
    settings.HOLDFAST_STATE_DIR = str(log_dir / "state")
    kinds_in_turn = e2e_kinds(options)
    mode = f"{end_to_end.mode()}; kinds in turn: {', '.join(kinds_in_turn)}"
    out.write(
        f"bench on {name} (run {run_id}): {options['rounds']} rounds, {options['cases']} "
        f"claims, {options['noop_tasks']} no-op tasks, {options['raw_rows']} raw claims, "
        f"{options['apply_cases']} applies per round"
        f" ({mode}); pgbench -T {options['pgbench_seconds']}"
    )
    out.flush()
    run = Run(
        db_name=name,
        run_id=run_id,
        log_dir=log_dir,
        idle_seconds=max(0.5, options["idle_seconds"]),
        e2e_mode=mode,
        out=out,
        overhead=reading_overhead(),
        e2e_kinds=kinds_in_turn,
        machine=machine,
    )
    quiet()
    analyze()
    return run


@dataclass
class Bench:
    """What a run measures with: pgbench (if found), the order system (unless skipped or
    unusable), the multi-host module (unless skipped); each absence marks its series."""

    run: Run
    options: dict[str, Any]
    pgbench: str | None = None
    orders: DeployedOrderSystem | None = None
    mail: MailSink | None = None
    multihost: Any | None = None
    lists: ListsOutcome = field(default_factory=lambda: ListsOutcome([], None, "no value"))

    def prepare(self) -> None:
        s, options = self.run.series, self.options
        self.pgbench = anchors.pgbench_binary()
        if self.pgbench is None:
            s["pg1"].skipped = s["pg4"].skipped = "no pgbench binary found"
        else:
            self.run.attempt(s["pg1"], partial(anchors.pgbench_init, self.run, self.pgbench))
            s["pg4"].skipped = s["pg1"].skipped
        if claims.next_due_claimer() is None:
            s["next"].skipped = "reconciliation.claims.claim_next_due does not exist"
        if options["skip_multihost"]:
            s["multi"].skipped = "--skip-multihost"
        else:
            self.multihost = optional_module(end_to_end.MULTIHOST)
            if self.multihost is None:
                s["multi"].skipped = f"{end_to_end.MULTIHOST} does not exist"
        self._opt_in(s, options)
        if options["skip_e2e"]:
            for name in ("e2e", "bare", "dbos", "approve_p50", "approve_p99", "rss_1k"):
                s[name].skipped = s[name].skipped or "--skip-e2e"
            s["multi"].skipped = s["multi"].skipped or "--skip-e2e"
        else:
            self.orders = self._start_orders()
            self.mail = MailSink().start()
            cluster.MAIL_ENV.update(self.mail.env())
            self.run.mail = self.mail

    @staticmethod
    def _opt_in(s: dict[str, Series], options: dict[str, Any]) -> None:
        """The measurements a run makes only when asked, and the one that needs DBOS."""
        if importlib.util.find_spec("dbos") is None:
            s["dbos"].skipped = "DBOS Transact not installed (pip install '.[bench]')"
        if not options["memory_applies"]:
            s[
                "rss_1k"
            ].skipped = "opt-in: --memory-applies 10000 (a cluster applies 10k cases; minutes)"
        if not options["load"]:
            for name in LOAD_SERIES:
                s[name].skipped = "opt-in: --load (locust, gunicorn, 1M cases)"
        elif importlib.util.find_spec("locust") is None:
            for name in LOAD_SERIES:
                s[name].skipped = "--load: locust not installed (pip install '.[bench]')"

    def _start_orders(self) -> DeployedOrderSystem | None:
        s = self.run.series
        orders = None
        try:
            orders = DeployedOrderSystem(self.run.log_dir, self.run.orders_db).start()
            end_to_end.setup(orders)
        except (Skip, RuntimeError, httpx.HTTPError, CommandError, AssertionError) as exc:
            s["e2e"].skipped = f"order system not usable: {exc}"
            s["multi"].skipped = s["multi"].skipped or s["e2e"].skipped
            if orders is not None:
                orders.stop()
            return None
        return orders

    def measure(self, sizes: tuple[int, ...]) -> None:
        """Every round, then the list pages; the scratch databases are dropped whatever
        happens."""
        rounds = self.options["rounds"]
        try:
            for number in range(1, rounds + 1):
                self.run.write(f"round {number}/{rounds}…")
                self.run.out.flush()
                Round(self, number).measure()
            if self.orders is not None:
                self._memory()
                end_to_end.orders_settle(self.run, wait=True)
            self.lists = self._list_pages(sizes)
            self._load(sizes)
        finally:
            if self.mail is not None:
                self.mail.stop()
                cluster.MAIL_ENV.clear()
            if self.orders is not None:
                self.orders.stop()
                drop_database(self.run.orders_db)
            if self.pgbench is not None:
                with contextlib.suppress(psycopg.Error):
                    drop_database(self.run.pgbench_db)

    def _memory(self) -> None:
        """Goal 8 (opt-in): one cluster's workers' RSS after a tenth of the applies and after
        all of them."""
        count, s = self.options["memory_applies"], self.run.series
        if not count or s["rss_1k"].skipped or self.orders is None:
            return
        self.run.write(f"memory: {count} applies by one cluster…")
        self.run.out.flush()
        self.run.attempt(
            s["rss_1k"], partial(end_to_end.worker_memory, self.run, self.orders, count)
        )

    def _load(self, sizes: tuple[int, ...]) -> None:
        """Goal 7 (opt-in): twenty users on gunicorn over the largest list database while a
        cluster applies (``lab.bench.load``)."""
        s, load = self.run.series, optional_module("lab.bench.load")
        if s["load_admin_p95"].skipped or load is None:
            return
        if self.orders is None:
            for name in LOAD_SERIES:
                s[name].skipped = s[name].skipped or "no order system (the cluster's applies)"
            return
        lists = optional_module(LISTS)
        if lists is None or self.options["skip_lists"]:
            for name in LOAD_SERIES:
                s[name].skipped = "--load needs the list pages' databases (not --skip-lists)"
            return
        database = lists.database_name_for(max(sizes))
        self.run.write(f"load: {load.USERS} users for {load.SECONDS} s on {database}…")
        self.run.out.flush()
        try:
            summary, rate = load.measure(
                self.run, self.orders, database, self.options["apply_cases"]
            )
        except Skip as exc:
            for name in LOAD_SERIES:
                s[name].skipped = f"load run failed: {exc}"
            return
        s["load_admin_p95"].add(summary.admin_p95_ms)
        s["load_api_p95"].add(summary.api_p95_ms)
        s["load_errors"].add(float(summary.errors))
        s["load_e2e"].add(rate)

    def _list_pages(self, sizes: tuple[int, ...]) -> ListsOutcome:
        if self.options["skip_lists"]:
            return ListsOutcome([], None, "--skip-lists")
        lists = optional_module(LISTS)
        if lists is None:
            return ListsOutcome([], None, f"{LISTS} does not exist")
        began = time.perf_counter()
        try:
            lines, met, worst = lists.measure_list_pages(
                rounds=self.options["rounds"], sizes=sizes, progress=self.run.write
            )
            found = ListsOutcome(lines, met, "", worst)
        except Exception as exc:  # noqa: BLE001 - reported, the rest still prints
            found = ListsOutcome([], None, f"failed: {exc!r}")
        self.run.write(f"  list pages {time.perf_counter() - began:.0f}s")
        return found


class Round:
    """One round: every measurement once, in turn, and one line of what each took."""

    def __init__(self, bench: Bench, number: int) -> None:
        self.bench, self.run, self.number = bench, bench.run, number
        self.options = bench.options
        self.timings: list[str] = []

    def timed(self, label: str, series: Series, measure: Callable[[], float | None]) -> None:
        began, measured = time.perf_counter(), len(series.values)
        self.run.attempt(series, measure)
        value = f" {series.values[-1]:,.1f} {series.unit}" if len(series.values) > measured else ""
        self.timings.append(f"{label}{value} in {time.perf_counter() - began:.0f}s")

    def measure(self) -> None:
        s, options, run = self.run.series, self.options, self.run
        self.anchors()
        backlog = self.backlog()
        self.timed("claim", s["claim"], partial(claims.claims_by_id, run, options["cases"]))
        self.timed(
            "next-due claim", s["next"], partial(claims.claims_next_due, run, options["cases"])
        )
        e2e_before, noop_before = len(s["e2e"].values), len(s["noop"].values)
        if backlog is not None:
            self.timed(
                "no-op before",
                s["cpu noop before"],
                partial(anchors.noop_cpu, run, options["noop_tasks"], self.number),
            )
        self.end_to_end(backlog)
        # After the end-to-end run: the order system's backends flush meanwhile.
        self.timed(
            "no-op",
            s["noop"],
            partial(anchors.noop_tasks, run, options["noop_tasks"], self.number),
        )
        if len(s["e2e"].values) > e2e_before and len(s["noop"].values) > noop_before:
            s["e2e_vs_noop"].add(s["e2e"].values[-1] / s["noop"].values[-1])
        self.multihost()
        run.write(f"  {'; '.join(self.timings)}")
        run.out.flush()

    def anchors(self) -> None:
        s, options, pgbench = self.run.series, self.options, self.bench.pgbench
        if pgbench is not None and not s["pg1"].skipped:
            seconds = options["pgbench_seconds"]
            self.timed("pgbench", s["pg1"], partial(anchors.pgbench, self.run, pgbench, 1, seconds))
            self.run.attempt(s["pg4"], partial(anchors.pgbench, self.run, pgbench, 4, seconds))
        rows = options["raw_rows"]
        self.timed("raw", s["raw1"], partial(anchors.raw_claims, rows, 1))
        self.run.attempt(s["raw4"], partial(anchors.raw_claims, rows, 4))
        self.run.attempt(s["raw1_async"], partial(anchors.raw_claims, rows, 1, asynchronous=True))

    def backlog(self) -> dict[int, str] | None:
        """The round's approved cases for the end-to-end run. Seeded early: the order system's
        statistics of the seeding are flushed (idle backends: within STATS_IDLE_FLUSH) before
        the run's first reading."""
        s, orders = self.run.series, self.bench.orders
        if orders is None or s["e2e"].skipped:
            return None
        try:
            return end_to_end.approved_cases(
                self.run, orders, self.options["apply_cases"], self.number
            )
        except Skip as exc:
            s["e2e"].skipped = f"seeding failed: {exc}"
            return None

    def end_to_end(self, backlog: dict[int, str] | None) -> None:
        s, orders, run = self.run.series, self.bench.orders, self.run
        if orders is None or backlog is None:
            return
        self.timed(
            "end-to-end",
            s["e2e"],
            partial(end_to_end.apply_backlog, run, orders, backlog, self.number),
        )
        self.timed(
            "bare writes",
            s["bare"],
            partial(end_to_end.bare_writes, run, orders, self.options["apply_cases"], self.number),
        )
        self.timed(
            "DBOS",
            s["dbos"],
            partial(end_to_end.dbos_writes, run, orders, self.options["apply_cases"], self.number),
        )
        self.timed(
            "approve → done",
            s["approve_p50"],
            partial(
                end_to_end.approve_to_done, run, orders, self.options["approve_cases"], self.number
            ),
        )

    def multihost(self) -> None:
        s, orders, module = self.run.series, self.bench.orders, self.bench.multihost
        if orders is None or s["multi"].skipped or module is None:
            return
        count = self.options["multihost_cases"] or self.options["apply_cases"]
        self.timed(
            "multi-host",
            s["multi"],
            partial(end_to_end.multihost_applies, self.run, module, orders, count, self.number),
        )


class Command(BaseCommand):
    help = "Measure claims, tasks and applies against pgbench and raw SQL (PostgreSQL)."

    def add_arguments(self, parser: CommandParser) -> None:
        add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        name = bench_database()
        sizes = list_sizes(options)
        started = time.perf_counter()
        run = start_run(self.stdout, name, options)
        bench = Bench(run, options)
        bench.prepare()
        bench.measure(sizes)
        report(run, bench.lists, time.perf_counter() - started)
