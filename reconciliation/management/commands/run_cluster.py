"""The worker cluster under a liveness watchdog: django-q2's ``qcluster``, plus a main process
that ends the cluster when it stops taking work (``reconciliation.liveness``).

Exit status: 0 after SIGTERM/SIGINT (the cluster finished its tasks and stopped), 3
(``WEDGED_EXIT``) when the cluster was wedged and killed, 1 when the cluster died or did not
stop in time. Run it under a process manager that restarts it on a non-zero exit
(systemd ``Restart=on-failure``; ``make run`` does).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connections

from cases import scheduling
from reconciliation.liveness import BEAT_ENV, PROBE_TASK, WEDGED_EXIT, Watchdog, kill_tree

logger = logging.getLogger(__name__)


def _enqueue_probe() -> None:
    try:
        scheduling.enqueue(PROBE_TASK)
    finally:
        # The main process holds no connection between looks (it must not age or leak).
        connections.close_all()


class Command(BaseCommand):
    help = (
        "Run the django-q2 worker cluster under Holdfast's liveness watchdog: a cluster that "
        "takes no queued work for Q_LIVENESS_SECONDS is killed and the command exits with 3."
    )

    def handle(self, *args, **options):
        from django_q.cluster import Cluster

        stale_after = float(settings.Q_LIVENESS_SECONDS)
        probe_every = float(settings.Q_LIVENESS_PROBE_SECONDS)
        beat = Path(settings.HOLDFAST_STATE_DIR) / f"cluster-{os.getpid()}.beat"
        os.environ[BEAT_ENV] = str(beat)  # the workers, forked below, inherit it
        watchdog = Watchdog(
            beat=beat,
            stale_after=stale_after,
            probe_every=probe_every,
            enqueue_probe=_enqueue_probe,
        )
        watchdog.reset()
        cluster = Cluster()
        # Our own handlers (after Cluster() installed django-q2's): a signal only asks the loop
        # below to stop, so a wedged cluster that never finishes stopping cannot hang us.
        stop_requested: list[int] = []
        signal.signal(signal.SIGTERM, lambda signum, _frame: stop_requested.append(signum))
        signal.signal(signal.SIGINT, lambda signum, _frame: stop_requested.append(signum))
        connections.close_all()  # no connection may cross the fork of the sentinel
        cluster.start()
        watchdog.reset()
        if stale_after:
            logger.info(
                "Cluster liveness watchdog: a probe after %g s without a task; wedged when "
                "queued work waits %g s (beat %s)",
                probe_every,
                stale_after,
                beat,
            )
        try:
            code = self._watch(cluster, watchdog, stop_requested, enabled=bool(stale_after))
        finally:
            beat.unlink(missing_ok=True)
        if code:
            raise SystemExit(code)

    def _watch(self, cluster, watchdog: Watchdog, stop_requested: list[int], *, enabled: bool):
        tick = min(1.0, max(0.1, watchdog.probe_every / 4))
        while True:
            if stop_requested:
                return self._stop(cluster)
            sentinel = cluster.sentinel
            if not sentinel.is_alive():
                logger.error("The cluster's sentinel exited (%s); stopping.", sentinel.exitcode)
                kill_tree(None)
                return 1
            why = watchdog.check() if enabled else None
            if why:
                logger.critical(
                    "Cluster wedged: %s. Killing the cluster (%d processes) and exiting with "
                    "%d, so that the process manager starts a new one; every case is re-driven "
                    "from its due time.",
                    why,
                    kill_tree(sentinel.pid),
                    WEDGED_EXIT,
                )
                sentinel.join(timeout=5)
                return WEDGED_EXIT
            time.sleep(tick)

    def _stop(self, cluster) -> int:
        """Ask the cluster to stop (its tasks end after the step under way); kill it when it
        has not stopped within the task timeout."""
        logger.info("Cluster stopping.")
        cluster.stop_event.set()
        cluster.sentinel.join(timeout=settings.Q_CLUSTER["timeout"] + 10)
        if cluster.sentinel.is_alive():
            logger.error("The cluster did not stop in time; killing it.")
            kill_tree(cluster.sentinel.pid)
            return 1
        logger.info("Cluster stopped.")
        return 0
