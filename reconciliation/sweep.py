"""The sweep: every stage is re-driven from the database, never from the broker.

A broker may lose a task (django-q2's Redis broker drops the task of a worker killed mid-task;
the ORM broker re-delivers it only after its ``retry`` window). So every piece of stage work
has a due time in the database, and one sweep pass finds all of it:

- the lease watchdog holds every case whose apply attempt's lease ran out
  (``Attempt.lease_expires_at``);
- approvals that expired return their case to review;
- inbound events that failed, or were stored and never processed (their task was lost), are
  processed again once their due time (``InboundEvent.next_attempt_at``, moved forward by a
  compare-and-set lease when a sweep takes one) has passed;
- the dispatcher enqueues (or runs) the task of every case whose ``next_check_at`` is due; it
  moves ``next_check_at`` forward by the lease of that work, so a task whose worker died is
  dispatched again once that lease has passed;
- every passed follow-up time gets its reminder (``cases.reminders``), and staff mail that is
  due, and daily digests, are handed out the same way (``cases.delivery``: a compare-and-set
  on each due time, a send lease).

The pass runs every ``SWEEP_INTERVAL_SECONDS``, derived from the shortest lease. django-q2's
scheduler ticks only every ~30 s and its interval schedules run at most once a minute, which
left a crashed case applying up to a minute past its lease. So the cluster runs the sweep as one
long-lived task, ``sweeper_run``: it holds a lock (a PostgreSQL advisory lock, or a file lock
on SQLite; both are released when the process dies), sweeps for most of the task timeout, then
enqueues its successor. Every worker process enqueues a sweeper when it starts (django-q2's
``post_spawn``), and a minute schedule does too, so a killed sweeper is replaced as soon as its
worker is; an extra sweeper finds the lock held and returns at once. ``run_worker`` runs the
same pass in its own loop.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection, connections
from django.db.models import Q
from django.utils import timezone

from cases import scheduling
from cases.delivery import digests_dispatch_due, notifications_dispatch_due
from cases.reminders import follow_ups_remind_due
from reconciliation import stopping
from reconciliation.claims import attempts_expire_leases
from reconciliation.dispatch import dispatch_due
from reconciliation.models import InboundEvent

logger = logging.getLogger(__name__)

SWEEPER_TASK = "reconciliation.tasks.sweeper"
# pg_advisory_lock key: "holdfast sweeper" (any constant no other code uses).
LOCK_KEY = 0x486F6C64_5377


def sweep_interval() -> float:
    return float(settings.SWEEP_INTERVAL_SECONDS)


def inbound_lease() -> dt.timedelta:
    return dt.timedelta(seconds=settings.LEASES["inbound"]["lease_seconds"])


def inbound_events_redrive(*, now: dt.datetime | None = None, limit: int = 100) -> dict[str, int]:
    """Process every inbound event that is due: failed with its next attempt due, or stored as
    pending and not processed within one inbound lease (its task was lost or its worker died).

    Taking an event is a compare-and-set on its due time: only one sweep processes it, and a
    sweep that dies meanwhile leaves it due again one lease later. Counts by outcome.
    """
    from cases.retries import INBOUND
    from reconciliation.inbound import inbound_event_process

    now = now or timezone.now()
    lease = inbound_lease()
    due = (
        InboundEvent.objects.filter(
            Q(
                processing=InboundEvent.Processing.FAILED,
                attempts__lt=INBOUND.limit,
                next_attempt_at__lte=now,
            )
            | Q(processing=InboundEvent.Processing.PENDING, next_attempt_at__lte=now - lease)
        )
        .order_by("next_attempt_at", "pk")
        .values_list("pk", "event_id", "processing", "next_attempt_at")
    )
    counts: dict[str, int] = {}
    for pk, event_id, processing, due_at in list(due[:limit]):
        # A pending event is due again one lease after ``now``; a failed one at ``now + lease``.
        taken = now if processing == InboundEvent.Processing.PENDING else now + lease
        if not InboundEvent.objects.filter(
            pk=pk, processing=processing, next_attempt_at=due_at
        ).update(next_attempt_at=taken):
            continue  # another sweep took it
        status = inbound_event_process(event_id=event_id)
        counts[status] = counts.get(status, 0) + 1
    return counts


def sweep_once(
    *, run: Callable[[str, int], None] | None = None, dispatch_limit: int = 200
) -> dict[str, int]:
    """One pass over everything that is due; ``run`` replaces the enqueue of case tasks and
    of mail deliveries."""
    from approvals.services import approvals_expire_due

    return {
        "leases_expired": attempts_expire_leases(),
        "approvals_lapsed": approvals_expire_due(),
        "events_processed": sum(inbound_events_redrive().values()),
        "dispatched": dispatch_due(run=run, limit=dispatch_limit),
        "follow_ups_reminded": follow_ups_remind_due(),
        "mails_handed_out": notifications_dispatch_due(run=run),
        "digests_handed_out": digests_dispatch_due(run=run),
    }


DISCONNECTED = (OperationalError, InterfaceError)


def sweep_once_or_reconnect(**kwargs) -> dict[str, int] | None:
    """``sweep_once``, surviving a dropped database connection: log it, close every connection
    (the next query opens a fresh one) and return ``None``."""
    try:
        return sweep_once(**kwargs)
    except DISCONNECTED as exc:
        logger.warning("Sweep interrupted by the database connection (%s); reconnecting.", exc)
        connections.close_all()
        return None


@contextlib.contextmanager
def sweeper_lock() -> Iterator[bool]:
    """Yield whether this process is now the one sweeper; the lock dies with the process."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
            mine = bool(cursor.fetchone()[0])
        try:
            yield mine
        finally:
            if mine:
                with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
        return
    path = Path(settings.HOLDFAST_STATE_DIR) / "sweeper.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


MAX_BACKOFF_SECONDS = 30.0


def _lock_again() -> bool | None:
    """After a lost connection: take the PostgreSQL lock again (True), find it taken by
    another sweeper (False) or the database still refusing (None). The file lock of SQLite
    does not go with a connection."""
    if connection.vendor != "postgresql":
        return True
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
            return bool(cursor.fetchone()[0])
    except DISCONNECTED as exc:
        logger.warning("The sweeper's lock: the database still refuses (%s).", exc)
        connections.close_all()
        return None


def sweeper_run(*, duration: float | None = None, successor: bool = True) -> str:
    """The cluster's sweeper: sweep every ``SWEEP_INTERVAL_SECONDS`` for ``duration`` seconds
    (default: three quarters of the task timeout), then enqueue the next sweeper.

    When its cluster is told to stop (SIGTERM), it ends after the pass under way and enqueues
    no successor (``reconciliation.stopping``): the next cluster's workers ask for one when
    they start. When the database drops or refuses its connection it backs off (doubling up to
    ``MAX_BACKOFF_SECONDS``), takes its lock again and carries on; it ends if another sweeper
    took the lock meanwhile."""
    interval = sweep_interval()
    if duration is None:
        duration = max(interval, settings.Q_CLUSTER["timeout"] * 0.75 - interval)
    deadline = time.monotonic() + duration
    passes = 0
    with sweeper_lock() as mine:
        if not mine:
            return "another sweeper is running"
        backoff, held = interval, True
        while not stopping.stopping():
            started = time.monotonic()
            if not held:  # the lock went with a lost connection: take it again first
                again = _lock_again()
                if again is False:
                    return f"swept {passes} times; another sweeper took over"
                held = again is True
            if held and sweep_once_or_reconnect() is not None:
                backoff = interval
                passes += 1
                if started + interval >= deadline:
                    break
                stopping.sleep(interval - (time.monotonic() - started))
                continue
            # The database dropped or refused the connection: wait longer each time.
            held = False
            if started + backoff >= deadline:
                break
            stopping.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
    if stopping.stopping():
        return f"swept {passes} times; stopped with the cluster"
    if successor:
        scheduling.enqueue(SWEEPER_TASK)
    return f"swept {passes} times"


def start_sweeper_on_spawn(sender, proc_name: str = "", **kwargs) -> None:
    """django-q2 ``post_spawn``: a worker process that starts asks for a sweeper (a second one
    returns at once), so a cluster sweeps from its first seconds and after any worker death."""
    try:
        scheduling.enqueue(SWEEPER_TASK)
    except Exception:  # never stop a worker from starting
        logger.exception("Could not enqueue the sweeper from %s", proc_name)
