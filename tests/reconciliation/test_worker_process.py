"""Drills with a real worker process: paused with SIGSTOP after it claimed and sent, and killed
with SIGKILL after the order system committed. Seed 000: "stop D-41-a1 after it claims Applying
... let the original worker resume late. Check that stale workers cannot change the order."

The worker (``manage.py run_worker --apply REF``) runs on the test's PostgreSQL database and the
live order system, with a 2 s lease. Fault rules at the order system tell the test exactly when
the worker's request arrived (a consumed rule), so the signals land where the drill says.
"""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from cases.fencing import next_fencing_token
from cases.models import Attempt, CaseEvent, Status, WaitingOn
from reconciliation.apply import apply_case
from reconciliation.claims import StaleAttempt, attempt_heartbeat, attempts_expire_leases
from reconciliation.client import OrderSystemClient
from tests.support.order_system import DEFAULT_GRANT_KEY
from tests.support.proc_worker import WorkerProcess, wait_for

pytestmark = [
    pytest.mark.order_system,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]

ORDER = "ORD-7731"
OPERATIONS = f"/orders/{ORDER}/operations"
LATENCY = 4.0  # the paused worker's request sits this long at the order system


def _worker_env(live_orders) -> dict[str, str]:
    return {
        "ORDER_SYSTEM_URL": live_orders.base_url,
        "APPROVAL_GRANT_KEY": DEFAULT_GRANT_KEY,
        "APPLY_LEASE_SECONDS": "2",
        "APPLY_HEARTBEAT_SECONDS": "0.5",
        "ORDER_SYSTEM_READ_TIMEOUT": "30",
    }


def _fault_consumed(live_orders, kind: str) -> bool:
    """The request the rule was set for has reached the order system."""
    return any(f["kind"] == kind and f["times"] == 0 for f in live_orders.faults())


def _wait_until(moment) -> None:
    delay = (moment - timezone.now()).total_seconds()
    if delay > 0:
        time.sleep(delay)


def test_worker_paused_after_sending_cannot_change_the_order_when_it_resumes(
    approved_case, live_orders
):
    case = approved_case()
    before = live_orders.state(ORDER)
    live_orders.set_fault("latency", seconds=LATENCY, path_prefix=OPERATIONS)

    with WorkerProcess(case.reference, env=_worker_env(live_orders)) as worker:
        attempt = wait_for(
            lambda: Attempt.objects.filter(case=case).first(),
            timeout=30,
            what=lambda: f"the worker to claim {case.reference}\n{worker.output()}",
        )
        wait_for(
            lambda: _fault_consumed(live_orders, "latency"),
            timeout=10,
            what="the worker's request to reach the order system",
        )
        arrived = time.monotonic()
        worker.pause()

        attempt.refresh_from_db()
        assert attempt.state == Attempt.State.RUNNING
        assert attempt.submitted_at is not None
        _wait_until(attempt.lease_expires_at)
        time.sleep(0.1)
        # The paused worker's lease ran out: its next heartbeat would be refused...
        with pytest.raises(StaleAttempt):
            attempt_heartbeat(attempt_id=attempt.pk, fencing_token=attempt.fencing_token)
        # ...the watchdog holds the case (it starts no replacement)...
        assert attempts_expire_leases() == 1
        case.refresh_from_db()
        assert case.status == Status.HELD
        assert case.waiting_on == WaitingOn.OWNER
        # ...and reconciliation closes the door at the receiver before anything else.
        fence = next_fencing_token()
        with OrderSystemClient.from_settings() as client:
            assert client.fence(ORDER, fence).min_token == fence
        # The order system now processes the paused worker's request, with the old token.
        time.sleep(max(arrived + LATENCY + 0.5 - time.monotonic(), 0))
        worker.resume()
        assert worker.wait(timeout=30) == 0, worker.output()
        output = worker.output()

    assert f"{case.reference}: late: fenced recorded only" in output, output
    after = live_orders.state(ORDER)
    assert after["operations"] == []
    assert after["order"] == before["order"]  # same version, same date
    assert after["fence_token"] == fence
    attempt.refresh_from_db()
    assert attempt.state == Attempt.State.LEASE_EXPIRED
    late = CaseEvent.objects.get(case=case, action="cases.attempt.late_result_refused")
    assert late.detail == {"attempt": attempt.reference, "outcome": "fenced"}
    assert "stale_fencing_token" in late.reason
    case.refresh_from_db()
    assert case.status == Status.HELD
    assert Attempt.objects.filter(case=case).count() == 1


def test_worker_killed_after_the_order_system_committed_leaves_exactly_one_change(
    approved_case, live_orders
):
    case = approved_case()
    live_orders.set_fault("delay_after_commit", seconds=3.0, path_prefix=OPERATIONS)

    with WorkerProcess(case.reference, env=_worker_env(live_orders)) as worker:
        wait_for(
            lambda: _fault_consumed(live_orders, "delay_after_commit"),
            timeout=30,
            what=lambda: f"the order system to commit the worker's change\n{worker.output()}",
        )
        worker.kill()  # after the commit, before the answer reached it

    attempt = Attempt.objects.get(case=case)
    assert attempt.state == Attempt.State.RUNNING
    assert attempt.submitted_at is not None
    _wait_until(attempt.lease_expires_at)
    time.sleep(0.1)
    assert attempts_expire_leases() == 1

    case.refresh_from_db()
    assert case.status == Status.HELD
    assert case.waiting_on == WaitingOn.OWNER
    attempt.refresh_from_db()
    assert attempt.state == Attempt.State.LEASE_EXPIRED
    operations = live_orders.state(ORDER)["operations"]
    assert [op["operation_key"] for op in operations] == [attempt.operation.key]
    assert operations[0]["fencing_token"] == attempt.fencing_token
    # No second attempt: the watchdog started none and a duplicate task is refused.
    assert apply_case(case_id=case.pk) == "refused: not_ready"
    assert Attempt.objects.filter(case=case).count() == 1
    assert len(live_orders.state(ORDER)["operations"]) == 1
