"""Purge the payload of closed cases past their retention date; keep tombstones and the audit.

A dry run unless ``--execute``: it lists what would be purged and why the other examined cases
are skipped (legal hold, unsettled work, still open). ``--today`` asks "what is due by then?";
with ``--execute`` it may not lie in the future, because that would shorten the retention
policy.
"""

from __future__ import annotations

import datetime as dt

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from cases.retention import REASONS, PurgeSummary, purge_expired


def _date(value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise CommandError(f"--today must be a date as YYYY-MM-DD, not {value!r}.") from None


class Command(BaseCommand):
    help = "Purge closed cases past their retention date (a dry run unless --execute)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--execute", action="store_true", help="purge for real (default: a dry run)"
        )
        parser.add_argument(
            "--today",
            metavar="YYYY-MM-DD",
            help="the date retention is judged on (default: today; future dates only for dry runs)",
        )

    def handle(self, *args, execute=False, today=None, verbosity=1, **options):
        real_today = timezone.localdate()
        on = _date(today) if today else real_today
        if execute and on > real_today:
            raise CommandError(
                f"--today {on} is in the future: purging early would shorten retention. "
                "Use a dry run to see what will be due then."
            )
        mode = "Purging" if execute else "Dry run: nothing is purged"
        self.stdout.write(f"{mode}; retention judged on {on}.")

        def progress(index: int, total: int, reference: str, outcome: str, why: str) -> None:
            if verbosity < 1:
                return
            line = f"[{index}/{total}] {reference} {outcome}"
            self.stdout.write(f"{line}: {why}" if why else line)

        summary = purge_expired(execute=execute, today=on, progress=progress)
        self._summarise(summary)

    def _summarise(self, summary: PurgeSummary) -> None:
        examined = len(summary.candidates)
        done = summary.purged if summary.execute else summary.would_purge
        verb = "purged" if summary.execute else "would purge"
        held = ", ".join(
            f"{REASONS[code]}: {count}" for code, count in summary.skipped_by_reason.items()
        )
        self.stdout.write("")
        self.stdout.write(
            f"Summary: examined {examined} case(s); {verb} {len(done)}; "
            f"skipped {len(summary.skipped)}" + (f" ({held})" if held else "") + "."
        )
        if done:
            self.stdout.write(f"{verb.capitalize()}: {', '.join(done)}")
        for reference, why in summary.skipped.items():
            self.stdout.write(f"Skipped {reference}: {why}")
        self.stdout.write(
            f"Not yet due: {summary.not_due} closed case(s). "
            f"Still open: {summary.open_cases} case(s), never purged while open."
        )
        if not summary.execute and done:
            self.stdout.write("Run again with --execute to purge them.")
