"""The watchdog: an attempt whose lease ran out holds its case for a person; it never starts a
replacement, and its query stays on the partial index of active leases however many cases exist."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest
from django.core import mail
from django.db import connection
from django.utils import timezone

from approvals.models import Operation
from cases import kinds
from cases.kernel import Worker
from cases.models import Attempt, Case, CaseEvent, Status, WaitingOn
from reconciliation.apply import _apply, apply_case, run_attempt
from reconciliation.claims import attempts_expire_leases, case_claim
from reconciliation.client import OrderSystemClient
from reconciliation.dispatch import dispatch_due

pytestmark = pytest.mark.order_system

WORKER = Worker("worker:test:1")
TIMEOUTS = {"connect": 1.0, "read": 1.0, "write": 1.0, "pool": 1.0}
BULK = 20_000
BULK_CASES = 200


def _refusing_client() -> OrderSystemClient:
    """A client that fails the test if anything is sent to the order system."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"nothing may be sent, got {request.method} {request.url}")

    return OrderSystemClient(
        "http://orders.test", timeouts=TIMEOUTS, transport=httpx.MockTransport(handler)
    )


def test_expired_lease_holds_the_case_for_its_owner_and_starts_nothing(
    approved_case, live_orders, lead, settings
):
    case = approved_case()
    attempt = case_claim(case_id=case.pk, worker=WORKER)
    assert attempts_expire_leases(now=attempt.lease_expires_at - dt.timedelta(seconds=1)) == 0

    now = attempt.lease_expires_at + dt.timedelta(seconds=1)
    assert attempts_expire_leases(now=now) == 1

    case.refresh_from_db()
    assert case.status == Status.HELD
    assert case.waiting_on == WaitingOn.OWNER
    assert "Worker missing" in case.waiting_reason
    assert case.owner_id == lead.pk
    assert case.next_check_at == now + dt.timedelta(seconds=settings.HOLD_FIRST_CHECK_SECONDS)
    assert attempt.reference in case.last_error
    expired = Attempt.objects.get(pk=attempt.pk)
    assert (expired.state, expired.finished_at) == (Attempt.State.LEASE_EXPIRED, now)
    event = CaseEvent.objects.get(case=case, action="cases.attempt.lease_expired")
    assert event.detail == {"attempt": attempt.reference, "fencing_token": attempt.fencing_token}
    held = CaseEvent.objects.filter(case=case, to_status=Status.HELD).get()
    assert attempt.operation.key in held.reason

    # Nothing replaces the missing worker: not the watchdog again, not the dispatcher, not a
    # duplicate task.
    assert attempts_expire_leases(now=now + dt.timedelta(hours=1)) == 0
    dispatched = []
    dispatch_due(now=now + dt.timedelta(days=1), run=lambda *call: dispatched.append(call))
    assert not [func for func, pk in dispatched if pk == case.pk and "apply" in func]
    with _refusing_client() as client:
        assert apply_case(case_id=case.pk, client=client) == "refused: not_ready"
    assert Attempt.objects.filter(case=case).count() == 1
    assert live_orders.state("ORD-7731")["operations"] == []


def test_expired_lease_after_the_change_was_confirmed_returns_the_case_to_ready(
    approved_case, live_orders
):
    """A worker that confirmed the apply and then went missing left nothing uncertain: the case
    goes back to the queue and the next attempt resumes at the notification, sending nothing."""
    case = approved_case()
    claimed = case_claim(case_id=case.pk, worker=WORKER)
    attempt = Attempt.objects.select_related("operation", "case__account").get(pk=claimed.pk)
    with OrderSystemClient.from_settings() as client:
        assert _apply(attempt, client, WORKER) == "confirmed"
    # ...and the worker stops here, before notifying.

    now = attempt.lease_expires_at + dt.timedelta(seconds=1)
    assert attempts_expire_leases(now=now) == 1

    case.refresh_from_db()
    assert case.status == Status.READY
    assert case.waiting_on == WaitingOn.WORKER
    assert case.next_check_at is not None
    assert Attempt.objects.get(pk=attempt.pk).state == Attempt.State.LEASE_EXPIRED
    assert CaseEvent.objects.filter(case=case, action="cases.attempt.lease_expired").count() == 1
    assert Attempt.objects.filter(case=case).count() == 1

    with _refusing_client() as client:
        assert apply_case(case_id=case.pk, client=client) == "done"
    resumed = Attempt.objects.get(case=case, sequence=2)
    assert resumed.operation_id == attempt.operation_id  # the same DATE-…-1, never a new one
    assert resumed.state == Attempt.State.SUCCEEDED
    assert resumed.submitted_at is None
    assert len(live_orders.state("ORD-7731")["operations"]) == 1
    assert len(mail.outbox) == 1
    assert Operation.objects.get(pk=attempt.operation_id).notified_at is not None


def test_worker_waking_after_the_watchdog_held_its_case_sends_nothing(approved_case, live_orders):
    """Paused after the claim and before the write: when it wakes, its heartbeat is refused and
    it stops before sending anything."""
    case = approved_case()
    attempt = case_claim(case_id=case.pk, worker=WORKER)
    assert attempts_expire_leases(now=attempt.lease_expires_at + dt.timedelta(seconds=1)) == 1

    with OrderSystemClient.from_settings() as client:
        outcome = run_attempt(attempt_id=attempt.pk, client=client, worker=WORKER)

    assert outcome == "stale: stopped before doing anything more"
    woken = Attempt.objects.get(pk=attempt.pk)
    assert woken.state == Attempt.State.LEASE_EXPIRED
    assert woken.submitted_at is None
    assert live_orders.state("ORD-7731")["operations"] == []
    case.refresh_from_db()
    assert case.status == Status.HELD


def _bulk_finished_attempts(account, lead, *, active: int, expired: int) -> None:
    """``BULK`` long-finished attempts (spread over ``BULK_CASES`` done cases), and ``active``
    applying cases whose attempts run (``expired`` of them with a lease that ran out)."""
    change = {"kind": "delivery_date", "delivery_date": timezone.localdate().isoformat()}
    now = timezone.now()
    cases = Case.objects.bulk_create(
        [
            Case(
                reference=f"B-{n}",
                number=1_000_000 + n,
                account=account,
                request_key=f"bulk-{n}",
                order_id=f"ORD-B{n}",
                kind="delivery_date",
                change=change,
                status=Status.APPLYING if n < active else Status.DONE,
                team=account.team,
                owner=lead,
            )
            for n in range(active + BULK_CASES)
        ]
    )
    operation = Operation.objects.create(
        case=cases[0],
        key="DATE-B0-1",
        sequence=1,
        order_id="ORD-B0",
        change=change,
        change_hash=kinds.change_hash(change),
    )
    running = [
        Attempt(
            case=c,
            operation=operation,
            reference=f"{c.reference}-a1",
            sequence=1,
            worker="worker:bulk",
            fencing_token=10**12 + n,
            claimed_at=now,
            lease_expires_at=now + dt.timedelta(hours=-1 if n < expired else 1),
        )
        for n, c in enumerate(cases[:active])
    ]
    Attempt.objects.bulk_create(running)
    # The finished attempts in one INSERT ... SELECT: bulk_create of 20k rows took ~2 s.
    per_case = BULK // BULK_CASES
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO cases_attempt
                (case_id, operation_id, reference, sequence, kind, worker, fencing_token,
                 claimed_at, lease_expires_at, state, last_confirmed_step, last_error)
            SELECT c.id, %s, c.reference || '-a' || s, s, 'apply', 'worker:bulk',
                   1000000000000 + c.id * 1000 + s, %s, %s,
                   CASE WHEN s = %s THEN 'succeeded' ELSE 'failed' END, '', ''
            FROM cases_case c CROSS JOIN generate_series(1, %s) AS s
            WHERE c.id = ANY(%s)
            """,
            [
                operation.pk,
                now,
                now - dt.timedelta(days=1),
                per_case,
                per_case,
                [c.pk for c in cases[active:]],
            ],
        )


@pytest.mark.postgres_only
def test_watchdog_query_uses_the_partial_index_of_active_leases(account, lead):
    _bulk_finished_attempts(account, lead, active=5, expired=2)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE cases_attempt")
    captured = []

    def capture(execute, sql, params, many, context):
        if sql.startswith("SELECT") and 'FROM "cases_attempt"' in sql and not captured:
            captured.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        assert attempts_expire_leases() == 2

    sql, params = captured[0]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    # The active attempts' own partial index: as small as the number of running attempts (the
    # lease is not indexed, so that a renewal rewrites no index entry: test_hot_path).
    assert "attempt_one_active_per_case" in plan, plan
    assert "Seq Scan on cases_attempt" not in plan, plan
    assert Attempt.objects.count() == BULK + 5
    assert Case.objects.filter(status=Status.HELD).count() == 2
