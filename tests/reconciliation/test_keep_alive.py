"""A slow but healthy worker keeps its lease by heartbeating during the call."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections

from cases.append_only import maintenance
from cases.models import Attempt
from reconciliation.apply import apply_case
from reconciliation.claims import attempts_expire_leases

pytestmark = [
    pytest.mark.order_system,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]


def test_heartbeats_during_a_slow_call_keep_the_lease_and_the_watchdog_away(
    approved_case, live_orders, settings
):
    settings.LEASES = {**settings.LEASES, "apply": {"lease_seconds": 1.5, "heartbeat_seconds": 0.3}}
    case = approved_case()
    live_orders.set_fault("latency", path_prefix="/orders/ORD-7731/operations", seconds=3)
    outcome = {}

    def work():
        try:
            outcome["value"] = apply_case(case_id=case.pk)
        finally:
            connections.close_all()

    worker = threading.Thread(target=work)
    worker.start()
    time.sleep(2.5)  # longer than the lease: without heartbeats it would have run out
    expired_during_call = attempts_expire_leases()
    worker.join(timeout=30)

    assert expired_during_call == 0
    attempt = Attempt.objects.get(case=case)
    assert attempt.heartbeat_at > attempt.claimed_at
    assert outcome["value"] == "done"
    case.refresh_from_db()
    assert case.status == "done"


def test_one_heartbeat_thread_renews_every_waiting_attempt_and_says_when_a_lease_is_lost(
    approved_case, settings
):
    from cases.kernel import Worker
    from reconciliation.claims import case_claim, keep_alive
    from reconciliation.restore_detection import source_verified

    settings.LEASES = {**settings.LEASES, "apply": {"lease_seconds": 5, "heartbeat_seconds": 0.2}}
    source_verified()
    attempt = case_claim(case_id=approved_case().pk, worker=Worker("keep-alive-test"))

    def beaters() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "holdfast-heartbeats"]

    with keep_alive(attempt) as lost:
        time.sleep(0.7)  # three heartbeat intervals
        first = Attempt.objects.get(pk=attempt.pk).heartbeat_at
        assert first is not None
        assert first > attempt.claimed_at
        assert not lost.is_set()
        # Fenced meanwhile (a new owner's token): the next heartbeat is refused.
        with maintenance():
            Attempt.objects.filter(pk=attempt.pk).update(
                fencing_token=attempt.fencing_token + 10**6
            )
        assert lost.wait(3), "the refused heartbeat was not reported"
    for _ in range(3):  # calls one after another: no thread of their own
        with keep_alive(attempt):
            pass
    assert len(beaters()) == 1
    # Nobody waits: the thread lets its database connection go.
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and _other_backends():
        time.sleep(0.05)
    assert not _other_backends()


def _other_backends() -> int:
    """Connections to this test database other than this thread's (here only the heartbeat
    thread opens one)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def test_calls_one_after_another_do_not_wake_the_heartbeat_thread_each_time():
    """Each wake of the heartbeat thread is a switch of threads (on a busy machine, a wait for
    a core): a worker's calls, one after another and each shorter than the heartbeat
    interval, wake it about once an interval, not at each call's start and end."""
    from types import SimpleNamespace

    from reconciliation.claims import _Heartbeats

    beats = _Heartbeats()
    attempt = SimpleNamespace(pk=1, fencing_token=1, reference="D-1-a1")
    for _ in range(100):
        waiting = beats.wait_on(attempt, 30.0)
        time.sleep(0.002)  # the call (a write to the order system)
        beats.done(waiting)
        time.sleep(0.001)  # the worker's own steps until its next call
    time.sleep(0.2)  # the first call started the thread: let it settle into its wait
    assert beats.wakes <= 2, beats.wakes
    # A call due sooner than the thread's planned wake wakes it at once.
    before = beats.wakes
    soon = beats.wait_on(attempt, 1.0)
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline and beats.wakes == before:
        time.sleep(0.01)
    beats.done(soon)
    assert beats.wakes > before, "a call due sooner than the thread's planned wake waited"
