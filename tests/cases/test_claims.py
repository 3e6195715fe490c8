"""Claims, heartbeats and cancellation intents: who may act on a ready case right now.

Races run on PostgreSQL with real threads, each on its own connection, and every race test shows
that the contention it is about actually happened. Query counts are measured on both databases.
"""

from __future__ import annotations

import datetime as dt
import threading
import time

import httpx
import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from approvals.models import Operation
from cases.kernel import Worker, lock_case
from cases.models import Attempt, CancellationRequest, Case, CaseEvent, EvidenceReference, Status
from cases.services import case_cancel_request, evidence_record
from reconciliation.apply import attempt_record_applied, run_attempt
from reconciliation.claims import (
    ClaimRefused,
    StaleAttempt,
    attempt_acknowledge_cancel,
    attempt_heartbeat,
    attempts_expire_leases,
    case_claim,
)
from reconciliation.client import OperationResult, OrderSystemClient

pytestmark = pytest.mark.order_system

WORKERS = 8
# How long the cancellation starts after the claim, round by round: whichever takes the case's
# row lock first wins (the claim's locked read, the cancellation's lock).
# Positive: the cancellation starts that much later; negative: the claim does. A cancellation
# first asks the order system whether these records are older than it (one round trip), so the
# claim is given head-starts the other way too, and both sides win in some round. That round
# trip costs more on a loaded machine (CI measured it above 100 ms), hence the longer ones.
CANCEL_DELAYS = (
    (0.0, 0.0, 0.004, 0.008, 0.016, 0.04, 0.1)
    + tuple(-0.002 * step for step in range(1, 26))
    + (-0.06, -0.1, -0.25, -0.5)
)
WORKER = Worker("worker:test:1")
TIMEOUTS = {"connect": 1.0, "read": 1.0, "write": 1.0, "pool": 1.0}

# Measured (the bound is the measurement, inside the test's transaction, savepoints included).
# Claim: the locked read with every guard (``claims._claim_query``), the compare-and-set, the
# attempt and the event; +2 for the savepoint of its atomic block; on SQLite the fencing token
# is a counter row (its get-or-create, update and read, with their savepoints) instead of a
# sequence value in the read. Recording an applied result: the case and operation locks, the
# operation, the evidence, the attempt, the case and the event (+1: the chain's head).
CLAIM_QUERIES = {"postgresql": 6, "sqlite": 11}
RECORD_APPLIED_QUERIES = {"postgresql": 10, "sqlite": 10}


def _backend_pid() -> int:
    connection.ensure_connection()
    return connection.connection.info.backend_pid


def _blocked(pids: list[int]) -> set[int]:
    """The backends among ``pids`` waiting on a lock another backend holds, right now."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM unnest(%s::int[]) AS pid WHERE cardinality(pg_blocking_pids(pid)) > 0",
            [pids],
        )
        return {row[0] for row in cursor.fetchall()}


class _ClaimObserver:
    """Records, for one thread, the claim's one statement (on PostgreSQL: the ``SELECT … FOR
    UPDATE`` that reads the case with every guard, and the write of a row the guards let
    through): when it was sent and when it returned, i.e. how long it waited for the row, and
    how many such statements the thread sent."""

    def __init__(self) -> None:
        self.read_sent_at: float | None = None
        self.read_returned_at: float | None = None
        self.statements = 0
        self.with_the_write = False

    def __call__(self, execute, sql, params, many, context):
        if "FOR UPDATE" in sql and "approvals_proposal" in sql:
            self.statements += 1
            # The read, the guards and the compare-and-set of the case in one statement.
            self.with_the_write = 'UPDATE "cases_case" SET "status"' in sql
            self.read_sent_at = time.monotonic()
            try:
                return execute(sql, params, many, context)
            finally:
                self.read_returned_at = time.monotonic()
        return execute(sql, params, many, context)


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_eight_workers_claiming_one_ready_case_start_exactly_one_attempt(approved_case):
    """Eight workers claim the ready case while its row is held; all eight wait at the claim's
    locked read. Once the row is released exactly one attempt starts and the other seven, each
    reading the case after the winner committed, are refused with the reason (the winner holds
    the case)."""
    case = approved_case()
    read_version = case.version
    barrier = threading.Barrier(WORKERS + 1)
    observers = [_ClaimObserver() for _ in range(WORKERS)]
    pids: list[int | None] = [None] * WORKERS
    results: list[dict | None] = [None] * WORKERS

    def claim(index: int) -> None:
        try:
            pids[index] = _backend_pid()  # connect before the barrier, not after it
            barrier.wait(timeout=10)
            with connection.execute_wrapper(observers[index]):
                try:
                    attempt = case_claim(case_id=case.pk, worker=Worker(f"worker:{index}"))
                    results[index] = {"won": attempt.reference}
                except ClaimRefused as refusal:
                    results[index] = {
                        "reason": refusal.extra.get("reason"),
                        "detail": refusal.detail,
                    }
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            results[index] = {"error": repr(exc)}
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(WORKERS)]
    all_waiting = False
    with transaction.atomic():
        # Hold the row as any other writer of the case would: every claimer queues at its
        # locked read, and none can decide on what it read before the holder is done.
        lock_case(case.pk)
        for thread in threads:
            thread.start()
        barrier.wait(timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if None not in pids and _blocked(pids) == set(pids):
                all_waiting = True
                break
            time.sleep(0.01)
        released = time.monotonic()
    for thread in threads:
        thread.join(timeout=30)

    assert all(r is not None and "error" not in r for r in results), results
    assert all_waiting, "the eight claimers never all waited at the locked read at once"
    # Contention: every claimer sent its claim before the row was released and got it back
    # only after, so all eight raced for the same claim, each in one statement that reads,
    # checks and writes; only the first to get the row wrote (one attempt, below), the others'
    # guards saw it claimed.
    assert all(o.read_sent_at < released < o.read_returned_at for o in observers)
    assert all(o.statements == 1 and o.with_the_write for o in observers)

    winners = [r["won"] for r in results if "won" in r]
    refusals = [r for r in results if "reason" in r]
    assert winners == [f"{case.reference}-a1"]
    assert len(refusals) == WORKERS - 1
    assert {r["reason"] for r in refusals} == {"claimed"}
    assert all(winners[0] in r["detail"] for r in refusals)

    attempt = Attempt.objects.get(case=case)
    assert attempt.reference == winners[0]
    assert attempt.state == Attempt.State.RUNNING
    claimed = CaseEvent.objects.filter(case=case, action="cases.case.claimed")
    assert claimed.count() == 1
    assert claimed.get().detail["attempt"] == attempt.reference
    case.refresh_from_db()
    assert (case.status, case.version) == (Status.APPLYING, read_version + 1)


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_cancellation_racing_a_claim_never_lets_both_win(approved_case, agent):
    """A claim and a cancellation start together on a ready case, round after round, the
    cancellation a little later each time. In every round exactly one wins: an attempt on a case
    that is not cancelled, or a cancelled case with no attempt. A cancellation that loses is
    saved as pending and the running attempt is asked to stop. Each side wins at least once and
    the calls overlap in time."""
    outcomes = []
    for delay in CANCEL_DELAYS:
        case = approved_case()
        barrier = threading.Barrier(2)
        claim_result: dict = {}
        cancel_result: dict = {}
        observer = _ClaimObserver()

        def claim(
            case_id=case.pk, result=claim_result, barrier=barrier, observer=observer, delay=delay
        ):
            try:
                connection.ensure_connection()
                barrier.wait(timeout=10)
                time.sleep(max(-delay, 0.0))
                result["started"] = time.monotonic()
                try:
                    with connection.execute_wrapper(observer):
                        result["won"] = case_claim(case_id=case_id, worker=WORKER).reference
                except ClaimRefused as refusal:
                    result["reason"] = refusal.extra.get("reason")
                result["ended"] = time.monotonic()
            except Exception as exc:  # noqa: BLE001 - reported by the main thread
                result["error"] = repr(exc)
            finally:
                connections.close_all()

        def cancel(case_id=case.pk, result=cancel_result, barrier=barrier, delay=delay):
            try:
                connection.ensure_connection()
                barrier.wait(timeout=10)
                time.sleep(max(delay, 0.0))
                result["started"] = time.monotonic()
                after = case_cancel_request(
                    case=Case(pk=case_id),
                    actor=agent,
                    reason="The customer no longer wants it",
                    via="api",
                )
                result["status"] = after.status
                result["ended"] = time.monotonic()
            except Exception as exc:  # noqa: BLE001 - reported by the main thread
                result["error"] = repr(exc)
            finally:
                connections.close_all()

        threads = [threading.Thread(target=claim), threading.Thread(target=cancel)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert "error" not in claim_result, claim_result
        assert "error" not in cancel_result, cancel_result

        case.refresh_from_db()
        attempts = Attempt.objects.filter(case=case).count()
        cancellation = CancellationRequest.objects.get(case=case)
        # The invariant: never an attempt on a cancelled case; exactly one side won.
        assert not (attempts and case.status == Status.CANCELLED)
        assert (attempts == 1) != (case.status == Status.CANCELLED)
        if attempts:
            assert claim_result.get("won") == f"{case.reference}-a1"
            # The cancellation arrived after the claim: saved, pending, and the running
            # attempt asked to stop (the "cancel lost" path; the evidence decides later).
            assert case.status in {Status.APPLYING, Status.HELD}
            assert cancellation.outcome == CancellationRequest.Outcome.PENDING
            assert Attempt.objects.get(case=case).state == Attempt.State.CANCEL_REQUESTED
            outcome = "claim"
        else:
            assert claim_result["reason"] in {"not_ready", "version_changed", "cancel_requested"}
            assert cancellation.outcome == CancellationRequest.Outcome.CANCELLED
            # Its one statement (if it got that far) wrote nothing: no attempt, above.
            assert observer.statements <= 1
            # A claim that sent its locked read before the cancellation was done waited for
            # the cancellation's row lock and then read the case cancelled.
            waited = observer.read_sent_at is not None and (
                observer.read_sent_at < cancel_result["ended"]
            )
            outcome = "cancel, the claim waited at the lock" if waited else "cancel"
        overlapped = (
            claim_result["started"] < cancel_result["ended"]
            and cancel_result["started"] < claim_result["ended"]
        )
        outcomes.append((delay, outcome, overlapped))

    # Proof the two really raced: each side won at least once, and the calls overlapped.
    assert any(o.startswith("claim") for _, o, _ in outcomes), outcomes
    assert any(o.startswith("cancel") for _, o, _ in outcomes), outcomes
    assert any(overlapped for _, _, overlapped in outcomes), outcomes
    # ...and at least once the claim was already at its locked read while the cancellation
    # held the case, and lost to it there.
    assert any(o == "cancel, the claim waited at the lock" for _, o, _ in outcomes), outcomes


# --- heartbeats and cancellation intents ---------------------------------------------------------


def test_heartbeat_extends_the_lease_of_the_current_attempt_only(approved_case):
    case = approved_case()
    attempt = case_claim(case_id=case.pk, worker=WORKER)

    time.sleep(0.01)
    lease = attempt_heartbeat(attempt_id=attempt.pk, fencing_token=attempt.fencing_token)

    fresh = Attempt.objects.get(pk=attempt.pk)
    assert lease.expires_at == fresh.lease_expires_at > attempt.lease_expires_at
    assert fresh.heartbeat_at > attempt.heartbeat_at
    assert lease.cancel_requested is False
    # Any other token is not this attempt's: refused, and the lease does not move.
    with pytest.raises(StaleAttempt):
        attempt_heartbeat(attempt_id=attempt.pk, fencing_token=attempt.fencing_token - 1)
    assert Attempt.objects.get(pk=attempt.pk).lease_expires_at == fresh.lease_expires_at


def test_heartbeat_after_the_lease_ran_out_tells_the_worker_to_stop(approved_case, settings):
    settings.LEASES = {**settings.LEASES, "apply": {"lease_seconds": 0.3, "heartbeat_seconds": 0.1}}
    case = approved_case()
    attempt = case_claim(case_id=case.pk, worker=WORKER)
    time.sleep(0.4)

    # Before the watchdog has looked: the lease ran out, so the heartbeat cannot revive it.
    with pytest.raises(StaleAttempt) as refused:
        attempt_heartbeat(attempt_id=attempt.pk, fencing_token=attempt.fencing_token)
    assert refused.value.extra["state"] == Attempt.State.RUNNING
    assert Attempt.objects.get(pk=attempt.pk).lease_expires_at == attempt.lease_expires_at

    # After the watchdog: the attempt is lease_expired for good.
    assert attempts_expire_leases() == 1
    with pytest.raises(StaleAttempt) as refused:
        attempt_heartbeat(attempt_id=attempt.pk, fencing_token=attempt.fencing_token)
    assert refused.value.extra["state"] == Attempt.State.LEASE_EXPIRED


def test_heartbeat_of_a_fenced_attempt_is_refused(approved_case):
    case = approved_case()
    attempt = case_claim(case_id=case.pk, worker=WORKER)
    with OrderSystemClient.from_settings() as client:
        from cases.fencing import next_fencing_token

        client.fence("ORD-7731", next_fencing_token())
        assert run_attempt(attempt_id=attempt.pk, client=client, worker=WORKER) == "fenced"

    with pytest.raises(StaleAttempt) as refused:
        attempt_heartbeat(attempt_id=attempt.pk, fencing_token=attempt.fencing_token)
    assert refused.value.extra["state"] == Attempt.State.FENCED


def _refusing_client() -> OrderSystemClient:
    """A client that fails the test if anything is sent to the order system."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"nothing may be sent, got {request.method} {request.url}")

    return OrderSystemClient(
        "http://orders.test", timeouts=TIMEOUTS, transport=httpx.MockTransport(handler)
    )


def test_cancellation_intent_reaches_the_worker_at_its_heartbeat(approved_case, live_orders, agent):
    case = approved_case()
    attempt = case_claim(case_id=case.pk, worker=WORKER)
    case_cancel_request(case=case, actor=agent, reason="The customer cancelled", via="api")

    lease = attempt_heartbeat(attempt_id=attempt.pk, fencing_token=attempt.fencing_token)
    assert lease.cancel_requested is True

    with _refusing_client() as client:
        assert run_attempt(attempt_id=attempt.pk, client=client, worker=WORKER) == (
            "cancel acknowledged"
        )
    attempt_acknowledge_cancel(attempt_id=attempt.pk, worker=WORKER)  # a second ack: no-op

    stopped = Attempt.objects.get(pk=attempt.pk)
    assert stopped.state == Attempt.State.STOPPED
    assert stopped.finished_at is not None
    assert stopped.submitted_at is None
    events = CaseEvent.objects.filter(case=case, action="cases.attempt.worker_stopped")
    assert events.count() == 1
    assert events.get().detail["attempt"] == attempt.reference
    with pytest.raises(StaleAttempt):
        attempt_heartbeat(attempt_id=attempt.pk, fencing_token=attempt.fencing_token)
    assert live_orders.state("ORD-7731")["operations"] == []


def test_cancellation_while_applying_stops_the_worker_before_it_sends(
    approved_case, live_orders, agent
):
    """The customer cancels after the claim but before the worker sent anything: the request is
    saved, the worker learns of it at its heartbeat before the write and stops without sending,
    and the case is not left 'applying' with no worker: it is cancelled (nothing was sent) or
    held for its owner with a next check."""
    case = approved_case()
    attempt = case_claim(case_id=case.pk, worker=WORKER)

    case_cancel_request(case=case, actor=agent, reason="The customer cancelled", via="api")

    case.refresh_from_db()
    assert case.status != Status.CANCELLED  # a worker holds it: the evidence decides
    assert Attempt.objects.get(pk=attempt.pk).state == Attempt.State.CANCEL_REQUESTED
    with OrderSystemClient.from_settings() as client:
        outcome = run_attempt(attempt_id=attempt.pk, client=client, worker=WORKER)
    assert live_orders.state("ORD-7731")["operations"] == [], outcome
    assert outcome == "cancel acknowledged"
    stopped = Attempt.objects.get(pk=attempt.pk)
    assert stopped.state == Attempt.State.STOPPED
    assert stopped.submitted_at is None
    assert CaseEvent.objects.filter(case=case, action="cases.attempt.worker_stopped").exists()

    case.refresh_from_db()
    assert case.status in {Status.CANCELLED, Status.HELD}, (case.status, case.waiting_reason)
    if case.status == Status.HELD:
        assert case.next_check_at is not None
    else:
        assert CancellationRequest.objects.get(case=case).outcome == "cancelled"


# --- query counts --------------------------------------------------------------------------------


def _with_long_history(case: Case, lead, extra: int = 19) -> Case:
    """Add ``extra`` evidence references, each with its audit event, through the service."""
    for n in range(extra):
        case.refresh_from_db()
        evidence_record(
            case=case,
            expected_version=case.version,
            actor=lead,
            source_system=EvidenceReference.Source.EMAIL,
            external_reference=f"msg-{n}",
            kind="customer_message",
            permitted_basis=EvidenceReference.Basis.CONTRACT,
            summary=f"Customer message {n}",
        )
    case.refresh_from_db()
    return case


def _count(func) -> int:
    with CaptureQueriesContext(connection) as queries:
        func()
    return len(queries)


def test_claim_query_count_does_not_grow_with_the_case_history(
    approved_case, lead, django_assert_max_num_queries
):
    short = approved_case()
    long = _with_long_history(approved_case(), lead)
    assert (
        CaseEvent.objects.filter(case=long).count()
        >= CaseEvent.objects.filter(case=short).count() + 19
    )
    bound = CLAIM_QUERIES[connection.vendor]

    with django_assert_max_num_queries(bound):
        short_count = _count(lambda: case_claim(case_id=short.pk, worker=WORKER))
    with django_assert_max_num_queries(bound):
        long_count = _count(lambda: case_claim(case_id=long.pk, worker=WORKER))

    assert short_count == long_count, (short_count, long_count)


def test_recording_a_confirmed_apply_query_count_does_not_grow_with_the_case_history(
    approved_case, lead, django_assert_max_num_queries
):
    short = approved_case()
    long = _with_long_history(approved_case(), lead)
    attempts = [case_claim(case_id=c.pk, worker=WORKER) for c in (short, long)]
    bound = RECORD_APPLIED_QUERIES[connection.vendor]
    counts = []

    for attempt in attempts:
        result = OperationResult(
            operation_key=attempt.operation.key, status="applied", order_version=2, replayed=False
        )
        with django_assert_max_num_queries(bound):
            counts.append(_count(lambda a=attempt, r=result: attempt_record_applied(a, WORKER, r)))

    assert counts[0] == counts[1], counts
    for attempt in attempts:
        operation = Operation.objects.get(pk=attempt.operation_id)
        assert operation.confirmed_at is not None
        assert operation.result_order_version == 2
        assert Attempt.objects.get(pk=attempt.pk).last_confirmed_step == Attempt.Step.APPLIED


def test_claim_on_a_claimed_case_is_refused_with_the_reason(approved_case, settings):
    case = approved_case()
    first = case_claim(case_id=case.pk, worker=WORKER)

    with pytest.raises(ClaimRefused) as refused:
        case_claim(case_id=case.pk, worker=Worker("worker:test:2"))

    assert refused.value.extra["reason"] == "claimed"
    assert first.reference in refused.value.detail
    assert Attempt.objects.filter(case=case).count() == 1
    lease = dt.timedelta(seconds=settings.LEASES["apply"]["lease_seconds"])
    assert first.lease_expires_at - first.claimed_at == lease


def test_claim_made_on_a_stale_view_of_the_case_is_refused(approved_case):
    """A claim says which version it saw: one made on an older version than the case has now is
    refused, even though the case is ready and every guard holds."""
    case = approved_case()

    with pytest.raises(ClaimRefused) as refused:
        case_claim(case_id=case.pk, worker=WORKER, expected_version=case.version - 1)

    assert refused.value.extra["reason"] == "version_changed"
    assert not Attempt.objects.filter(case=case).exists()
    assert Case.objects.get(pk=case.pk).status == Status.READY
    assert case_claim(case_id=case.pk, worker=WORKER, expected_version=case.version)
