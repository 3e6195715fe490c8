"""Review: a reconciler's finding is proof only for the case as it was when it fenced and
looked. `case_reconcile` passes the version it read to `_record_finding`, which ignores it, so a
slow reconciler can record a stale "absent" over a newer hold whose write did land."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from cases.kernel import Worker
from cases.models import CancellationRequest, Status
from cases.services import case_cancel_request
from reconciliation.apply import apply_case
from reconciliation.claims import attempts_expire_leases, case_claim
from reconciliation.client import OrderSystemClient
from reconciliation.exceptions import UnknownOperation
from reconciliation.settle import case_reconcile

pytestmark = pytest.mark.order_system

WORKER = Worker("worker:review:stale")


def test_a_slow_reconciler_does_not_settle_a_newer_hold_from_its_stale_lookup(
    approved_case, live_orders, agent
):
    case = approved_case()
    case_claim(case_id=case.pk, worker=WORKER)  # a1 claims and goes silent before sending
    assert attempts_expire_leases(now=timezone.now() + dt.timedelta(hours=1)) == 1
    case.refresh_from_db()
    assert case.status == Status.HELD

    interleaved: list[bool] = []

    class SlowLookupClient(OrderSystemClient):
        """Reconciler R1: its lookup answers 'unknown operation' and then R1 is slow to record
        it. Meanwhile the person's 'reconcile now' (R2) settles absent, a2 sends the same
        operation whose answer is dropped (effect unknown, really applied), and the customer
        cancels during the new hold."""

        def get_operation(self, operation_key):
            try:
                return super().get_operation(operation_key)
            except UnknownOperation:
                if not interleaved:
                    interleaved.append(True)
                    assert case_reconcile(case_id=case.pk) == "absent"  # R2
                    live_orders.set_fault("drop_after_commit", path_prefix="/orders/")
                    assert apply_case(case_id=case.pk) == "effect_unknown"  # a2: landed
                    case_cancel_request(case=case, actor=agent, reason="cancel", via="api")
                raise

    with SlowLookupClient.from_settings() as slow:
        outcome = case_reconcile(case_id=case.pk, client=slow)  # R1 records last

    case.refresh_from_db()
    assert len(live_orders.state("ORD-7731")["operations"]) == 1  # the order DID change
    assert case.status != Status.CANCELLED, outcome
    assert CancellationRequest.objects.get(case=case).outcome != "cancelled"


def test_an_order_event_recorded_during_the_investigation_does_not_discard_the_finding(
    approved_case, live_orders, settings
):
    """Found by ``make drill`` (delayed_not_found): the order system's webhook for the very
    operation being reconciled arrived mid-investigation; recording it moved the case's version
    and the proof of the change was thrown away. A recorded fact is not a new hold."""
    from tests.support.order_system import DEFAULT_WEBHOOK_SECRET
    from tests.support.webhooks import post_order_event

    settings.ORDER_WEBHOOK_SECRET = DEFAULT_WEBHOOK_SECRET
    case = approved_case()
    live_orders.set_fault("drop_after_commit", path_prefix="/orders/ORD-7731/operations")
    assert apply_case(case_id=case.pk) == "effect_unknown"  # landed; the answer was lost
    live_orders.clear_faults()
    version = live_orders.state("ORD-7731")["order"]["version"]

    class WebhookMeanwhile(OrderSystemClient):
        def get_operation(self, operation_key):
            post_order_event("ORD-7731", "evt-during-lookup", version)
            return super().get_operation(operation_key)

    with WebhookMeanwhile.from_settings() as client:
        outcome = case_reconcile(case_id=case.pk, client=client)

    case.refresh_from_db()
    recorded = case.events.get(action="reconciliation.order_event.recorded")
    assert recorded.detail["event_id"] == "evt-during-lookup"  # it did land mid-lookup
    assert outcome == "applied", outcome
    assert case.status == Status.READY  # proven applied: the steps after the apply resume


def test_a_finding_about_a_case_that_left_the_hold_and_came_back_is_discarded(
    approved_case, live_orders
):
    """No newer attempt, but the case's status moved while the reconciler looked (another
    reconciler proved it absent, then a restore held it again): the finding describes a hold
    that is over, so it is discarded, recorded as such, and the case is looked at again at
    once."""
    from cases.codes import Action
    from cases.kernel import apply_transition, case_step
    from cases.models import CaseEvent

    case = approved_case()
    case_claim(case_id=case.pk, worker=WORKER)  # claims and goes silent before sending
    assert attempts_expire_leases(now=timezone.now() + dt.timedelta(hours=1)) == 1

    class SettledAndHeldAgainDuringTheLook(OrderSystemClient):
        def get_operation(self, operation_key):
            with case_step(case.pk, actor=WORKER) as current:
                apply_transition(current, "settle_absent", actor=WORKER, reason="proven absent")
                apply_transition(current, "hold_for_recovery", actor=WORKER, reason="restored")
            return super().get_operation(operation_key)

    with SettledAndHeldAgainDuringTheLook.from_settings() as client:
        outcome = case_reconcile(case_id=case.pk, client=client)

    assert outcome == "skipped: changed during the investigation"
    case.refresh_from_db()
    assert case.status == Status.HELD
    assert case.next_check_at <= timezone.now()
    assert CaseEvent.objects.filter(case=case, action=Action.FINDING_DISCARDED).exists()
    assert live_orders.state("ORD-7731")["operations"] == []


def test_a_cancellation_asked_for_during_the_look_is_settled_with_the_finding(
    approved_case, live_orders, agent
):
    """A cancellation request recorded while the reconciler looked leaves the same hold: the
    finding (absent after the fence) stands and the settlement reads the request under the
    case lock, so the case is cancelled at once and nothing is written."""
    case = approved_case()
    case_claim(case_id=case.pk, worker=WORKER)  # claims and goes silent before sending
    assert attempts_expire_leases(now=timezone.now() + dt.timedelta(hours=1)) == 1

    class CancelDuringTheLook(OrderSystemClient):
        def get_operation(self, operation_key):
            case_cancel_request(case=case, actor=agent, reason="cancel", via="api")
            return super().get_operation(operation_key)

    with CancelDuringTheLook.from_settings() as client:
        outcome = case_reconcile(case_id=case.pk, client=client)

    assert outcome == "cancelled"
    case.refresh_from_db()
    assert case.status == Status.CANCELLED
    assert CancellationRequest.objects.get(case=case).outcome == "cancelled"
    assert live_orders.state("ORD-7731")["operations"] == []
