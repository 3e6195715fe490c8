"""Source checks: read the order, record what was seen, and move the case on from evidence.

The HTTP read happens outside any transaction; the outcome is recorded under the case lock.
An unreachable source is not a reason to guess: the case keeps waiting on the order system
with its next check on a bounded backoff. The ``source_check`` retry counter
(``cases.retries``; its own, never the apply's) counts consecutive failed checks (a successful
check, or a person asking for a check, resets it); the check that reaches
``settings.SOURCE_CHECK_ATTEMPT_LIMIT`` hands the case to its owner in *needs attention*, where
nothing is checked again until a person asks (``reconciliation.failures``).
"""

from __future__ import annotations

import datetime as dt

from django.db.models import Max
from django.utils import timezone

from cases import validation
from cases.codes import Action
from cases.kernel import Actor, Worker, apply_transition, case_step
from cases.models import Case, EvidenceReference, Status, WaitingOn
from cases.retries import retries_reset
from cases.scheduling import enqueue_on_commit
from cases.services import evidence_add
from reconciliation.client import Order, OrderSystemClient
from reconciliation.exceptions import (
    OLDER_VERSION,
    PLAIN_FAILURE,
    OrderSystemError,
    UnknownOrder,
    plain_failure,
)
from reconciliation.failures import Words, literal, transient_failure_record
from reconciliation.restore_detection import restore_detected

CHECKABLE = {Status.WAITING_SOURCE, Status.PREPARING_PROPOSAL, Status.AWAITING_REVIEW, Status.READY}


def source_check(*, case_id: int, client: OrderSystemClient | None = None) -> str:
    """Read the case's order and act on what it shows. Safe to run twice; returns an outcome."""
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
    except UnknownOrder:
        # In the words of another account's order: the case's reason, last error and mail
        # never tell whether an order id exists (``not_the_accounts_order``).
        return _escalate(
            case_id, actor, validation.not_the_accounts_order(case.order_id, case.account.reference)
        )
    except OrderSystemError as exc:
        return _source_unavailable(case_id, actor, exc)
    finally:
        if own_client:
            client.close()

    with case_step(case_id, actor=actor) as case:
        if case.status not in CHECKABLE:
            return "skipped"
        if order.account_id != case.account.reference:
            return _escalate(
                case,
                actor,
                # Never name the order's owner: it may be another team's customer.
                validation.not_the_accounts_order(case.order_id, case.account.reference),
            )
        if case.status == Status.WAITING_SOURCE:
            known = known_order_version(case)
            if known is not None and order.version < known:
                # Read before an order event the case recorded meanwhile (an event that
                # invalidated its proposal queues a check; one already under way answers
                # late): a proposal on it would be refused at the apply, after a person
                # approved it. A failed check: the case keeps waiting, and one that only
                # ever reads an older order (the source went back) reaches its owner.
                return _failed_check(
                    case,
                    actor,
                    OrderSystemError(
                        OLDER_VERSION, f"version {order.version}, the case knows {known}"
                    ),
                )
            kind = case.change_kind
            seen = kind.seen(order)
            evidence_add(
                case=case,
                actor=actor,
                source_system=EvidenceReference.Source.ORDER_SYSTEM,
                external_reference=f"order:{order.order_id}@v{order.version}",
                kind="order_read",
                permitted_basis=EvidenceReference.Basis.CONTRACT,
                summary=order_summary(order, kind.describe_seen(seen)),
                order_version=order.version,
            )
            apply_transition(
                case,
                "source_checked",
                actor=actor,
                reason=f"Read order {order.order_id} at version {order.version}"
                + ("" if order.status == "open" else f": the order is {order.status}"),
                # What was seen is in the evidence (purged with the payload), not the audit.
                detail={"order_version": order.version, "status": order.status},
                # Due now: the enqueue below is a fast path; the dispatcher's lease on this
                # due time re-drives the preparation if its task or worker is lost.
                next_check_at=timezone.now(),
                last_checked_order_version=order.version,
                order_seen=seen,
                last_error="",
                **retries_reset(case, "source_check"),
            )
            enqueue_on_commit("reconciliation.tasks.prepare_proposal", case.pk)
            return "checked"
        from approvals.services import proposal_invalidate_for_source_change

        if proposal_invalidate_for_source_change(
            case=case, order_version=order.version, actor=actor, via="source check"
        ):
            return "invalidated"
        return "unchanged"


def known_order_version(case: Case) -> int | None:
    """The newest order version the case has seen: its last check or any of its evidence."""
    newest = case.evidence.aggregate(newest=Max("order_version"))["newest"]
    known = [v for v in (case.last_checked_order_version, newest) if v is not None]
    return max(known) if known else None


def order_summary(order: Order, seen_words: str) -> str:
    """The evidence of one read in words: the kind's current value, the order's status when it
    is not open (the order system refuses every change then), and the version."""
    status = "" if order.status == "open" else f"; the order is {order.status}, not open"
    return f"Order {order.order_id}: {seen_words}{status}, version {order.version}"


def _escalate(case_or_id, actor, reason: str) -> str:
    with case_step(case_or_id, actor=actor) as case:
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


def source_failure_text(exc: OrderSystemError, failed_checks: int, at: dt.datetime) -> str:
    """The last error in plain words: what happened, how many checks in a row, and when."""
    what = PLAIN_FAILURE.get(exc.error, "refused the read")
    checks = "1 check" if failed_checks == 1 else f"{failed_checks} checks in a row"
    when = at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    code = f"{exc.error}: {exc.detail}" if exc.detail else exc.error
    return f"The order system {what} on {checks}; last at {when} ({code})"[:500]


def _source_unavailable(case_id: int, actor: Actor, exc: OrderSystemError) -> str:
    """Count one more consecutive failed check: back off, or give the case to its owner
    (``transient_failure_record``, the ``source_check`` policy)."""
    with case_step(case_id, actor=actor) as case:
        if case.status != Status.WAITING_SOURCE:
            return "skipped"
        return _failed_check(case, actor, exc)


def _failed_check(case: Case, actor: Actor, exc: OrderSystemError) -> str:
    """:func:`_source_unavailable` for the case locked, waiting for the source."""
    code = literal(exc.error)
    outcome = transient_failure_record(
        case=case,
        kind="source_check",
        error=lambda failures: source_failure_text(exc, failures, timezone.now()),
        actor=actor,
        retry_after=getattr(exc, "retry_after", None),
        detail=lambda failures: {"error": exc.error, "failed_checks": failures},
        retry=Words(
            reason=f"The order system {literal(plain_failure(exc))} ({code}); "
            "next check {next_time}",
            waiting=f"The order system {literal(plain_failure(exc))} "
            "({failures} of {limit} checks); checking again later",
        ),
        give_up=Words(
            reason="The order source could not be read: {error}",
            waiting="The order source failed {failures} checks in a row: "
            "check the source now once it is back",
        ),
        retry_event=Action.SOURCE_CHECK_FAILED,
    )
    return outcome.code
