"""Whether the django-q2 cluster this worker process belongs to was told to stop.

django-q2 tells a running task nothing when its cluster stops (SIGTERM or SIGINT to
``qcluster``): the cluster's sentinel waits until every worker has finished its task, then
exits. Holdfast's long tasks -- the sweeper, which sweeps for about three quarters of
``Q_TIMEOUT``, and an apply task taking the next due case for up to ``APPLY_DRAIN_SECONDS`` --
so kept a stopping cluster alive for up to 45 s (measured: SIGTERM to exit in 29 s with the
sweeper mid-run). They ask :func:`stopping` between steps, and :func:`sleep` instead of
sleeping, and end early. A step under way -- one sweep pass, one case's claim and apply -- is
always finished, never cut: every step is its own transaction, or ends in one.

How: django-q2 forks its workers from the cluster's sentinel process, so a worker process holds
a copy of the sentinel object and, with it, the cluster's ``stop_event``: a
``multiprocessing.Event`` the cluster's main process sets when it is told to stop, shared by
every process forked from it. Outside a cluster's worker (``run_worker``, which handles SIGTERM
itself; tests; django-q2's sync mode) there is none, and :func:`stopping` is never true.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

_found: tuple[int, Any] | None = None  # (pid, the cluster's stop event or None)


def cluster_stop_event() -> Any:
    """The stop event of the cluster whose worker this process is, or None (read once per
    process: a forked child looks again)."""
    global _found
    if _found is None or _found[0] != os.getpid():
        from django_q.cluster import Sentinel

        # ``type()``, not ``isinstance``: the heap holds weak proxies, and asking a dead one
        # for its class raises.
        event = next((obj.stop_event for obj in gc.get_objects() if type(obj) is Sentinel), None)
        _found = (os.getpid(), event)
    return _found[1]


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
