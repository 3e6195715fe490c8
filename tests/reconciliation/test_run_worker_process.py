"""Whole workers as real processes: ``manage.py run_worker`` (its own loop) and ``manage.py
qcluster`` on the Redis and the ORM broker, killed with SIGKILL mid-task. Work comes back from the
database (a due ``next_check_at`` or an attempt's lease), never from the broker.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from django.db import connection
from django.utils import timezone

from cases.models import Attempt, Case, Status
from tests.support.order_system import DEFAULT_GRANT_KEY
from tests.support.proc_worker import Proc, wait_for

pytestmark = [
    pytest.mark.order_system,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]

ORDER = "ORD-7731"
LEASE = 3.0  # the apply (and shortest) lease: the sweep runs every LEASE / 2 s
GRACE = 2.0  # a sweep pass plus process scheduling


def _env(live_orders, tmp_path, **extra: str) -> dict[str, str]:
    return {
        "ORDER_SYSTEM_URL": live_orders.base_url,
        "APPROVAL_GRANT_KEY": DEFAULT_GRANT_KEY,
        "HOLDFAST_STATE_DIR": str(tmp_path / "worker-state"),
        "APPLY_LEASE_SECONDS": str(LEASE),
        "APPLY_HEARTBEAT_SECONDS": "0.5",
        "ORDER_SYSTEM_READ_TIMEOUT": "30",
        "HOLD_FIRST_CHECK_SECONDS": "600",  # the test reads the hold before reconciliation
        **extra,
    }


def _status(case: Case) -> str:
    return Case.objects.filter(pk=case.pk).values_list("status", flat=True).get()


def test_a_worker_killed_mid_apply_leaves_the_case_applying_only_lease_plus_seconds(
    approved_case, live_orders, tmp_path
):
    case = approved_case()
    Case.objects.filter(pk=case.pk).update(next_check_at=timezone.now())
    live_orders.set_fault("latency", seconds=20, path_prefix=f"/orders/{ORDER}/operations")
    env = _env(live_orders, tmp_path)
    with Proc("run_worker", env=env) as first:
        attempt = wait_for(
            lambda: Attempt.objects.filter(case=case, submitted_at__isnull=False).first(),
            timeout=20,
            what=lambda: f"the worker to claim and send\n{first.output()}",
        )
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(timeout=10)
    with Proc("run_worker", env=env) as second:
        wait_for(
            lambda: _status(case) != Status.APPLYING,
            timeout=LEASE + 15,
            interval=0.05,
            what=lambda: f"the case to leave applying\n{second.output()}",
        )
        left = timezone.now()
    attempt.refresh_from_db()
    past = (left - attempt.lease_expires_at).total_seconds()
    print(f"\napplying past lease expiry: {past:.2f} s (lease {LEASE:g} s)")
    assert _status(case) == Status.HELD
    assert attempt.state == Attempt.State.LEASE_EXPIRED
    assert past <= LEASE / 2 + GRACE, past


def _terminate_other_backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def test_run_worker_survives_a_dropped_database_connection_and_finishes_a_case(
    make_case, live_orders, autonomous, tmp_path
):
    with Proc("run_worker", env=_env(live_orders, tmp_path)) as worker:
        wait_for(lambda: "Worker running" in worker.output(), timeout=15, what="the worker")
        time.sleep(0.5)  # it holds its connection (first pass done)
        assert _terminate_other_backends() >= 1
        wait_for(
            lambda: "Database connection lost" in worker.output(),
            timeout=10,
            what=lambda: f"the worker to notice\n{worker.output()}",
        )
        case = make_case()
        wait_for(
            lambda: _status(case) == Status.AWAITING_REVIEW,
            timeout=20,
            what=lambda: f"the worker to bring the case to review\n{worker.output()}",
        )
        assert worker.process.poll() is None, worker.output()


@pytest.mark.parametrize("broker", ["redis", "orm"])
def test_a_cluster_worker_killed_during_prepare_is_re_driven_from_the_database(
    broker, broker_env, make_case, live_orders, autonomous, tmp_path
):
    """On either broker: the ORM broker would redeliver only after its retry window (~2 min),
    Redis never; the case's due time brings it back within a lease."""
    env = _env(
        live_orders,
        tmp_path,
        **broker_env,
        PREPARE_TEST_DELAY_SECONDS="4",
        PREPARE_LEASE_SECONDS="3",
        PREPARE_HEARTBEAT_SECONDS="1",
    )
    with Proc("qcluster", env=env) as cluster:
        case = make_case()
        Case.objects.filter(pk=case.pk).update(next_check_at=timezone.now())
        found = wait_for(
            lambda: re.search(rf"prepare_proposal\({case.pk}\) in process (\d+)", cluster.output()),
            timeout=15,
            what=lambda: f"the cluster to start preparing\n{cluster.output()}",
        )
        os.kill(int(found.group(1)), signal.SIGKILL)
        killed = time.monotonic()
        wait_for(
            lambda: _status(case) == Status.AWAITING_REVIEW,
            timeout=20,
            interval=0.1,
            what=lambda: f"the re-driven preparation\n{cluster.output()}",
        )
        print(f"\nreview {time.monotonic() - killed:.1f} s after the worker was killed")
        pids = re.findall(rf"prepare_proposal\({case.pk}\) in process (\d+)", cluster.output())
        assert len(set(pids)) >= 2, cluster.output()  # another worker prepared it
