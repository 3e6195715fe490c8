"""What Holdfast's processes do, counted for Prometheus: order-system answers, apply outcomes,
lease expiries, takeovers and the approve → applied latency.

These are counters and histograms of events that happen inside one process (a gunicorn worker,
a django-q2 worker, ``run_worker``). What the database holds (open cases, held cases, backlogs,
heartbeats) is read at scrape time by ``reconciliation.gauges`` instead, never counted here.

**Many processes, one count.** With ``PROMETHEUS_MULTIPROC_DIR`` set (production requires it
while ``/metrics`` is on; ``make run`` sets it), prometheus-client's multiprocess mode keeps
every value in a memory-mapped file in that directory, and a scrape sums the files of every
process of the host. Files are named by *slot*, not by process id: each process takes the
lowest free slot with an exclusive ``flock`` on ``slot-N.lock`` (released by the kernel when the
process dies, however it dies) and writes ``counter_N.db`` / ``histogram_N.db``. A process that
takes a dead one's slot opens its files and counts on from the values in them, so counters
never go down, and the number of files is bounded by the most processes that ever ran at once
-- not by every process django-q2 recycled (one file pair per process id would grow without
bound; each scrape reads them all). Without the variable (tests, a single process) values live
in this process's memory.

Invariants: the module imports no model (the order-system client uses it); a label's values
come from a closed set (``CALLS``, ``OUTCOMES``, status codes), so the number of series stays
bounded; an increment costs microseconds and never raises into the code it counts.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Histogram, values
from prometheus_client.multiprocess import MultiProcessCollector

logger = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiproc_dir() -> str:
    """The directory shared by this host's processes, or '' (values in this process only)."""
    return os.environ.get(MULTIPROC_ENV, "")


# --- slots: one file pair per concurrently running process ----------------------------------


class _Slot:
    """This process's slot number in the multiprocess directory, taken on first use and again
    after a fork (a child never writes its parent's files)."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        self._pid = -1
        self._number = -1
        self._fd: int | None = None
        self._lock = threading.Lock()

    def __call__(self) -> str:
        pid = os.getpid()
        if pid != self._pid:
            with self._lock:
                if pid != self._pid:
                    self._take(pid)
        return str(self._number)

    def _take(self, pid: int) -> None:
        if self._fd is not None:
            # Inherited from the parent: closing this copy leaves the parent's lock in place.
            os.close(self._fd)
            self._fd = None
        self.directory.mkdir(parents=True, exist_ok=True)
        number = 0
        while True:
            fd = os.open(self.directory / f"slot-{number}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                number += 1
                continue
            # The holder's pid, for an operator asking which process writes which files.
            os.ftruncate(fd, 0)
            os.write(fd, f"{pid}\n".encode())
            self._fd, self._number, self._pid = fd, number, pid
            return


_SLOT: _Slot | None = None
if multiproc_dir():
    # Before any metric below exists: every value of this process is written to its slot's
    # files (prometheus-client reads the value class when a metric is made).
    _SLOT = _Slot(multiproc_dir())
    values.ValueClass = values.MultiProcessValue(process_identifier=_SLOT)


def slot_number() -> int | None:
    """The slot this process writes (None outside multiprocess mode)."""
    return None if _SLOT is None else int(_SLOT())


# --- the metrics --------------------------------------------------------------------------

# The order-system client's calls (``reconciliation.client.OrderSystemClient``), by method.
CALLS = (
    "get_order",
    "get_slot",
    "get_operation",
    "search_operation",
    "capabilities",
    "fences_seen",
    "apply_operation",
    "fence",
    "other_write",
)
# An answer's outcome: its HTTP status code ("201", "503"), or what happened instead of one.
TRANSPORT_OUTCOMES = ("connect_failed", "timeout", "no_answer")
# How an apply attempt's apply step ended (``reconciliation.apply.run_attempt``).
OUTCOMES = (
    "applied",
    "effect_unknown",
    "fenced",
    "transient",
    "source_changed",
    "approval_expired",
    "needs_attention",
    "lookup_mismatch",
    "cancel_acknowledged",
    "stale",
    "late",
    "other",
)

ORDER_SYSTEM_REQUESTS = Counter(
    "holdfast_order_system_requests",
    "Calls to the order system by client method and outcome: the HTTP status code, or "
    "connect_failed (nothing sent), timeout or no_answer (sent, no answer read).",
    ["call", "outcome"],
)
ORDER_SYSTEM_SECONDS = Histogram(
    "holdfast_order_system_request_seconds",
    "Time from sending a call to the order system to its answer (or its failure), by method.",
    ["call"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
APPLY_ATTEMPTS = Counter(
    "holdfast_apply_attempts",
    "Apply attempts by how their apply step ended: applied (the order system confirmed, or "
    "the look before writing found it applied), effect_unknown (held), fenced, transient "
    "(retried later), source_changed, approval_expired, needs_attention, lookup_mismatch, "
    "cancel_acknowledged, stale or late (no longer current).",
    ["outcome"],
)
APPROVAL_TO_APPLIED_SECONDS = Histogram(
    "holdfast_approval_to_applied_seconds",
    "From the approval a change was sent under to the order system confirming it applied.",
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400),
)
LEASE_EXPIRIES = Counter(
    "holdfast_lease_expiries",
    "Apply attempts whose lease ran out without a heartbeat (the watchdog held their case, or "
    "resumed the steps after a confirmed change).",
)
TAKEOVERS = Counter(
    "holdfast_apply_takeovers",
    "Claims that take a case over from an attempt that ended uncertain, by how it ended "
    "(lease_expired, effect_unknown, fenced): after a reconciliation proved the operation "
    "absent, or to resume the steps after a change the missing worker had confirmed.",
    ["after"],
)


def _safe(count) -> None:
    """Counting never breaks the work it counts."""
    try:
        count()
    except Exception:  # noqa: BLE001 - a metrics failure is logged, the caller goes on
        logger.exception("Could not record a metric")


# Each label combination's child, looked up once per process: ``labels()`` costs more than the
# increment itself. Keys come from closed sets, so the caches stay small.
_REQUESTS: dict[tuple[str, str], Any] = {}
_LATENCY: dict[str, Any] = {}
_OUTCOMES: dict[str, Any] = {}


def order_system_answer(call: str, outcome: str, seconds: float) -> None:
    """One call to the order system answered (``outcome``: status code or transport failure)."""

    def count() -> None:
        requests = _REQUESTS.get((call, outcome))
        if requests is None:
            requests = _REQUESTS.setdefault(
                (call, outcome), ORDER_SYSTEM_REQUESTS.labels(call, outcome)
            )
        latency = _LATENCY.get(call)
        if latency is None:
            latency = _LATENCY.setdefault(call, ORDER_SYSTEM_SECONDS.labels(call))
        requests.inc()
        latency.observe(seconds)

    _safe(count)


@contextlib.contextmanager
def order_system_call(call: str) -> Iterator[dict[str, str]]:
    """Time one order-system call; the caller sets ``["outcome"]`` in the yielded dict (the
    answer's status code), otherwise the exception that left the block names it."""
    answer = {"outcome": ""}
    started = time.perf_counter()
    try:
        yield answer
    except BaseException as exc:
        if not answer["outcome"]:
            answer["outcome"] = _transport_outcome(exc)
        raise
    finally:
        order_system_answer(call, answer["outcome"] or "other", time.perf_counter() - started)


def _transport_outcome(exc: BaseException) -> str:
    import httpx

    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return "connect_failed"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    return "no_answer"


def apply_outcome(outcome: str) -> None:
    """An apply step's outcome as ``run_attempt`` returns it ("confirmed", an ending's code,
    "late: …", "stale: …", "cancel acknowledged"), counted under its closed label."""
    word = outcome.split(":", 1)[0].strip().replace(" ", "_")
    label = {"confirmed": "applied", "done": "applied"}.get(word, word)
    label = label if label in OUTCOMES else "other"

    def count() -> None:
        child = _OUTCOMES.get(label)
        if child is None:
            child = _OUTCOMES.setdefault(label, APPLY_ATTEMPTS.labels(label))
        child.inc()

    _safe(count)


def approval_to_applied(seconds: float) -> None:
    _safe(lambda: APPROVAL_TO_APPLIED_SECONDS.observe(max(seconds, 0.0)))


def lease_expired() -> None:
    _safe(LEASE_EXPIRIES.inc)


def takeover(after: str) -> None:
    _safe(lambda: TAKEOVERS.labels(after).inc())


# --- reading them back --------------------------------------------------------------------


def process_registry() -> CollectorRegistry:
    """The registry a scrape reads this host's process metrics from: every process's files in
    multiprocess mode, else this process's own metrics (with its CPU and memory)."""
    if multiproc_dir():
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=multiproc_dir())
        return registry
    return prometheus_client.REGISTRY
