"""A worker of the real cluster (``manage.py run_cluster``) killed mid-apply: its case is taken
up again by another worker within the apply lease plus two sweep intervals, from its lease and
due time in the database -- never after django-q2's re-delivery of the dead task (``Q_RETRY``,
120 s by default).

The measure (printed): from the SIGKILL to the first thing another worker writes on the case
after the hold (its reconciliation's finding). The lease watchdog holds the case once the dead
worker's lease has run out (at most a sweep later), and a worker-missing hold is due for
reconciliation at once (``HOLD_FIRST_CHECK_SECONDS``, 0 by default), so the same pass
dispatches it.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.utils import timezone

from cases.models import Attempt, Case, CaseEvent, Status
from tests.support.order_system import DEFAULT_GRANT_KEY
from tests.support.proc_worker import Proc, wait_for

pytestmark = [
    pytest.mark.order_system,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]

ORDER = "ORD-7731"
LEASE = 6.0  # the apply lease
SWEEP = 2.0  # SWEEP_INTERVAL_SECONDS


@pytest.mark.parametrize("broker", ["orm", "redis"])
def test_a_worker_killed_mid_apply_has_its_case_taken_up_within_lease_plus_two_sweeps(
    broker, broker_env, approved_case, live_orders, tmp_path
):
    env = {
        "ORDER_SYSTEM_URL": live_orders.base_url,
        "APPROVAL_GRANT_KEY": DEFAULT_GRANT_KEY,
        "HOLDFAST_STATE_DIR": str(tmp_path / "worker-state"),
        "APPLY_LEASE_SECONDS": str(LEASE),
        "APPLY_HEARTBEAT_SECONDS": "1",
        "SWEEP_INTERVAL_SECONDS": str(SWEEP),
        "ORDER_SYSTEM_READ_TIMEOUT": "30",
        **broker_env,
    }
    case = approved_case()
    live_orders.set_fault("latency", seconds=15, path_prefix=f"/orders/{ORDER}/operations")
    with Proc("run_cluster", env=env) as cluster:
        Case.objects.filter(pk=case.pk).update(next_check_at=timezone.now())
        attempt = wait_for(
            lambda: Attempt.objects.filter(case=case, submitted_at__isnull=False).first(),
            timeout=30,
            interval=0.05,
            what=lambda: f"a cluster worker to claim and send\n{cluster.output()}",
        )
        pid = int(attempt.worker.rsplit(":", 1)[1])
        os.kill(pid, signal.SIGKILL)
        killed_at = timezone.now()
        killed = time.monotonic()

        def taken_up() -> CaseEvent | None:
            return (
                CaseEvent.objects.filter(case=case, created_at__gt=killed_at)
                .exclude(actor_label__startswith="watchdog")
                .order_by("pk")
                .first()
            )

        event = wait_for(
            taken_up,
            timeout=LEASE + 60,
            interval=0.05,
            what=lambda: f"another worker to take the case up\n{cluster.output()}",
        )
        took = time.monotonic() - killed
        held = (
            CaseEvent.objects.filter(case=case, to_status=Status.HELD)
            .values_list("created_at", flat=True)
            .first()
        )
    attempt.refresh_from_db()
    assert attempt.state == Attempt.State.LEASE_EXPIRED
    assert held is not None
    print(
        f"\n{broker}: killed mid-apply; held {(held - killed_at).total_seconds():.1f} s and "
        f"taken up again ({event.action} by {event.actor_label}) {took:.1f} s after the kill "
        f"(lease {LEASE:g} s, sweep {SWEEP:g} s, bound {LEASE + 2 * SWEEP:g} s)"
    )
    assert event.actor_label.startswith("reconcile:"), event.actor_label
    assert str(pid) not in event.actor_label
    assert took <= LEASE + 2 * SWEEP, took
