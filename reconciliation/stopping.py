"""Whether the django-q2 cluster this worker process belongs to was told to stop.

django-q2 tells a running task nothing when its cluster stops (SIGTERM or SIGINT to
``qcluster``): the cluster's sentinel waits until every worker has finished its task, then
exits. Holdfast's long tasks -- the sweeper, which sweeps for about three quarters of
``Q_TIMEOUT``, and an apply task taking the next due case for up to ``APPLY_DRAIN_SECONDS`` --
so kept a stopping cluster alive for up to 45 s (measured: SIGTERM to exit in 29 s with the
sweeper mid-run). They ask :func:`stopping` between steps, and :func:`sleep` instead of
sleeping, and end early. A step under way -- one sweep pass, one case's claim and apply -- is
always finished, never cut: every step is its own transaction, or ends in one.

How: django-q2 forks its workers from the cluster's sentinel process, inside one of the
sentinel's methods (``spawn_process``), so a worker process runs on top of that method's frame,
which holds the sentinel object and, with it, the cluster's ``stop_event``: a
``multiprocessing.Event`` the cluster's main process sets when it is told to stop, shared by
every process forked from it. The worker's own call stack leads to it, a few dozen frames; a
search of the whole heap for the sentinel took 36-55 ms of CPU in each new worker process and
touched every object, so the pages the worker shared with the sentinel were copied (34 MiB).
Outside a cluster's worker (``run_worker``, which handles SIGTERM itself; tests; django-q2's
sync mode) there is none, and :func:`stopping` is never true.
"""

from __future__ import annotations

import os
import sys
import time
import types
from typing import Any

_found: tuple[int, Any] | None = None  # (pid, the cluster's stop event or None)


def cluster_stop_event() -> Any:
    """The stop event of the cluster whose worker this process is, or None (read once per
    process: a forked child looks again)."""
    global _found
    if _found is None or _found[0] != os.getpid():
        _found = (os.getpid(), _sentinel_stop_event())
    return _found[1]


def _sentinel_stop_event() -> Any:
    """The stop event of the sentinel whose method this process was forked in, found on the
    call stack, or None."""
    from django_q.cluster import Sentinel

    methods = {f.__code__ for f in vars(Sentinel).values() if isinstance(f, types.FunctionType)}
    frame: types.FrameType | None = sys._getframe()  # noqa: SLF001 - the stack, not the heap
    while frame is not None:
        if frame.f_code in methods:
            owner = frame.f_locals.get("self")
            if isinstance(owner, Sentinel):
                return owner.stop_event
        frame = frame.f_back
    return None


def stopping() -> bool:
    """True once this process's cluster was told to stop."""
    event = cluster_stop_event()
    return event is not None and event.is_set()


def sleep(seconds: float) -> bool:
    """Sleep up to ``seconds``, waking at once if the cluster is told to stop meanwhile;
    True when it was."""
    event = cluster_stop_event()
    if event is None:
        time.sleep(max(0.0, seconds))
        return False
    return bool(event.wait(max(0.0, seconds)))
