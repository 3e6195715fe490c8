"""``manage.py bench_large_table``: the watchdog's query, the dispatcher's selection and claims
timed on a large table of finished cases, inside a transaction that is rolled back.

    manage.py bench_large_table --cases 1000000      # PostgreSQL: the numbers quoted in notes
    manage.py bench_large_table --cases 20000        # any database, quick

It fills the database with N closed cases (each with an operation and a finished attempt) plus a
few active attempts whose lease expired and a few due cases, then times:

- the watchdog's query (active attempts whose lease ran out) and its plan;
- the dispatcher's selection of due cases;
- claims of ready cases through the real service (``case_claim``), one after another.

Nothing is left behind: everything happens in one transaction that is rolled back at the end.
Timings are wall-clock medians on this machine; compare runs on the same machine only.
"""

from __future__ import annotations

import statistics
import time
from datetime import date, timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.utils import timezone

from cases.kinds import canonical_json, change_hash
from cases.models import Attempt, Case, CustomerAccount, Status, Team


class _Rollback(Exception):
    pass


def _median_ms(func, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        func()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


class Command(BaseCommand):
    help = "Time the watchdog, the dispatcher and claims on N cases (rolled back afterwards)."

    def add_arguments(self, parser):
        parser.add_argument("--cases", type=int, default=20000)
        parser.add_argument("--claims", type=int, default=200)
        parser.add_argument("--runs", type=int, default=20)

    def handle(self, *args, cases: int, claims: int, runs: int, **options):
        if cases < 1 or claims < 1:
            raise CommandError("--cases and --claims must be positive.")
        vendor = connection.vendor
        self.stdout.write(f"Database: {vendor}; {cases:,} cases; {claims} claims; {runs} runs")
        try:
            with transaction.atomic():
                self._run(cases, claims, runs)
                raise _Rollback
        except _Rollback:
            self.stdout.write("Rolled back: nothing was left in the database.")

    # --- filling ------------------------------------------------------------------------------
    def _fill(self, n: int) -> None:
        user = get_user_model().objects.create(username="bench-owner")
        team = Team.objects.create(name="Bench", default_owner=user)
        account = CustomerAccount.objects.create(
            reference="ACC-BENCH", name="Bench", team=team, verified=True
        )
        now = timezone.now()
        start = time.perf_counter()
        series = (
            "generate_series(1, %(n)s) AS g(i)"
            if connection.vendor == "postgresql"
            else "(WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s "
            "WHERE i < %(n)s) SELECT i FROM s) AS g"
        )
        change = {"kind": "delivery_date", "delivery_date": now.date().isoformat()}
        params: dict[str, int | date | str] = {  # a datetime is a date
            "n": n,
            "account": account.pk,
            "team": team.pk,
            "owner": user.pk,
            "now": now,
            "change": canonical_json(change),
            "change_hash": change_hash(change),
        }
        with connection.cursor() as cursor:
            cursor.execute(
                f"""INSERT INTO cases_case (reference, number, account_id, request_key, order_id,
                    kind, change, note, status, version, team_id, owner_id, waiting_on,
                    waiting_reason, outstanding_question, last_error, retry_count, created_at,
                    updated_at, legal_hold, revocation_kind, retry_counts)
                    SELECT 'B-' || i, 1000000 + i, %(account)s, 'bench-' || i, 'ORD-B' || i,
                    'delivery_date', %(change)s, '', 'done', 3, %(team)s, %(owner)s, 'nobody',
                    '', '', '', 0,
                    %(now)s, %(now)s, false, '', '{{}}' FROM {series}""",  # noqa: S608 - a constant
                params,
            )
            cursor.execute(
                """INSERT INTO approvals_operation (case_id, key, sequence, order_id,
                    change, change_hash, created_at, confirmed_at)
                    SELECT id, 'DATE-' || number || '-1', 1, order_id, change, %(change_hash)s,
                    %(now)s, %(now)s FROM cases_case WHERE account_id = %(account)s""",
                params,
            )
            cursor.execute(
                """INSERT INTO cases_attempt (case_id, operation_id, reference, sequence, kind,
                    worker, fencing_token, claimed_at, lease_expires_at, state,
                    last_confirmed_step, last_error)
                    SELECT o.case_id, o.id, 'B-a' || o.id, 1, 'apply', 'bench', 900000000 + o.id,
                    %(now)s, %(now)s, 'succeeded', 'closed', ''
                    FROM approvals_operation o JOIN cases_case c ON c.id = o.case_id
                    WHERE c.account_id = %(account)s""",
                params,
            )
        # A few live problems among the million: 50 attempts whose lease ran out, 500 due cases.
        stuck = list(Case.objects.filter(account=account).order_by("pk")[:550])
        Attempt.objects.filter(case__in=stuck[:50]).update(
            state=Attempt.State.RUNNING, lease_expires_at=now - timedelta(minutes=5)
        )
        Case.objects.filter(pk__in=[c.pk for c in stuck[:50]]).update(status=Status.APPLYING)
        Case.objects.filter(pk__in=[c.pk for c in stuck[50:]]).update(
            status=Status.WAITING_SOURCE, next_check_at=now - timedelta(minutes=1)
        )
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    "ANALYZE cases_case; ANALYZE cases_attempt; ANALYZE approvals_operation"
                )
        self.stdout.write(
            f"Filled {n:,} cases, operations and attempts in {time.perf_counter() - start:.1f}s"
        )

    def _run(self, n: int, claims: int, runs: int) -> None:
        self._fill(n)
        now = timezone.now()
        watchdog = (
            Attempt.objects.filter(state__in=Attempt.ACTIVE, lease_expires_at__lte=now)
            .order_by("lease_expires_at")
            .values_list("pk", flat=True)[:500]
        )
        found = len(list(watchdog.all()))
        ms = _median_ms(lambda: list(watchdog.all()), runs)
        self.stdout.write(f"watchdog query: {found} expired leases found, median {ms:.2f} ms")
        self.stdout.write("  plan: " + watchdog.explain().replace("\n", "\n        "))

        due = (
            Case.objects.filter(
                status__in=[
                    Status.WAITING_SOURCE,
                    Status.PREPARING_PROPOSAL,
                    Status.READY,
                    Status.HELD,
                ],
                next_check_at__lte=now,
            )
            .order_by("next_check_at")
            .values_list("pk", "status", "next_check_at")[:200]
        )
        ms = _median_ms(lambda: list(due.all()), runs)
        self.stdout.write(
            f"dispatcher selection: {len(list(due.all()))} due cases (of 500), median {ms:.2f} ms"
        )
        self._claims(claims)

    def _claims(self, count: int) -> None:
        from cases.kernel import Worker
        from lab.bench.seeding import bench_profile, ready_case_seed
        from reconciliation.claims import case_claim
        from reconciliation.models import OrderSystemProfile

        bench_profile(OrderSystemProfile, "ORD-BENCH", "benchmark fixture (rolled back)")
        approver = get_user_model().objects.create(username="bench-approver")
        account = CustomerAccount.objects.get(reference="ACC-BENCH")
        now = timezone.now()
        owner = account.team.default_owner
        if owner is None:
            raise CommandError("The ACC-BENCH team has no default owner: fill it first.")
        first_number = (Case.objects.order_by("-number").values_list("number", flat=True)[0]) + 1
        ready = []
        for i in range(count):
            case = ready_case_seed(
                tag=f"R{i}",
                reference=f"R-{i}",
                number=first_number + i,
                account=account,
                owner=owner,
                approver=approver,
                now=now,
            )
            ready.append(case.pk)
        worker = Worker("bench")
        start = time.perf_counter()
        for pk in ready:
            case_claim(case_id=pk, worker=worker)
        elapsed = time.perf_counter() - start
        self.stdout.write(
            f"claims: {count} sequential claims in {elapsed:.2f}s = "
            f"{count / elapsed:.0f} claims/s ({elapsed / count * 1000:.2f} ms each)"
        )
