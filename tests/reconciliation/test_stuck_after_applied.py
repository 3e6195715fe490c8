"""Review: a case whose change is proven applied must not be left 'ready' where every claim is
refused forever (invariant 7: every non-terminal status has a way forward)."""

from __future__ import annotations

import datetime as dt

import pytest

from approvals.models import Operation
from cases.kernel import Worker
from cases.models import Attempt, Status
from cases.services import case_cancel_request
from reconciliation.apply import _apply, apply_case
from reconciliation.claims import attempts_expire_leases, case_claim
from reconciliation.client import OrderSystemClient
from reconciliation.revocation import case_revoke
from reconciliation.settle import case_reconcile

pytestmark = pytest.mark.order_system

WORKER = Worker("worker:review:1")


def _applied_ops(order_system) -> list[dict]:
    return order_system.state("ORD-7731")["operations"]


def _assert_case_can_move_on(case):
    """Two dispatcher rounds later the case is either finished or with a person, never a
    'ready' that no worker can claim."""
    outcomes = [apply_case(case_id=case.pk) for _ in range(2)]
    case.refresh_from_db()
    stuck = case.status == Status.READY and all(o.startswith("refused") for o in outcomes)
    assert not stuck, (case.status, case.waiting_on, case.waiting_reason, outcomes)


def test_cancel_requested_worker_whose_lease_expires_after_a_confirmed_apply(
    approved_case, live_orders, agent
):
    case = approved_case()
    claimed = case_claim(case_id=case.pk, worker=WORKER)
    attempt = Attempt.objects.select_related("operation", "case__account").get(pk=claimed.pk)
    with OrderSystemClient.from_settings() as client:
        assert _apply(attempt, client, WORKER) == "confirmed"
    # ...the worker goes silent before notifying; the customer asks to cancel meanwhile.
    case_cancel_request(case=case, actor=agent, reason="please cancel", via="api")
    assert attempts_expire_leases(now=attempt.lease_expires_at + dt.timedelta(seconds=1)) == 1

    case.refresh_from_db()
    assert Operation.objects.get(case=case).confirmed_at is not None
    assert len(_applied_ops(live_orders)) == 1
    # Actual: ready, waiting on a worker, every claim refused "cancel_requested".
    _assert_case_can_move_on(case)


def test_revoked_held_case_proven_applied_is_not_left_ready_forever(
    approved_case, live_orders, lead
):
    case = approved_case()
    live_orders.set_fault("drop_after_commit", path_prefix="/orders/")
    assert apply_case(case_id=case.pk) == "effect_unknown"
    case_revoke(case=case, actor=lead, reason="customer withdrew")
    case.refresh_from_db()
    assert case.status == Status.HELD

    assert case_reconcile(case_id=case.pk) == "applied"

    case.refresh_from_db()
    assert len(_applied_ops(live_orders)) == 1
    # Actual: ready + revoked -> every claim refused "revoked"; nothing ever settles it.
    _assert_case_can_move_on(case)
