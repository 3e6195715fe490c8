"""Settling a held case from evidence: close the door (fence), then look (consistent lookup).

Every test talks to the live reference order system and checks what it really holds: how many
operations were applied, under which key and token, and where its fence stands.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.core import mail
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from approvals.models import Operation, Proposal
from cases.kernel import Worker
from cases.models import Attempt, CaseEvent, EvidenceReference, Status
from reconciliation.apply import apply_case
from reconciliation.claims import attempts_expire_leases, case_authorize_apply, case_claim
from reconciliation.client import OrderSystemClient
from reconciliation.exceptions import Conflict
from reconciliation.settle import SettlementContradicted, case_reconcile, case_settle_manually

pytestmark = pytest.mark.order_system

WORKER = Worker("worker:test:settle")


def _operations(order_system, order_id="ORD-7731") -> list[dict]:
    return order_system.state(order_id)["operations"]


def _held_after_dropped_response(approved_case, live_orders):
    """A case whose change was applied at the order system but whose answer never came back."""
    case = approved_case()
    live_orders.set_fault("drop_after_commit", path_prefix="/orders/")
    assert apply_case(case_id=case.pk) == "effect_unknown"
    case.refresh_from_db()
    assert case.status == Status.HELD
    assert len(_operations(live_orders)) == 1
    return case


def _held_before_submit(approved_case):
    """A case whose worker claimed it and went silent before sending anything: the watchdog
    holds it once the lease has run out."""
    case = approved_case()
    attempt = case_claim(case_id=case.pk, worker=WORKER)
    assert attempts_expire_leases(now=timezone.now() + dt.timedelta(hours=1)) == 1
    case.refresh_from_db()
    assert case.status == Status.HELD
    return case, Attempt.objects.get(pk=attempt.pk)


def _last_event(case, action: str) -> CaseEvent:
    return CaseEvent.objects.filter(case=case, action=action).order_by("-id").first()


def test_dropped_response_then_reconcile_resumes_the_steps_and_applies_nothing_again(
    approved_case, live_orders
):
    case = _held_after_dropped_response(approved_case, live_orders)
    first = Attempt.objects.get(case=case)

    assert case_reconcile(case_id=case.pk) == "applied"

    case.refresh_from_db()
    assert case.status == Status.READY  # the steps after apply resume
    operation = Operation.objects.get(case=case)
    state = live_orders.state("ORD-7731")
    assert operation.confirmed_at is not None
    assert operation.result_order_version == state["order"]["version"] == 2
    assert case.last_checked_order_version == 2
    assert EvidenceReference.objects.filter(
        case=case, kind="operation_lookup", external_reference=f"operation:{operation.key}"
    ).exists()
    # Close the door: the fence is above every token any attempt of the case held.
    fenced = _last_event(case, "cases.case.transitioned").detail["fence_token"]
    assert state["fence_token"] >= fenced > first.fencing_token

    assert apply_case(case_id=case.pk) == "done"

    case.refresh_from_db()
    assert case.status == Status.DONE
    operations = _operations(live_orders)
    assert len(operations) == 1
    assert operations[0]["operation_key"] == f"DATE-{case.number}-1"
    resumed = Attempt.objects.get(case=case, sequence=2)
    assert resumed.submitted_at is None  # notify and close ran; the change was not sent again
    assert resumed.state == Attempt.State.SUCCEEDED
    assert Operation.objects.get(case=case).notified_at is not None
    assert len(mail.outbox) == 1


def test_a_lagging_search_not_found_does_not_matter_the_consistent_lookup_decides(
    approved_case, live_orders
):
    live_orders.set_fault("search_lag", seconds=60)
    case = _held_after_dropped_response(approved_case, live_orders)
    operation = Operation.objects.get(case=case)
    with OrderSystemClient.from_settings() as client:
        assert client.search_operation(operation.key) is None  # the lagging index: "not found"

    assert case_reconcile(case_id=case.pk) == "applied"

    case.refresh_from_db()
    assert case.status == Status.READY
    operation.refresh_from_db()
    assert operation.result_order_version == 2


def test_an_unreachable_consistent_lookup_keeps_the_case_held_with_a_reason_and_backoff(
    approved_case, live_orders, settings
):
    settings.RETRY_JITTER = 0
    case = _held_after_dropped_response(approved_case, live_orders)
    live_orders.set_fault("unavailable", path_prefix="/operations/", times=None)
    checks = []

    for _ in range(2):
        before = timezone.now()
        assert case_reconcile(case_id=case.pk) == "still held"
        case.refresh_from_db()
        checks.append((case.next_check_at - before).total_seconds())
        assert case.status == Status.HELD
        assert case.waiting_on == "owner"
        assert "consistent lookup failed" in case.waiting_reason
        assert case.owner.username == "lead"

    assert 0 < checks[0] < checks[1]  # a next check on a growing, bounded backoff
    assert Operation.objects.get(case=case).confirmed_at is None
    event = _last_event(case, "reconciliation.still_unknown")
    assert event.detail["verdict"] == "unknown"
    assert "next check" in event.reason

    live_orders.clear_faults()
    assert case_reconcile(case_id=case.pk) == "applied"
    assert len(_operations(live_orders)) == 1


def test_a_failed_fence_keeps_the_case_held(approved_case, live_orders):
    case = _held_after_dropped_response(approved_case, live_orders)
    live_orders.set_fault("unavailable", path_prefix="/orders/ORD-7731/fence")

    assert case_reconcile(case_id=case.pk) == "still held"

    case.refresh_from_db()
    assert case.status == Status.HELD
    assert "fence could not be raised" in case.waiting_reason
    assert case.next_check_at is not None
    assert Operation.objects.get(case=case).confirmed_at is None


def test_fence_then_consistent_not_found_lets_a_new_attempt_apply_the_same_operation(
    approved_case, live_orders, grant_key
):
    case, first = _held_before_submit(approved_case)
    assert _operations(live_orders) == []

    assert case_reconcile(case_id=case.pk) == "absent"

    case.refresh_from_db()
    assert case.status == Status.READY
    state = live_orders.state("ORD-7731")
    assert state["fence_token"] > first.fencing_token
    # The old worker waking now is refused by the order system: the door is closed.
    approval = Proposal.objects.get(case=case).approvals.get()
    operation = Operation.objects.get(case=case)
    with OrderSystemClient.from_settings() as client, pytest.raises(Conflict) as refused:
        client.apply_operation(
            "ORD-7731",
            operation_key=operation.key,
            change=operation.change,
            expected_version=1,
            fencing_token=first.fencing_token,
            approval_grant=approval.grant,
        )
    assert refused.value.error == "stale_fencing_token"

    assert apply_case(case_id=case.pk) == "done"

    second = Attempt.objects.get(case=case, sequence=2)
    assert second.fencing_token > state["fence_token"] > first.fencing_token
    assert second.operation_id == first.operation_id
    assert Operation.objects.filter(case=case).count() == 1
    operations = _operations(live_orders)
    assert len(operations) == 1
    assert operations[0]["operation_key"] == f"DATE-{case.number}-1"
    assert operations[0]["fencing_token"] == second.fencing_token
    case.refresh_from_db()
    assert case.status == Status.DONE


def _supervised_held_case(live_orders, make_case, approver, lead):
    """No capability profile (review-only): a lead starts the apply, whose answer is lost."""
    from approvals.services import proposal_approve
    from reconciliation.sources import source_check
    from reconciliation.tasks import prepare_proposal

    case = make_case()
    source_check(case_id=case.pk)
    prepare_proposal(case.pk)
    proposal_approve(proposal=Proposal.objects.get(case=case), actor=approver)
    case.refresh_from_db()
    case_authorize_apply(case=case, actor=lead, expected_version=case.version)
    live_orders.set_fault("drop_after_commit", path_prefix="/orders/")
    assert apply_case(case_id=case.pk) == "effect_unknown"
    case.refresh_from_db()
    assert case.status == Status.HELD
    return case


def test_in_supervised_autonomy_a_worker_settles_nothing_and_a_lead_settles_from_evidence(
    live_orders, make_case, approver, lead
):
    case = _supervised_held_case(live_orders, make_case, approver, lead)
    fence_before = live_orders.state("ORD-7731")["fence_token"]

    assert case_reconcile(case_id=case.pk) == "manual settlement needed"

    case.refresh_from_db()
    assert case.status == Status.HELD
    assert case.waiting_on == "owner"
    assert "not autonomous" in case.waiting_reason
    assert Operation.objects.get(case=case).confirmed_at is None
    assert live_orders.state("ORD-7731")["fence_token"] == fence_before  # nothing was done

    # A person cannot declare absent what the consistent lookup shows applied.
    with pytest.raises(SettlementContradicted):
        case_settle_manually(
            case=case,
            actor=lead,
            outcome="absent",
            expected_version=case.version,
            external_reference="TICKET-1",
            summary="The order screen shows the old date",
        )
    case.refresh_from_db()
    assert case.status == Status.HELD

    assert (
        case_settle_manually(
            case=case,
            actor=lead,
            outcome="applied",
            expected_version=case.version,
            external_reference="TICKET-2",
            summary="The order system shows the operation applied at version 2",
            order_version=2,
        )
        == "applied"
    )

    case.refresh_from_db()
    assert case.status == Status.READY
    assert EvidenceReference.objects.filter(
        case=case, kind="manual_settlement", external_reference="TICKET-2"
    ).exists()
    assert Operation.objects.get(case=case).result_order_version == 2
    assert apply_case(case_id=case.pk) == "done"
    assert len(_operations(live_orders)) == 1


def test_held_queue_lists_the_case_and_its_reconcile_now_action_settles_it(
    approved_case, live_orders, lead, client
):
    case = _held_after_dropped_response(approved_case, live_orders)
    client.force_login(lead)
    url = reverse("admin:cases_heldcase_changelist")

    page = client.get(url)

    assert page.status_code == 200
    assert [c.pk for c in page.context["cl"].result_list] == [case.pk]
    html = page.content.decode()
    assert case.reference in html
    assert "lead" in html  # the owner
    assert "no_answer" in case.last_error
    assert escape(case.last_error) in html  # why it waits
    assert timezone.localtime(case.next_check_at).strftime("%Y-%m-%d %H:%M") in html

    response = client.post(url, {"action": "reconcile_now", "_selected_action": [case.pk]})

    assert response.status_code == 302
    case.refresh_from_db()
    assert case.status == Status.READY
    assert _last_event(case, "cases.case.transitioned").actor_label == "lead"
    assert client.get(url).context["cl"].result_count == 0
