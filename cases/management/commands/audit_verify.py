"""Verify the hash chains of the audit log: every case's events and every account's account
events, or one case's events with ``--case``.

Reads the events in batches (constant memory), prints progress while it walks, then one line
per broken chain with its first broken link (case reference, event id, expected and stored
hash). Exits 0 when every chain holds, 1 when one does not.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from cases.audit import verify_account_chains, verify_chains
from cases.models import Case


class Command(BaseCommand):
    help = "Verify the audit log's hash chains and report the first broken link of each case."

    def add_arguments(self, parser):
        parser.add_argument("--case", metavar="REFERENCE", help="only this case, e.g. D-41")
        parser.add_argument(
            "--batch-size",
            type=int,
            default=2000,
            help="events read per query; progress is printed after each batch (default 2000)",
        )

    def handle(self, *args, case=None, batch_size=2000, verbosity=1, **options):
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1.")
        if case is not None and not Case.objects.filter(reference=case).exists():
            raise CommandError(f"No case {case!r}.")

        def progress(cases: int, events: int) -> None:
            if verbosity >= 1:
                self.stdout.write(f"... {events} event(s) of {cases} case(s) checked")

        result = verify_chains(case_reference=case, batch_size=batch_size, progress=progress)
        for link in result.broken:
            self.stdout.write(link.describe())
        broken = [f"{len(result.broken)} case(s)"] if result.broken else []
        if case is None:
            accounts = verify_account_chains(batch_size=batch_size)
            for link in accounts.broken:
                self.stdout.write(link.describe())
            if accounts.broken:
                broken.append(f"{len(accounts.broken)} account(s)")
            self.stdout.write(
                f"Account chains: {accounts.events} event(s) of {accounts.cases} account(s) "
                f"checked."
            )
        scope = f"case {case}" if case else f"{result.cases} case(s)"
        if not broken:
            self.stdout.write(f"Audit chain intact: {result.events} event(s) of {scope}.")
            return
        raise CommandError(
            f"Audit chain broken in {' and '.join(broken)}; checked {result.events} "
            f"event(s) of {scope}.",
            returncode=1,
        )
