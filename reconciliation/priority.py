"""The workers give way to people: on a host they share with the web app, a worker cluster
runs at a lower CPU priority (``WORKER_CPU_NICE``, 10 by default), so the pages people wait on
are served first and a backlog drains with what is left.

Linux shares the CPU between *sessions* first (the scheduler's autogroups, on by default), and
only then between the processes of one. ``make run`` starts the web app and the cluster each
in a session of its own, as a process manager or ``setsid`` does: the cluster's workers then
took as much of the CPU as the whole web app, however many requests waited. Measured with
``make bench --load`` (20 users on gunicorn at 1M cases while the cluster drained 600
applies; four runs, alternating): at nice 0 admin p95 425 and 281 ms, API 413 and 226 ms; at
nice 10, 202 and 178 ms, API 189 and 164 ms. The applies during the load ran at 36–43/s
against 41–49/s. A worker's own nice value (``os.nice``) changes nothing against another
session, which is why it alone did not help.

So each worker process, as it starts (django-q2's ``post_spawn``):

- lowers its own priority to ``WORKER_CPU_NICE``, which counts among the processes of its
  session (a cluster that shares one with other work);
- lowers its session's, when the session is the cluster's own: its leader is the cluster's
  main process (``manage.py qcluster`` or ``run_cluster``). A session led by anything else (a
  shell, a supervisor) is left as it is: lowering it would lower whatever else runs in it.

Only ever lower: raising a priority needs privileges, and a worker never asks for more than the
web app gets. Under systemd each service is a control group and sessions do not matter: give
the worker unit a lower ``CPUWeight=`` (README). A worker that gets little CPU is only slower:
its lease is renewed by a thread that needs microseconds, and a lease that ran out is held for
reconciliation, never applied twice.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

# The commands whose main process is a worker cluster.
CLUSTER_COMMANDS = frozenset({"qcluster", "run_cluster"})
_PROC = Path("/proc")


def session_led_by_cluster(pid: int | None = None) -> bool:
    """Whether the session of ``pid`` (this process) is led by a worker cluster's main
    process: a ``manage.py`` command in :data:`CLUSTER_COMMANDS`, not a shell running one."""
    leader = os.getsid(pid or 0)
    try:
        argv = (_PROC / str(leader) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(arg.decode(errors="replace") in CLUSTER_COMMANDS for arg in argv[1:4])


def _autogroup_nice() -> int | None:
    """This session's autogroup nice value, or None where there are no autogroups."""
    try:
        text = (_PROC / "self" / "autogroup").read_text()  # "/autogroup-85 nice 0"
    except OSError:
        return None
    try:
        return int(text.split()[-1])
    except (ValueError, IndexError):
        return None


def _lower_autogroup(nice: int) -> None:
    """Lower this session's autogroup to ``nice``. The kernel accepts one change in a while
    (EAGAIN): the cluster's workers start together, so a refused one looks again and is done
    when a sibling already did it."""
    for _ in range(5):
        current = _autogroup_nice()
        if current is None or current >= nice:
            return
        try:
            (_PROC / "self" / "autogroup").write_text(str(nice))
        except BlockingIOError:
            time.sleep(0.2)
        except OSError as exc:
            logger.info("The worker cluster's session keeps its CPU priority: %s", exc)
            return


def give_way(nice: int) -> None:
    """Lower this process (and its session, when the cluster leads it) to ``nice``."""
    if nice <= 0:
        return
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if current < nice:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    if session_led_by_cluster():
        _lower_autogroup(nice)


def give_way_on_spawn(sender: Any = None, **kwargs: Any) -> None:
    """django-q2 ``post_spawn``: a worker process that starts gives way to people."""
    give_way(settings.WORKER_CPU_NICE)
