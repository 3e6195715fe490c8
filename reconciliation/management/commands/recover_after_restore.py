"""Hold and reconcile every case a restored backup may show out of date."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from reconciliation.restore_detection import restore_detected
from reconciliation.restore_recovery import recover_after_restore


class Command(BaseCommand):
    help = (
        "After restoring Holdfast's database from a backup: hold every case with an "
        "unconfirmed operation or unfinished attempt and reconcile it against the order "
        "system before any worker resumes."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--if-restored",
            action="store_true",
            help="only run when a restore is detected (for start-up scripts)",
        )

    def handle(self, *args, if_restored=False, **options):
        why = restore_detected()
        if if_restored and not why:
            self.stdout.write("No restore detected.")
            return
        if why:
            self.stdout.write(f"Restore detected: {why}.")
        summary = recover_after_restore(progress=self.stdout.write)
        self.stdout.write(f"Held {summary['held']} case(s); outcomes: {summary['outcomes']}")
