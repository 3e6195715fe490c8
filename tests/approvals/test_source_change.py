"""The order moving past the evidence voids the proposal and any approval resting on it."""

from __future__ import annotations

from django.db import transaction

from approvals import services
from approvals.models import Proposal
from cases.kernel import Worker, lock_case
from cases.models import CaseEvent, Status, WaitingOn

from .conftest import read_order, reload

WORKER = Worker("test:source-change")


def _invalidate(case, order_version):
    with transaction.atomic():
        locked = lock_case(case.pk)
        return services.proposal_invalidate_for_source_change(
            case=locked, order_version=order_version, actor=WORKER, via="inbound event"
        )


def test_source_change_invalidates_the_approved_proposal_and_its_approval(
    approval, proposal, enqueued, django_capture_on_commit_callbacks
):
    case = reload(proposal.case)
    version = case.version
    with django_capture_on_commit_callbacks(execute=True):
        assert _invalidate(case, 2) is True

    case = reload(case)
    proposal.refresh_from_db()
    approval.refresh_from_db()
    assert proposal.status == Proposal.Status.INVALIDATED
    assert "(inbound event)" in proposal.status_reason
    assert approval.revoked_at is not None
    assert "version 2" in approval.revoked_reason
    assert services.live_approval(case) is None
    assert case.status == Status.WAITING_SOURCE
    assert case.waiting_on == WaitingOn.ORDER_SYSTEM
    assert case.next_check_at is not None
    assert case.version == version + 1
    event = CaseEvent.objects.filter(case=case).latest("id")
    assert (event.from_status, event.to_status) == (Status.READY, Status.WAITING_SOURCE)
    assert event.detail["revoked"] == [approval.reference]
    assert event.detail["via"] == "inbound event"
    assert enqueued == [("reconciliation.tasks.source_check", case.pk)]


def test_source_change_invalidates_a_proposal_awaiting_review(proposal):
    assert _invalidate(proposal.case, 2) is True
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.INVALIDATED
    assert reload(proposal.case).status == Status.WAITING_SOURCE


def test_an_event_for_the_version_already_seen_changes_nothing(approval, proposal):
    case = reload(proposal.case)
    assert _invalidate(case, 1) is False
    assert reload(case).version == case.version
    assert reload(case).status == Status.READY
    assert services.live_approval(case) == approval


def test_source_check_of_an_order_that_moved_invalidates_proposal_and_approval(approval, proposal):
    case = read_order(proposal.case, version=3)
    proposal.refresh_from_db()
    approval.refresh_from_db()
    assert proposal.status == Proposal.Status.INVALIDATED
    assert approval.revoked_at is not None
    assert case.status == Status.WAITING_SOURCE

    case = read_order(case, version=3)
    assert case.status == Status.PREPARING_PROPOSAL
    assert case.last_checked_order_version == 3
