"""Source check against the reference order system: evidence first, never a guess."""

from __future__ import annotations

import pytest
from django.utils import timezone

from approvals import services
from approvals.models import Approval, Proposal
from cases.models import Case, CaseEvent, EvidenceReference, Status, WaitingOn
from cases.services import case_transition
from reconciliation import tasks as recon_tasks
from reconciliation.sources import source_check

from .conftest import ORDER, in_days, mock_order_client, read_order, reload


@pytest.mark.order_system
def test_source_check_records_evidence_and_moves_case_to_preparing_proposal(
    case, live_orders, enqueued, django_capture_on_commit_callbacks
):
    assert case.status == Status.WAITING_SOURCE
    with django_capture_on_commit_callbacks(execute=True):
        assert source_check(case_id=case.pk) == "checked"

    case = reload(case)
    assert case.status == Status.PREPARING_PROPOSAL
    assert case.last_checked_order_version == 1
    # Due at once: the dispatcher re-drives the preparation if its queued task is lost.
    assert case.next_check_at is not None
    assert case.next_check_at <= timezone.now()
    evidence = EvidenceReference.objects.get(case=case)
    assert evidence.external_reference == f"order:{ORDER}@v1"
    assert evidence.order_version == 1
    assert evidence.source_system == EvidenceReference.Source.ORDER_SYSTEM
    event = CaseEvent.objects.filter(case=case).latest("id")
    assert (event.from_status, event.to_status, event.version) == (
        Status.WAITING_SOURCE,
        Status.PREPARING_PROPOSAL,
        case.version,
    )
    assert event.detail["order_version"] == 1
    assert enqueued == [("reconciliation.tasks.prepare_proposal", case.pk)]


@pytest.mark.order_system
def test_source_check_of_current_order_twice_changes_nothing_the_second_time(case, live_orders):
    assert source_check(case_id=case.pk) == "checked"
    version = reload(case).version
    assert source_check(case_id=case.pk) == "unchanged"
    assert reload(case).version == version
    assert EvidenceReference.objects.filter(case=case).count() == 1


def test_unreachable_source_keeps_case_waiting_with_growing_bounded_backoff(
    case, settings, closed_port
):
    settings.ORDER_SYSTEM_URL = f"http://127.0.0.1:{closed_port}"
    settings.RETRY_BASE_SECONDS = 5.0
    settings.RETRY_MAX_SECONDS = 20.0
    settings.RETRY_JITTER = 0.0
    delays = []
    for failures in range(1, 5):
        before = timezone.now()
        assert source_check(case_id=case.pk) == "retry_scheduled"
        after = timezone.now()
        fresh = reload(case)
        assert fresh.status == Status.WAITING_SOURCE
        assert fresh.waiting_on == WaitingOn.ORDER_SYSTEM
        assert fresh.retry_count == failures
        assert fresh.next_check_at > after
        assert "connect_failed" in fresh.last_error
        delays.append((fresh.next_check_at - before).total_seconds())
        assert (fresh.next_check_at - after).total_seconds() <= 20.0

    assert [round(d) for d in delays] == [5, 10, 20, 20]
    failed = CaseEvent.objects.filter(case=case, action="reconciliation.source_check.failed")
    assert [e.detail["failures"] for e in failed.order_by("id")] == [1, 2, 3, 4]
    assert not EvidenceReference.objects.filter(case=case).exists()


@pytest.mark.order_system
def test_unknown_order_sends_case_to_needs_attention_with_the_reason(case, live_orders):
    live_orders.seed(
        orders=[
            {"order_id": "ORD-OTHER", "account_id": "ACC-100", "delivery_date": str(in_days(3))}
        ]
    )
    Case.objects.filter(pk=case.pk).update(order_id="ORD-NOPE")

    assert source_check(case_id=case.pk) == "needs_attention"

    case = reload(case)
    assert case.status == Status.NEEDS_ATTENTION
    assert case.waiting_on == WaitingOn.OWNER
    assert "ORD-NOPE" in case.last_error
    event = CaseEvent.objects.filter(case=case).latest("id")
    assert event.to_status == Status.NEEDS_ATTENTION
    # The words of another account's order: whether an order id exists is never told.
    assert event.reason.startswith("The order system has no order ORD-NOPE of account ACC-100")
    assert "does not know" not in case.last_error
    assert case.last_checked_order_version is None


@pytest.mark.order_system
def test_order_of_another_account_sends_case_to_needs_attention(case, live_orders):
    live_orders.seed(
        accounts=[{"account_id": "ACC-999", "name": "Someone else"}],
        orders=[{"order_id": ORDER, "account_id": "ACC-999", "delivery_date": str(in_days(3))}],
    )

    assert source_check(case_id=case.pk) == "needs_attention"

    case = reload(case)
    assert case.status == Status.NEEDS_ATTENTION
    # The refusal names the case's own account, never the account that owns the order.
    assert "ACC-999" not in case.last_error
    assert "ACC-100" in case.last_error
    assert CaseEvent.objects.filter(case=case).latest("id").reason == case.last_error
    assert not EvidenceReference.objects.filter(case=case).exists()
    assert case.last_checked_order_version is None


@pytest.mark.order_system
def test_source_check_after_the_order_moved_invalidates_proposal_and_approval(
    case, live_orders, submit, agent, approver
):
    assert source_check(case_id=case.pk) == "checked"
    proposal = submit(case, agent)
    approval = services.proposal_approve(proposal=proposal, actor=approver)
    assert reload(case).status == Status.READY

    live_orders.seed(
        orders=[
            {
                "order_id": ORDER,
                "account_id": "ACC-100",
                "delivery_date": str(in_days(4)),
                "version": 2,
            }
        ]
    )
    assert source_check(case_id=case.pk) == "invalidated"

    case = reload(case)
    proposal.refresh_from_db()
    approval.refresh_from_db()
    assert proposal.status == Proposal.Status.INVALIDATED
    assert "version 1 to 2" in proposal.status_reason
    assert approval.revoked_at is not None
    assert not approval.is_live()
    assert case.status == Status.WAITING_SOURCE
    assert case.waiting_on == WaitingOn.ORDER_SYSTEM
    assert services.live_approval(case) is None
    event = CaseEvent.objects.filter(case=case).latest("id")
    assert event.detail["revoked"] == [approval.reference]
    assert event.detail["order_version"] == 2

    # The next check reads the current evidence; the new proposal rests on it.
    assert source_check(case_id=case.pk) == "checked"
    case = reload(case)
    assert case.status == Status.PREPARING_PROPOSAL
    assert case.last_checked_order_version == 2
    fresh = submit(case, agent)
    assert fresh.pk != proposal.pk
    assert fresh.evidence_order_version == 2
    assert fresh.evidence_ids == list(
        EvidenceReference.objects.filter(case=case, order_version=2).values_list("pk", flat=True)
    )
    assert Approval.objects.filter(proposal=fresh).count() == 0
    assert fresh.change == case.change


def test_recheck_after_escalating_an_approved_case_can_prepare_a_new_proposal(
    approval, proposal, lead, settings, closed_port
):
    """An approved case whose order turns out to be another account's goes to a person; once
    they have it re-read, the case must be able to get a proposal again."""
    settings.ORDER_SYSTEM_URL = f"http://127.0.0.1:{closed_port}"  # slot advice only
    with mock_order_client(account_id="ACC-999") as client:
        assert source_check(case_id=proposal.case_id, client=client) == "needs_attention"
    case = reload(proposal.case)
    case_transition(
        case=case,
        transition="request_source_check",
        expected_version=case.version,
        reason="The customer corrected the order id",
        actor=lead,
    )
    case = read_order(case)
    assert case.status == Status.PREPARING_PROPOSAL

    assert recon_tasks.prepare_proposal(case.pk) == "submitted", (
        f"{approval.reference}'s proposal is still {Proposal.objects.get(pk=proposal.pk).status}:"
        " escalation left it open, so the case can never get a new proposal"
    )
