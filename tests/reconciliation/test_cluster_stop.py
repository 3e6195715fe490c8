"""A worker cluster told to stop (SIGTERM to ``qcluster``) exits promptly, and leaves no case
half-done.

django-q2's sentinel waits for every worker's task to end before it exits. The sweeper is a
long task (three quarters of ``Q_TIMEOUT``) and an apply task drains due cases for up to
``APPLY_DRAIN_SECONDS``: a SIGTERM waited for them (29-40 s measured with the defaults; with
the ``Q_TIMEOUT`` here, over a minute). Both now end after the step under way
(``reconciliation.stopping``).
"""

from __future__ import annotations

import signal
import time

import pytest
from django.utils import timezone
from django_q.models import OrmQ

from cases.models import Attempt, Case, Status
from reconciliation.apply import notify_case
from tests.support.fixtures import days_ahead
from tests.support.order_system import DEFAULT_GRANT_KEY
from tests.support.proc_worker import Proc, wait_for

pytestmark = [
    pytest.mark.order_system,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]

ORDERS = [f"ORD-88{n:02d}" for n in range(8)]
PROMPT = 20.0  # seconds from SIGTERM to exit; the sweeper alone ran on for about 85


def test_a_cluster_told_to_stop_exits_promptly_with_no_case_half_done(
    approved_case, live_orders, account, tmp_path
):
    live_orders.seed(
        orders=[
            {"order_id": o, "account_id": account.reference, "delivery_date": str(days_ahead(3))}
            for o in ORDERS
        ]
    )
    # A date each: a slot holds five.
    cases = [
        approved_case(order_id=order, delivery_date=days_ahead(5 + n))
        for n, order in enumerate(ORDERS)
    ]
    Case.objects.filter(pk__in=[c.pk for c in cases]).update(next_check_at=timezone.now())
    OrmQ.objects.all().delete()  # the tasks the setup enqueued: it ran their work by hand
    # Each apply waits two seconds at the order system: the drain is mid-way when the stop comes.
    live_orders.set_fault("latency", seconds=2, path_prefix="/orders/", times=None)
    env = {
        "ORDER_SYSTEM_URL": live_orders.base_url,
        "APPROVAL_GRANT_KEY": DEFAULT_GRANT_KEY,
        "HOLDFAST_STATE_DIR": str(tmp_path / "worker-state"),
        "Q_TIMEOUT": "120",  # the sweeper would sweep for about 85 s
        "Q_RETRY": "150",
        "Q_WORKERS": "1",  # one apply worker (plus the sweeper's): the drain takes the cases
    }
    with Proc("qcluster", env=env) as cluster:
        wait_for(
            lambda: (
                "'reconciliation.tasks.sweeper'" in cluster.output()
                and Attempt.objects.filter(
                    state=Attempt.State.RUNNING, submitted_at__isnull=False
                ).exists()
            ),
            timeout=60,
            interval=0.05,
            what=lambda: f"the sweeper and an apply under way\n{cluster.output()}",
        )
        cluster.process.send_signal(signal.SIGTERM)  # the main PID, as a process manager does
        told = time.monotonic()
        cluster.process.wait(timeout=120)
        took = time.monotonic() - told
        output = cluster.output()
    print(f"\ncluster exited {took:.1f} s after SIGTERM")
    assert took < PROMPT, output[-4000:]

    # Nothing half-done: every case is done, still ready (never claimed), or applied with only
    # the customer's notification left (its own step, queued on the broker for the next
    # cluster); no other attempt is left running; the order system changed each applied case's
    # order once and no other.
    statuses = dict(Case.objects.filter(pk__in=[c.pk for c in cases]).values_list("pk", "status"))
    assert set(statuses.values()) <= {Status.DONE, Status.READY, Status.APPLYING}, statuses
    assert Status.READY in statuses.values(), output[-4000:]  # the drain stopped early
    notifying = [pk for pk, status in statuses.items() if status == Status.APPLYING]
    running = Attempt.objects.filter(state__in=Attempt.ACTIVE)
    assert set(running.values_list("case_id", flat=True)) == set(notifying)
    assert not running.filter(operation__confirmed_at__isnull=True).exists()
    for pk in notifying:  # the next cluster takes the queued step: the case finishes
        assert notify_case(case_id=pk) == "done"
        statuses[pk] = Case.objects.get(pk=pk).status
    for case in cases:
        applied = live_orders.state(case.order_id)["operations"]
        assert len(applied) == (1 if statuses[case.pk] == Status.DONE else 0), (case, applied)
