"""Source checks: read the order, record what was seen, and move the case on from evidence.

The HTTP read happens outside any transaction; the outcome is recorded under the case lock.
An unreachable source is not a reason to guess: the case keeps waiting on the order system
with its next check on a bounded backoff.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from cases.backoff import next_retry_at
from cases.models import Case, EvidenceReference, Status, WaitingOn
from cases.scheduling import enqueue_on_commit
from cases.services import (
    Worker,
    _bump_and_save,
    apply_transition,
    evidence_add,
    lock_case,
    record_event,
)
from reconciliation.client import OrderSystemClient
from reconciliation.exceptions import OrderSystemError, UnknownOrder

CHECKABLE = {Status.WAITING_SOURCE, Status.PREPARING_PROPOSAL, Status.AWAITING_REVIEW, Status.READY}


def source_check(*, case_id: int, client: OrderSystemClient | None = None) -> str:
    """Read the case's order and act on what it shows. Safe to run twice; returns an outcome."""
    from reconciliation.restore import restore_detected

    if restore_detected():
        return "skipped: recovery after restore required"
    case = Case.objects.select_related("account").get(pk=case_id)
    if case.status not in CHECKABLE:
        return "skipped"
    actor = Worker.current("source-check")
    own_client = client is None
    client = client or OrderSystemClient.from_settings()
    try:
        order = client.get_order(case.order_id)
    except UnknownOrder as exc:
        return _escalate(
            case_id,
            actor,
            f"The order system does not know order {case.order_id}: {exc.detail or exc.error}",
        )
    except OrderSystemError as exc:
        return _source_unavailable(case_id, actor, exc)
    finally:
        if own_client:
            client.close()

    with transaction.atomic():
        case = lock_case(case_id)
        if case.status not in CHECKABLE:
            return "skipped"
        if order.account_id != case.account.reference:
            return _escalate(
                case,
                actor,
                f"Order {case.order_id} belongs to account "
                f"{order.account_id}, not {case.account.reference}",
            )
        if case.status == Status.WAITING_SOURCE:
            evidence_add(
                case=case,
                actor=actor,
                source_system=EvidenceReference.Source.ORDER_SYSTEM,
                external_reference=f"order:{order.order_id}@v{order.version}",
                kind="order_read",
                permitted_basis=EvidenceReference.Basis.CONTRACT,
                summary=f"Order {order.order_id}: delivery {order.delivery_date:%Y-%m-%d}, "
                f"version {order.version}",
                order_version=order.version,
            )
            apply_transition(
                case,
                "source_checked",
                actor=actor,
                reason=f"Read order {order.order_id} at version {order.version}",
                detail={
                    "order_version": order.version,
                    "delivery_date": order.delivery_date.isoformat(),
                },
                next_check_at=None,
                last_checked_order_version=order.version,
                order_delivery_date_seen=order.delivery_date,
                retry_count=0,
                last_error="",
            )
            enqueue_on_commit("approvals.tasks.prepare_proposal", case.pk)
            return "checked"
        from approvals.services import proposal_invalidate_for_source_change

        if proposal_invalidate_for_source_change(
            case=case, order_version=order.version, actor=actor, via="source check"
        ):
            return "invalidated"
        return "unchanged"


def _escalate(case_or_id, actor, reason: str) -> str:
    with transaction.atomic():
        case = lock_case(case_or_id)
        if case.status not in CHECKABLE:
            return "skipped"
        from approvals.services import proposals_withdraw_open

        revoked = proposals_withdraw_open(case, f"Escalated: {reason}")
        apply_transition(
            case,
            "escalate",
            actor=actor,
            reason=reason,
            detail={"revoked_approvals": revoked},
            waiting=(WaitingOn.OWNER, "Needs corrected input: " + reason),
            next_check_at=None,
            last_error=reason,
        )
    return "needs_attention"


def _source_unavailable(case_id: int, actor, exc: OrderSystemError) -> str:
    with transaction.atomic():
        case = lock_case(case_id)
        if case.status != Status.WAITING_SOURCE:
            return "skipped"
        case.retry_count += 1
        case.next_check_at = next_retry_at(
            case.retry_count, retry_after=getattr(exc, "retry_after", None)
        )
        case.last_error = f"{exc.error}: {exc.detail}"[:500]
        case.waiting_on = WaitingOn.ORDER_SYSTEM
        case.waiting_reason = "The order system did not answer; checking again later"
        _bump_and_save(
            case, ["retry_count", "next_check_at", "last_error", "waiting_on", "waiting_reason"]
        )
        record_event(
            case=case,
            action="reconciliation.source_check.failed",
            actor=actor,
            reason=f"Order system unavailable ({exc.error}); next check "
            f"{timezone.localtime(case.next_check_at):%H:%M:%S}",
            detail={
                "error": exc.error,
                "failures": case.retry_count,
                "next_check_at": case.next_check_at.isoformat(),
            },
        )
    return "retry_scheduled"
