"""Review: settling a held case by hand as "absent" must close the door first.

`case_settle_manually` reads the operation by key but never raises the fence (and accepts the
person's word when the lookup is unreachable). A worker that was paused after deciding to send
can then still apply the same operation after the case was reported cancelled."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from approvals.models import Proposal
from approvals.services import live_approval, proposal_approve
from cases.kernel import Worker
from cases.models import Attempt, CancellationRequest, Status
from cases.services import case_cancel_request
from reconciliation.apply import _mark_submitting
from reconciliation.claims import attempts_expire_leases, case_authorize_apply, case_claim
from reconciliation.client import OrderSystemClient
from reconciliation.exceptions import Conflict
from reconciliation.settle import case_settle_manually
from reconciliation.sources import source_check
from reconciliation.tasks import prepare_proposal

pytestmark = pytest.mark.order_system

WORKER = Worker("worker:review:paused")


def test_manual_absent_settlement_fences_out_the_paused_worker(
    live_orders, make_case, approver, lead, agent
):
    # Supervised (no probe): a lead starts the apply, a worker claims it.
    case = make_case()
    source_check(case_id=case.pk)
    prepare_proposal(case.pk)
    proposal_approve(proposal=Proposal.objects.get(case=case), actor=approver)
    case.refresh_from_db()
    case_authorize_apply(case=case, actor=lead, expected_version=case.version)
    attempt = case_claim(case_id=case.pk, worker=WORKER)
    attempt = Attempt.objects.select_related("operation").get(pk=attempt.pk)
    approval = live_approval(case)
    evidence_version = approval.proposal.evidence_order_version
    # a1 passed its last heartbeat and marked the submission, then paused before the bytes left.
    assert _mark_submitting(attempt)
    assert attempts_expire_leases(now=timezone.now() + dt.timedelta(hours=1)) == 1
    case.refresh_from_db()
    assert case.status == Status.HELD

    case_cancel_request(case=case, actor=agent, reason="customer cancels", via="api")
    case.refresh_from_db()
    outcome = case_settle_manually(
        case=case,
        actor=lead,
        outcome="absent",
        expected_version=case.version,
        external_reference="TICKET-9",
        summary="The order screen shows the old date",
    )
    case.refresh_from_db()
    assert outcome == "cancelled"
    assert case.status == Status.CANCELLED
    assert CancellationRequest.objects.get(case=case).outcome == "cancelled"

    # a1 wakes and its request goes out with its (old) token.
    with OrderSystemClient.from_settings() as client, pytest.raises(Conflict) as refused:
        client.apply_operation(
            attempt.operation.order_id,
            operation_key=attempt.operation.key,
            change=attempt.operation.change,
            expected_version=evidence_version,
            fencing_token=attempt.fencing_token,
            approval_grant=approval.grant,
        )
    assert refused.value.error == "stale_fencing_token"
    assert live_orders.state("ORD-7731")["operations"] == []


def test_manual_applied_settlement_is_refused_when_the_consistent_lookup_does_not_know_it(
    approved_case, live_orders, lead
):
    """The mirror image of SettlementContradicted: a person can declare "applied" (even with
    no order version: a matching date on a screen) while the consistent lookup answers
    unknown_operation. The case resumes, tells the customer the delivery moved and closes done,
    although the order system never applied the operation."""
    from django.core import mail

    from reconciliation.apply import apply_case
    from reconciliation.settle import SettlementContradicted

    case = approved_case()
    case_claim(case_id=case.pk, worker=WORKER)  # claims, then goes silent before sending
    assert attempts_expire_leases(now=timezone.now() + dt.timedelta(hours=1)) == 1
    case.refresh_from_db()
    assert case.status == Status.HELD

    with pytest.raises(SettlementContradicted):
        case_settle_manually(
            case=case,
            actor=lead,
            outcome="applied",
            expected_version=case.version,
            external_reference="SCREEN-1",
            summary="The order screen shows the requested Friday",
        )

    # (What happens today, for the report:)
    apply_case(case_id=case.pk)
    case.refresh_from_db()
    assert not (case.status == Status.DONE and live_orders.state("ORD-7731")["operations"] == []), (
        f"done and {len(mail.outbox)} customer mail(s) sent, but nothing was applied"
    )
