"""A whole worker in one process: everything the django-q2 cluster does, in a loop.

Each pass runs the sweep (``reconciliation.sweep``: lease watchdog, approval expiry, inbound
re-drive) and takes one due case through its task in this process (source check, proposal
preparation, apply, reconciliation); work its services enqueue runs here too, at once. After a
case it takes the next due one without sleeping; it sleeps ``--interval`` (default
``SWEEP_INTERVAL_SECONDS``) only when nothing is due. A dropped database connection is logged
and the next pass reconnects. ``--apply D-41`` claims and applies one case and exits.
"""

from __future__ import annotations

import logging
import signal
import time
from collections import deque

from django.core.management.base import BaseCommand, CommandError
from django.db import connections
from django.utils.module_loading import import_string

from cases import scheduling
from cases.models import Case

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Run Holdfast's background work in this process (or apply one case with --apply)."

    def add_arguments(self, parser):
        parser.add_argument("--apply", metavar="REF", help="claim and apply this case, then exit")
        parser.add_argument("--once", action="store_true", help="one pass, then exit")
        parser.add_argument(
            "--interval", type=float, default=None, help="seconds between passes when idle"
        )

    def handle(self, *args, apply=None, once=False, interval=None, **options):
        if apply:
            from reconciliation.apply import apply_case

            try:
                case = Case.objects.get(reference=apply)
            except Case.DoesNotExist:
                raise CommandError(f"No case {apply}.") from None
            outcome = apply_case(case_id=case.pk)
            self.stdout.write(f"{apply}: {outcome}")
            return
        from reconciliation.restore_detection import restore_detected
        from reconciliation.restore_recovery import recover_after_restore
        from reconciliation.sweep import DISCONNECTED, sweep_interval, sweep_once

        interval = sweep_interval() if interval is None else interval
        why = restore_detected()
        if why:
            self.stdout.write(f"Restore detected ({why}): recovering before any work resumes.")
            recover_after_restore(progress=self.stdout.write)
        self._queue: deque[tuple[str, tuple]] = deque()
        scheduling.run_in_process(self._queue)
        stopping = []
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
        self.stdout.write(f"Worker running: a pass every {interval:g} s when idle.")
        try:
            while not stopping:
                try:
                    counts = sweep_once(run=self._run, dispatch_limit=1)
                    ran = self._drain()
                except DISCONNECTED as exc:
                    # Whatever the pass was doing is re-driven from its due time or lease.
                    self.stderr.write(f"Database connection lost ({exc}); reconnecting.")
                    logger.warning("run_worker: database connection lost: %s", exc)
                    connections.close_all()
                    self._queue.clear()
                    time.sleep(min(interval, 1.0))
                    continue
                if any(counts.values()) or ran:
                    self.stdout.write(
                        ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in counts.items())
                    )
                if once:
                    break
                if counts["dispatched"] or ran:
                    continue  # more may be due: take the next case at once
                time.sleep(interval)
        finally:
            scheduling.run_in_process(None)

    def _drain(self) -> int:
        """Run the work this process's services enqueued (the broker is not used)."""
        ran = 0
        while self._queue:
            func_path, args = self._queue.popleft()
            if func_path.endswith(".sweeper"):
                continue  # this loop is the sweeper
            outcome = import_string(func_path)(*args)
            self.stdout.write(f"{func_path}{args}: {outcome}")
            ran += 1
        return ran

    def _run(self, func_path: str, case_id: int) -> None:
        outcome = import_string(func_path)(case_id)
        self.stdout.write(f"{func_path}({case_id}): {outcome}")
