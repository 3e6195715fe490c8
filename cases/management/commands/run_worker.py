"""A single-process worker: the watchdog, approval expiry and due work, in a loop.

The django-q2 cluster (``manage.py qcluster``) does the same through its schedules; this command
is for drills, debugging and deployments without a cluster. ``--apply D-41`` claims and applies
one case and exits.
"""

from __future__ import annotations

import signal
import time

from django.core.management.base import BaseCommand, CommandError
from django.utils.module_loading import import_string

from approvals.services import approvals_expire_due
from cases.claims import attempts_expire_leases
from cases.dispatch import dispatch_due
from cases.models import Case


class Command(BaseCommand):
    help = "Run Holdfast's background work in this process (or apply one case with --apply)."

    def add_arguments(self, parser):
        parser.add_argument("--apply", metavar="REF", help="claim and apply this case, then exit")
        parser.add_argument("--once", action="store_true", help="one pass, then exit")
        parser.add_argument("--interval", type=float, default=2.0, help="seconds between passes")

    def handle(self, *args, apply=None, once=False, interval=2.0, **options):
        if apply:
            from reconciliation.apply import apply_case

            try:
                case = Case.objects.get(reference=apply)
            except Case.DoesNotExist:
                raise CommandError(f"No case {apply}.") from None
            outcome = apply_case(case_id=case.pk)
            self.stdout.write(f"{apply}: {outcome}")
            return
        from reconciliation.restore import recover_after_restore, restore_detected

        why = restore_detected()
        if why:
            self.stdout.write(f"Restore detected ({why}): recovering before any work resumes.")
            recover_after_restore(progress=self.stdout.write)
        stopping = []
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
        while not stopping:
            expired = attempts_expire_leases()
            lapsed = approvals_expire_due()
            ran = dispatch_due(run=self._run)
            if expired or lapsed or ran:
                self.stdout.write(
                    f"leases expired: {expired}, approvals lapsed: {lapsed}, tasks run: {ran}"
                )
            if once:
                break
            time.sleep(interval)

    def _run(self, func_path: str, case_id: int) -> None:
        outcome = import_string(func_path)(case_id)
        self.stdout.write(f"{func_path}({case_id}): {outcome}")
