"""End-to-end safe applies against the reference order system, run as deployed.

- The safe apply: N approved cases applied by a real ``qcluster`` (``lab.bench.cluster``)
  against the order system (``lab.bench.deployed_orders``) on its own database; every order
  checked to have changed exactly once by the order system's own records, and to show its
  case's change. The cases take the run's change kinds in turn (``Run.e2e_kinds``: a delivery
  date, a shipping address, an order cancellation). Enqueued as two
  ``reconciliation.tasks.apply_due`` (one per worker) when that task exists, else one
  ``apply_case`` per case. Before the work, the warmed cluster's idle rate (broker polling,
  sweeper) is measured over a window and subtracted; the raw figure is printed too. Write
  transactions come from the server-wide transaction id counter (only writing transactions get
  one); the order system's from its own database's ``xact_commit``.
- Bare writes: as many fresh approved cases' writes sent by two ``lab.bench.tasks.bare_writes``
  tasks (one per worker) of the same cluster, with nothing of Holdfast's around them (no claim,
  no record): the end-to-end rate's ceiling on the machine.
- Several worker hosts (``lab.bench.multihost``), on the same order system.
"""

from __future__ import annotations

import datetime as dt
import math
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lab.bench.cluster import (
    BARE,
    WORKERS,
    child_env,
    enqueue_many,
    ormq_sequence,
    qcluster,
    wait_acked,
    warm,
)
from lab.bench.context import PendingOrders, Run
from lab.bench.cpu import CLOCK_TICKS, CpuSplit, process_ticks
from lab.bench.deployed_orders import DeployedOrderSystem
from lab.bench.postgres import (
    STATS_IDLE_FLUSH,
    Counters,
    backends,
    counters,
    database_url,
    drop_database,
    recreate_database,
    xact_commits,
)
from lab.bench.seeding import analyze, fixture, kind_change, quiet, ready_case_seed
from lab.bench.series import Skip, has_task

APPLY = "reconciliation.tasks.apply_case"
APPLY_DUE = "reconciliation.tasks.apply_due"
MULTIHOST = "lab.bench.multihost"
DONE_TIMEOUT = 180  # seconds for a backlog to be applied


def mode() -> str:
    return "2 × apply_due (one per worker)" if has_task(APPLY_DUE) else "1 apply_case per case"


def setup(orders: DeployedOrderSystem) -> None:
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


# --- the backlog --------------------------------------------------------------------------


def approved_cases(
    run: Run, orders: DeployedOrderSystem, count: int, number: int | str
) -> dict[int, str]:
    """``count`` ready cases with an approved proposal on fresh orders of the live order
    system, written as rows (as ``seeding.ready_cases``, and as intake → source check → prepare
    → approve leave them) with a real signed grant, so the real claim and apply accept them.
    Nothing is enqueued and nothing is due: nothing runs before the clock starts."""
    orders_settle(run, wait=True)  # seeding talks to the order system
    account = fixture(run)["account"]
    today = timezone.localdate()
    now = timezone.now()
    expires = (now + dt.timedelta(minutes=settings.APPROVAL_DEFAULT_MINUTES)).replace(microsecond=0)
    order_ids = [f"ORD-E{run.run_id}-{number}-{i}" for i in range(count)]
    kinds_in_turn = run.e2e_kinds or ("delivery_date",)
    orders.seed(
        accounts=[{"account_id": account.reference, "name": account.name, "access_active": True}],
        orders=[
            {
                "order_id": order_id,
                "account_id": account.reference,
                "delivery_date": str(today + dt.timedelta(days=3)),
            }
            for order_id in order_ids
        ],
    )
    seeded = orders.versions(order_ids)
    made: dict[int, str] = {}
    when = _Approved(requested=today + dt.timedelta(days=7), now=now, expires=expires)
    with transaction.atomic():
        for i, order_id in enumerate(order_ids):
            kind = kinds_in_turn[i % len(kinds_in_turn)]
            made[_approved_case(run, order_id, seeded[order_id][0], when, kind)] = order_id
    analyze()
    return made


@dataclass(frozen=True)
class _Approved:
    """The backlog's requested date, when its cases were written, when their approvals end."""

    requested: dt.date
    now: dt.datetime
    expires: dt.datetime


def _approved_case(run: Run, order_id: str, version: int, when: _Approved, kind: str) -> int:
    """One approved ready case of change kind ``kind`` on ``order_id`` at ``version``, with
    the product's operation key and a real grant until ``when.expires``; its id."""
    from approvals.grants import grant_issue
    from approvals.models import Approval, Operation
    from cases import kinds
    from cases.append_only import maintenance
    from cases.fencing import counter_next
    from cases.kinds import change_hash
    from cases.models import Case
    from cases.references import case_number_next, operation_key_part

    fx = fixture(run)
    requested, expires = when.requested, when.expires
    team = fx["account"].team
    # The team's number and reference, as intake makes them (a team's prefix is its own).
    case_number, reference = case_number_next(team)
    tag = f"{team.case_prefix}{case_number}"  # unique; short enough for AP-{tag} (20)
    case = ready_case_seed(
        tag=tag,
        reference=reference,
        number=case_number,
        account=fx["account"],
        owner=fx["owner"],
        approver=fx["approver"],
        now=when.now,
    )
    key = f"{kinds.get(kind).key_prefix}-{operation_key_part(case)}-1"  # the product's keys
    approval_reference = f"AP-{counter_next('approval_number')}"
    change = kinds.canonical(kind_change(kind, requested, case_number))
    Case.objects.filter(pk=case.pk).update(
        order_id=order_id,
        kind=kind,
        change=change,
        last_checked_order_version=version,
        next_check_at=None,
    )
    Operation.objects.filter(case=case).update(
        key=key, order_id=order_id, change=change, change_hash=change_hash(change)
    )
    case.proposals.update(order_id=order_id, change=change, evidence_order_version=version)
    # A decided approval never changes (cases.append_only): the seed is the owner's repair.
    with maintenance():
        Approval.objects.filter(proposal__case=case).update(
            reference=approval_reference,
            expires_at=expires,
            grant=grant_issue(
                operation_key=key,
                order_id=order_id,
                change=change,
                approval_id=approval_reference,
                expires_at=expires,
            ),
        )
    return case.pk


# --- the safe apply -----------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """The readings around one end-to-end run: the warmed cluster idle (``idle_start`` to
    ``before``), then at work (``before`` to ``stopping``); ``after`` once it exited."""

    idle_start: Counters
    before: Counters
    after: Counters
    stopping: float

    @property
    def idle_span(self) -> float:
        return self.before.at - self.idle_start.at

    @property
    def span(self) -> float:
        return self.stopping - self.before.at  # the cluster ran (and idled) this long


def _enqueue_backlog(ids: list[int], per_case: bool) -> int:
    """Start the backlog's work; the transactions this takes in Holdfast's database beyond
    the enqueue's own."""
    if per_case:
        enqueue_many(APPLY, [(pk,) for pk in ids])
        return 2  # its two reads of the queue
    from django_q.tasks import async_task

    from cases.models import Case

    with transaction.atomic():
        # Due now (the next-due claim takes them), and the tasks in one commit.
        Case.objects.filter(pk__in=ids).update(next_check_at=timezone.now())
        for _ in range(WORKERS):
            async_task(APPLY_DUE, group="apply_due")
    return 0


def _wait_done(ids: list[int], process: subprocess.Popen[bytes]) -> int:
    """Wait until every case of ``ids`` is done; the reads this took."""
    from cases.models import Case, Status

    count = len(ids)
    deadline = time.monotonic() + DONE_TIMEOUT
    reads = 0
    while True:
        reads += 1
        done = Case.objects.filter(pk__in=ids, status=Status.DONE).count()
        if done == count:
            return reads
        if process.poll() is not None:
            raise Skip(f"the qcluster exited with {process.returncode}")
        if time.monotonic() > deadline:
            stuck = dict(
                Case.objects.filter(pk__in=ids)
                .exclude(status=Status.DONE)
                .values_list("reference", "status")[:5]
            )
            quiet()
            raise Skip(f"{count - done} of {count} cases not done after {DONE_TIMEOUT}s: {stuck}")
        time.sleep(0.05)


def _others_burst(run: Run, window: Window) -> int:
    """Transaction ids are server-wide: other databases' writes take them too. A steady
    background is in the idle rate; a round where another database wrote more rows than its
    idle rate, or wrote busily even then, is not clean (reads take no id). How many rows
    burst beyond that (0: clean); the busy databases are noted on the run."""
    burst = 0
    before, after, idle_start = window.before, window.after, window.idle_start
    for other, value in after.rows.items():
        if other in (run.db_name, run.orders_db):
            continue
        delta = value - before.rows.get(other, value)
        idle = before.rows.get(other, value) - idle_start.rows.get(other, value)
        extra = delta - idle / window.idle_span * window.span
        if extra > 20 or idle / window.idle_span > 20:  # a burst, or a background too busy
            burst += max(int(extra), 1)
            run.others_active[other] = run.others_active.get(other, 0) + max(int(delta), 0)
    return burst


def _add_transactions(run: Run, window: Window, count: int, own: int, burst: int) -> None:
    """Transactions and write commits per apply, raw and idle-corrected; whether the round
    was clean of other databases' bursts."""
    s, name, overhead = run.series, run.db_name, run.overhead
    before, after, idle_start = window.before, window.after, window.idle_start
    idle_commits = before.commits.get(name, 0) - idle_start.commits.get(name, 0) - overhead.commits
    idle_xids = before.xid - idle_start.xid - overhead.xids
    idle_rate, idle_write_rate = idle_commits / window.idle_span, idle_xids / window.idle_span
    commits = after.commits.get(name, 0) - before.commits.get(name, 0)
    commits -= overhead.commits + own
    writes = after.xid - before.xid - overhead.xids - 1  # the enqueue wrote
    s["idle_xact"].add(idle_rate)
    s["idle_writes"].add(idle_write_rate)
    s["e2e_xact_raw"].add(commits / count)
    s["e2e_xact"].add((commits - idle_rate * window.span) / count)
    s["e2e_writes_raw"].add(writes / count)
    s["e2e_writes"].add((writes - idle_write_rate * window.span) / count)
    # The warmed idle cluster alone writes well under one transaction a second: more in
    # the idle window is another database's (catalog writes of a test run count too).
    run.writes_clean.append(not burst and idle_write_rate <= 5)


def apply_backlog(
    run: Run, orders: DeployedOrderSystem, made: dict[int, str], number: int
) -> float:
    """Apply the ``made`` backlog by a real cluster; every order changed exactly once."""
    s = run.series
    versions_before = orders.versions(list(made.values()))
    ids = list(made)
    count = len(ids)
    per_case = not has_task(APPLY_DUE)
    quiet()
    with qcluster(run.log_dir, f"e2e-{number}", ORDER_SYSTEM_URL=orders.base_url) as process:
        warm(process)
        time.sleep(1.0)  # the warm-up task's counts flushed (a busy backend: ≤ 1 s)
        idle_start = counters()
        time.sleep(run.idle_seconds)
        before = counters()
        queued_before = ormq_sequence()
        cpu = CpuSplit.start(
            sessions={"workers": process.pid, "order system": orders.process_session()},
            databases={"its PostgreSQL": run.db_name, "the order system's": run.orders_db},
        )
        start = time.perf_counter()
        # The enqueue's transaction, the two reads of the broker's sequence, and the CPU
        # meter's two reads of the backends at the end; then each read of the cases' states.
        own = 5 + _enqueue_backlog(ids, per_case)
        own += _wait_done(ids, process)
        elapsed = time.perf_counter() - start
        if cpu is not None:
            split = cpu.per_apply_ms(count)
            for label, ms in split.items():
                s[f"cpu {label}"].add(ms)
            s["cpu all"].add(sum(split.values()))
        stopping = time.perf_counter()
        # Tasks the cluster enqueued itself meanwhile (dispatcher, sweeper's successor).
        queued = ormq_sequence() - queued_before - (count if per_case else WORKERS)
    # The cluster's processes exited, so their counts are flushed.
    window = Window(idle_start=idle_start, before=before, after=counters(), stopping=stopping)
    burst = _others_burst(run, window)
    orders.check_changed_once(made, versions_before)
    orders.check_shows(_changes_of(made))
    told = _told_once(run, made)
    run.pending_orders = PendingOrders(
        before=before.commits.get(run.orders_db, 0),
        applies=count,
        own=1,
        ended=time.perf_counter(),
    )
    _add_transactions(run, window, count, own, burst)
    run.write(
        f"  end-to-end: {count} applies ({_kind_counts(made)}) in {elapsed:.1f}s "
        f"({run.e2e_mode}; the cluster enqueued {queued} more tasks meanwhile), every order "
        f"changed exactly once and shows its change{told}"
    )
    run.cluster_enqueued.append(queued)
    return count / elapsed


def _told_once(run: Run, made: dict[int, str]) -> str:
    """Check that the mail server got each case's notification exactly once (by its key);
    the words for the run's line."""
    from approvals.models import Operation
    from reconciliation.apply import notification_key

    if run.mail is None:
        return ""
    operations = Operation.objects.filter(case_id__in=list(made))
    run.mail.told_once([notification_key(operation) for operation in operations])
    return ", and every customer was told once over SMTP"


def _changes_of(made: dict[int, str]) -> dict[str, dict[str, Any]]:
    """Each order of ``made`` and the change its case asked for."""
    from cases.models import Case

    changes = Case.objects.filter(pk__in=list(made)).values_list("pk", "change")
    return {made[pk]: change for pk, change in changes}


def _kind_counts(made: dict[int, str]) -> str:
    from django.db.models import Count

    from cases.models import Case

    counted = (
        Case.objects.filter(pk__in=list(made))
        .values_list("kind")
        .annotate(n=Count("pk"))
        .order_by("kind")
    )
    return ", ".join(f"{n} {kind}" for kind, n in counted)


def orders_settle(run: Run, *, wait: bool) -> None:
    """Read the order system's transactions of the last end-to-end run once its backends
    have flushed their statistics (an idle backend may hold them ``STATS_IDLE_FLUSH``)."""
    pending = run.pending_orders
    if pending is None:
        return
    rest = pending.ended + STATS_IDLE_FLUSH - time.perf_counter()
    if rest > 0 and backends(run.orders_db):  # none left: every count is flushed
        if not wait:
            return
        time.sleep(rest)
    run.pending_orders = None
    now = xact_commits().get(run.orders_db, 0)
    run.series["orders_xact"].add((now - pending.before - pending.own) / pending.applies)


# --- bare writes --------------------------------------------------------------------------


def _writes_of(made: dict[int, str]) -> list[dict[str, Any]]:
    """The order system's write of each case of ``made``, as its apply would send it."""
    from approvals.models import Approval

    rows = Approval.objects.filter(proposal__case_id__in=list(made)).values_list(
        "operation__key",
        "operation__order_id",
        "operation__change",
        "grant",
        "proposal__evidence_order_version",
    )
    return [
        {
            "operation_key": key,
            "order_id": order_id,
            "change": change,
            "approval_grant": grant,
            "expected_version": version,
            "fencing_token": 1,  # a fresh order has seen none
        }
        for key, order_id, change, grant, version in rows
    ]


def bare_writes(run: Run, orders: DeployedOrderSystem, count: int, number: int) -> float:
    """The same backlog's writes sent by two ``bare_writes`` tasks (one per worker) of the
    same cluster, with nothing of Holdfast's around them; every order changed once."""
    # Orders of their own (the round's end-to-end run changed its own already); the last
    # run's counts at the order system are settled first.
    made = approved_cases(run, orders, count, f"{number}b")
    writes = _writes_of(made)
    versions_before = orders.versions(list(made.values()))
    quiet()
    with qcluster(run.log_dir, f"bare-{number}", ORDER_SYSTEM_URL=orders.base_url) as process:
        warm(process)
        cpu = CpuSplit.start(
            sessions={"workers": process.pid, "order system": orders.process_session()},
            databases={"its PostgreSQL": run.db_name, "the order system's": run.orders_db},
        )
        start = time.perf_counter()
        tasks = enqueue_many(BARE, [(writes[n::WORKERS],) for n in range(WORKERS)])
        wait_acked(tasks, 180, process)
        elapsed = time.perf_counter() - start
        if cpu is not None:
            split = cpu.per_apply_ms(len(writes))
            run.series["cpu bare order system"].add(
                split["order system"] + split["the order system's"]
            )
            run.series["cpu bare all"].add(sum(split.values()))
    orders.check_changed_once(made, versions_before)
    return len(writes) / elapsed


def dbos_writes(run: Run, orders: DeployedOrderSystem, count: int, number: int) -> float:
    """The same backlog's writes as DBOS workflows (``lab.bench.dbos_anchor``), queued at the
    cluster's concurrency; every order changed once."""
    from lab.bench import dbos_anchor

    made = approved_cases(run, orders, count, f"{number}d")
    writes = _writes_of(made)
    versions_before = orders.versions(list(made.values()))
    system_db = f"{run.db_name}_dbos"
    recreate_database(system_db)
    quiet()
    try:
        rate = dbos_anchor.measure(
            writes,
            database_url(system_db),
            WORKERS,
            child_env(ORDER_SYSTEM_URL=orders.base_url),
            run.log_dir,
        )
    finally:
        drop_database(system_db)
    orders.check_changed_once(made, versions_before)
    return rate


# --- approve → done, idle workers --------------------------------------------------------


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile (``share`` in 0..1) of ``values``."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(share * len(ordered))))
    return ordered[rank - 1]


def approve_to_done(run: Run, orders: DeployedOrderSystem, count: int, number: int) -> float:
    """``count`` approvals one at a time, the workers idle before each: from the start of the
    approval's transaction (the case made due, ``apply_case`` enqueued on its commit, as
    ``approvals.services.proposal_approve`` ends) to the case's ``done`` event. Adds the
    round's p99 and max; returns its p50 (ms)."""
    from cases.models import Case, CaseEvent, Status
    from cases.scheduling import enqueue_on_commit

    made = approved_cases(run, orders, count, f"{number}l")
    versions_before = orders.versions(list(made.values()))
    waits: list[float] = []
    quiet()
    with qcluster(run.log_dir, f"latency-{number}", ORDER_SYSTEM_URL=orders.base_url) as process:
        warm(process)
        time.sleep(1.0)
        for pk in made:
            approved = timezone.now()
            with transaction.atomic():
                Case.objects.filter(pk=pk).update(next_check_at=approved)
                enqueue_on_commit(APPLY, pk)
            done_at = _done_at(pk, process, CaseEvent, Status.DONE)
            waits.append((done_at - approved).total_seconds() * 1000)
            time.sleep(0.3)  # the workers idle again
    orders.check_changed_once(made, versions_before)
    run.series["approve_p99"].add(percentile(waits, 0.99))
    run.series["approve_max"].add(max(waits))
    return percentile(waits, 0.5)


def _done_at(pk: int, process: subprocess.Popen[bytes], events: Any, done: str) -> dt.datetime:
    deadline = time.monotonic() + 60
    while True:
        found = (
            events.objects.filter(case_id=pk, to_status=done)
            .values_list("created_at", flat=True)
            .first()
        )
        if found is not None:
            return found
        if process.poll() is not None:
            raise Skip(f"the qcluster exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise Skip(f"case {pk} not done 60 s after its approval")
        time.sleep(0.02)


# --- a worker's memory over many applies -------------------------------------------------


def session_memory(session: int) -> dict[int, tuple[float, int]]:
    """Each process of ``session``: (resident memory in MiB, CPU ticks used so far), from
    ``/proc`` (Linux)."""
    found = {}
    for pid, (sid, ticks) in process_ticks().items():
        if sid != session:
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for row in status.splitlines():
            if row.startswith("VmRSS:"):
                found[pid] = (int(row.split()[1]) / 1024, ticks)
    return found


def worker_memory(run: Run, orders: DeployedOrderSystem, count: int) -> float | None:
    """``count`` applies by one cluster: the RSS of its busiest worker (the process of the
    cluster that used the most CPU between the readings, alive at both) after the first tenth
    is done, and at the end; adds the end's to ``rss_10k`` and returns the first."""
    from cases.models import Case, Status

    if not Path("/proc/self/status").exists():
        raise Skip("reads /proc (Linux)")
    made = approved_cases(run, orders, count, "mem")
    ids = list(made)
    versions_before = orders.versions(list(made.values()))
    quiet()
    first: dict[int, tuple[float, int]] = {}
    with qcluster(run.log_dir, "memory", ORDER_SYSTEM_URL=orders.base_url) as process:
        warm(process)
        _enqueue_backlog(ids, not has_task(APPLY_DUE))
        deadline = time.monotonic() + max(DONE_TIMEOUT, count / 5)
        while True:
            done = Case.objects.filter(pk__in=ids, status=Status.DONE).count()
            if not first and done >= count // 10:
                first = session_memory(process.pid)
            if done == count:
                break
            if process.poll() is not None:
                raise Skip(f"the qcluster exited with {process.returncode}")
            if time.monotonic() > deadline:
                raise Skip(f"{count - done} of {count} cases not done in time")
            time.sleep(0.2)
        last = session_memory(process.pid)
    orders.check_changed_once(made, versions_before)
    both = [pid for pid in last if pid in first]
    if not both:
        raise Skip("no process of the cluster lived from the first tenth to the end")
    busiest = max(both, key=lambda pid: last[pid][1] - first[pid][1])
    run.series["rss_10k"].add(last[busiest][0])
    run.write(
        f"  memory: {count} applies; the busiest worker (pid {busiest}, "
        f"{(last[busiest][1] - first[busiest][1]) / CLOCK_TICKS:.0f} s of CPU meanwhile) "
        f"{first[busiest][0]:.1f} → {last[busiest][0]:.1f} MiB"
    )
    return first[busiest][0]


# --- several worker hosts -----------------------------------------------------------------


def multihost_applies(
    run: Run, module: Any, orders: DeployedOrderSystem, count: int, number: int
) -> float:
    """``count`` applies by two worker hosts (``lab.bench.multihost``)."""
    orders_settle(run, wait=True)
    versions: dict[str, tuple[int, int]] = {}

    def make_backlog(n: int) -> dict[int, str]:
        made = approved_cases(run, orders, n, number * 1000 + len(versions))
        versions.update(orders.versions(list(made.values())))
        return made

    def check_orders(made: dict[int, str]) -> None:
        orders.check_changed_once(made, versions)

    quiet()
    try:
        return float(
            module.measure_multihost(
                count=count,
                orders_base_url=orders.base_url,
                make_backlog=make_backlog,
                check_orders=check_orders,
                log_dir=run.log_dir / f"multihost-{number}",
                hosts=2,
            )
        )
    except Skip:
        raise
    except Exception as exc:  # HostsUnavailable, or the measurement failed: say why
        raise Skip(f"multi-host: {type(exc).__name__}: {exc}") from exc
    finally:
        quiet()
