"""A slow but healthy worker keeps its lease by heartbeating during the call."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections

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
