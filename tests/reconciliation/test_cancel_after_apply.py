"""Review: a cancellation or revocation that arrives after the change was confirmed applied
must never end the case as 'cancelled' / 'stopped with nothing applied'.

``cancelled`` means "proven nothing was applied". Once the operation is confirmed at the order
system the request "arrived after the change"; reversing it is a new proposal.
"""

from __future__ import annotations

import pytest

from approvals.models import Operation
from cases.models import CancellationRequest, CaseEvent, Status
from cases.services import case_cancel_request
from reconciliation import apply as apply_module
from reconciliation.apply import apply_case
from reconciliation.revocation import case_revoke

pytestmark = pytest.mark.order_system


def _applied_ops(order_system) -> list[dict]:
    return order_system.state("ORD-7731")["operations"]


def test_cancel_of_a_ready_case_whose_change_is_confirmed_does_not_cancel_it(
    approved_case, live_orders, agent, settings
):
    """Apply confirmed, notification fails (transient) -> the case is 'ready' to resume the
    remaining steps. 'ready' is in SENDABLE_STATUSES, so the plain `cancel` transition fires."""
    settings.EMAIL_BACKEND = "tests.support.failing_mail.FailingBackend"
    case = approved_case()
    assert apply_case(case_id=case.pk) == "transient"
    case.refresh_from_db()
    assert case.status == Status.READY
    assert Operation.objects.get(case=case).confirmed_at is not None
    assert len(_applied_ops(live_orders)) == 1  # the order really changed

    case_cancel_request(case=case, actor=agent, reason="customer changed their mind", via="api")

    case.refresh_from_db()
    request = CancellationRequest.objects.get(case=case)
    # The change is applied: the case must not claim that nothing was applied.
    assert case.status != Status.CANCELLED
    assert request.outcome == CancellationRequest.Outcome.ARRIVED_AFTER_CHANGE


def test_cancellation_seen_at_the_notify_heartbeat_does_not_cancel_an_applied_change(
    approved_case, live_orders, agent, monkeypatch
):
    """The worker confirms the apply; the customer cancels before the notify step. At the
    notify heartbeat the worker 'acknowledges the cancellation and stopped before sending
    anything' and settle_after_stop cancels the case, although the order was changed."""
    case = approved_case()
    _at(
        monkeypatch,
        "after_confirm",
        lambda: case_cancel_request(case=case, actor=agent, reason="too late, cancel", via="api"),
    )

    apply_case(case_id=case.pk)

    case.refresh_from_db()
    assert len(_applied_ops(live_orders)) == 1
    assert Operation.objects.get(case=case).confirmed_at is not None
    request = CancellationRequest.objects.get(case=case)
    assert case.status != Status.CANCELLED
    assert request.outcome != CancellationRequest.Outcome.CANCELLED


def test_revocation_seen_at_the_notify_heartbeat_does_not_report_nothing_applied(
    approved_case, live_orders, lead, monkeypatch
):
    case = approved_case()
    _at(
        monkeypatch,
        "after_confirm",
        lambda: case_revoke(case=case, actor=lead, reason="customer withdrew", fence=False),
    )

    apply_case(case_id=case.pk)

    case.refresh_from_db()
    assert len(_applied_ops(live_orders)) == 1
    last = CaseEvent.objects.filter(case=case, action="cases.case.transitioned").last()
    # Whatever terminal status is chosen, the audit must not say nothing was applied.
    assert "nothing applied" not in last.reason, last.reason


def test_approval_expiry_does_not_send_an_applied_change_back_to_review(
    approved_case, live_orders, settings
):
    """Same root cause: the periodic expiry treats every 'ready' case as not yet sent. A case
    resuming its notification after a confirmed apply goes back to 'awaiting review', asking an
    approver to decide a change the order system already holds (and opening 'cancel')."""
    import datetime as dt

    from django.utils import timezone

    from approvals.services import approvals_expire_due

    settings.EMAIL_BACKEND = "tests.support.failing_mail.FailingBackend"
    case = approved_case()
    assert apply_case(case_id=case.pk) == "transient"
    case.refresh_from_db()
    assert case.status == Status.READY
    assert Operation.objects.get(case=case).confirmed_at is not None

    approvals_expire_due(now=timezone.now() + dt.timedelta(days=30))

    case.refresh_from_db()
    assert case.status == Status.READY, case.status


def _at(monkeypatch, point: str, action) -> None:
    """Run ``action()`` when the apply reaches the named point (``apply.STEP_POINT_OBSERVERS``)."""

    def observer(name: str) -> None:
        if name == point:
            action()

    monkeypatch.setattr(
        apply_module, "STEP_POINT_OBSERVERS", [*apply_module.STEP_POINT_OBSERVERS, observer]
    )


def test_a_cancellation_between_the_send_and_its_answer_is_marked_arrived_after_the_change(
    approved_case, live_orders, agent, monkeypatch
):
    """The customer cancels once the change has gone and before the order system's answer is
    recorded: nothing is applied in these records yet, so the request is pending. The answer
    and the close read whether one is pending with their lock (``CANCELLATION_PENDING``) and
    skip the cancellations' update when none is: this one must still be found and marked as
    arrived after the change, with the note on the case."""
    case = approved_case()
    _at(
        monkeypatch,
        "after_submit",
        lambda: case_cancel_request(case=case, actor=agent, reason="cancel it", via="api"),
    )

    apply_case(case_id=case.pk)

    assert len(_applied_ops(live_orders)) == 1
    request = CancellationRequest.objects.get(case=case)
    assert request.outcome == CancellationRequest.Outcome.ARRIVED_AFTER_CHANGE
    assert request.settled_at is not None
    case.refresh_from_db()
    assert case.status != Status.CANCELLED
    assert "Cancellation arrived after the change" in case.outstanding_question
