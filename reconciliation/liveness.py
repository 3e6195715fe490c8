"""The worker cluster's liveness: a cluster that stops taking work is ended, so that its
process manager starts a fresh one. No case depends on any one worker process.

Why: django-q2 1.11's workers read ``iter(task_queue.get, "STOP")`` from one
``multiprocessing.Queue``. A worker killed (SIGKILL, the OOM killer) while idle in ``get()``
can die holding the queue's read lock; every other worker then blocks on that lock for good,
although the sentinel reincarnates the dead one (django-q2 issue #23). The cluster looks alive
and processes nothing, and no stage work moves: source checks, proposals, applies, the sweeper.

How (``manage.py run_cluster``, the supported way to run the cluster):

- every worker touches the cluster's *beat file* when it starts a task (django-q2's
  ``pre_execute`` signal, :func:`task_started`);
- when no task has started for ``Q_LIVENESS_PROBE_SECONDS``, the watchdog in the cluster's
  main process enqueues a probe task (a no-op, ``reconciliation.tasks.cluster_probe``): work is
  now queued, and a healthy cluster takes it within the task timeout;
- when a probe has waited ``Q_LIVENESS_SECONDS`` (more than ``Q_TIMEOUT``: a healthy cluster
  frees a worker within the task timeout, when django-q2 kills a task that overran) and no task
  has started since it was queued, the cluster is wedged: the watchdog kills its processes and
  exits with :data:`WEDGED_EXIT`. The process manager (systemd ``Restart=on-failure``, ``make
  run``'s supervisor) starts a new cluster, whose workers re-drive every case from its due
  time in the database (``reconciliation.sweep``): nothing is lost with the broker's tasks.

A probe that cannot be queued (the database or Redis refuses) is no evidence of a wedge: the
watchdog judges only a cluster that had work and took none.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

BEAT_ENV = "HOLDFAST_CLUSTER_BEAT"
PROBE_TASK = "reconciliation.tasks.cluster_probe"
# The exit status of a cluster ended as wedged: not 0, so a process manager restarts it.
WEDGED_EXIT = 3


def task_started(sender=None, **kwargs) -> None:
    """django-q2 ``pre_execute``, in the worker process: the cluster took a task."""
    path = os.environ.get(BEAT_ENV)
    if path:
        with contextlib.suppress(OSError):
            Path(path).touch()


@dataclass
class Watchdog:
    """Decides, from the beat file's time, whether the cluster is live (see the module)."""

    beat: Path
    stale_after: float
    probe_every: float
    enqueue_probe: Callable[[], None]
    clock: Callable[[], float] = time.time
    probe_queued_at: float | None = field(default=None, init=False)

    def reset(self) -> None:
        """The cluster starts now: a beat, no probe outstanding."""
        self.beat.parent.mkdir(parents=True, exist_ok=True)
        self.beat.touch()
        self.probe_queued_at = None

    def last_task_started(self) -> float:
        try:
            return self.beat.stat().st_mtime
        except OSError:
            return 0.0

    def check(self) -> str | None:
        """One look: queue a probe when the cluster has been quiet; the reason the cluster is
        wedged, or ``None`` while it is live."""
        now = self.clock()
        started = self.last_task_started()
        if self.probe_queued_at is not None and started >= self.probe_queued_at:
            self.probe_queued_at = None  # a task started after the probe was queued
        if self.probe_queued_at is None:
            if now - started >= self.probe_every:
                try:
                    self.enqueue_probe()
                except Exception as exc:  # noqa: BLE001 - the broker refuses: no evidence
                    logger.warning("Cluster liveness: could not queue a probe (%s).", exc)
                else:
                    self.probe_queued_at = now
            return None
        waited = now - self.probe_queued_at
        if waited < self.stale_after:
            return None
        return (
            f"work queued {waited:.0f} s ago and no task started since "
            f"(last task started {now - started:.0f} s ago)"
        )


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, children first (read from ``/proc``)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        children = parents.get(todo.pop(0), [])
        found.extend(children)
        todo.extend(children)
    return found


def kill_tree(sentinel_pid: int | None) -> int:
    """SIGKILL the cluster's sentinel first (so it reincarnates nobody), then every other
    process below this one; how many were killed."""
    killed = 0
    below = descendants(os.getpid())
    ordered = [sentinel_pid] if sentinel_pid in below else []
    ordered += [pid for pid in below if pid != sentinel_pid]
    for pid in ordered:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed
