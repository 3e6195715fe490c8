"""The apply worker: claim, then run the steps after approval, each confirmed durably.

Steps: apply the change at the order system, notify the customer, close the case. A resumed case
starts at the first unconfirmed step whose prerequisites still hold, so a failed notification is
retried without applying the change again.

The order system is called outside any transaction. Before the write leaves, the attempt records
that submission may have begun; afterwards the answer is recorded under the case lock. A write
with no usable answer is *effect unknown*: the case is held for reconciliation, never retried
blindly. Only ``Transient`` (nothing applied) is retried, on a bounded backoff through the case's
next check time — the single retry layer (httpx and django-q2 retry nothing).

Look before writing: an operation that may already be at the order system (an earlier attempt
got as far as submitting it, or these records were restored) is read by key from the consistent
lookup first; found with the intended change, it is recorded applied and never written again. A
first send of a fresh operation skips the look: nothing could have been sent, so it costs no
round trip.

Before claiming, the records are compared with the order system when nobody did so recently
(``reconciliation.restore``): a restored database is recovered before any claim.

Notifications carry a key per operation and step (``DATE-41-1:notify``, also the message's
``Message-ID``), recorded before sending. When the records show the notification may already
have gone (a send was recorded without its confirmation, or the change was applied after the
backup these records came from), it is not sent again: the case shows that it may have gone,
and a person confirms (``case_record_customer_told``).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from approvals.models import Operation
from approvals.services import review_due_at
from cases.backoff import next_retry_at
from cases.claims import (
    ClaimRefused,
    StaleAttempt,
    attempt_acknowledge_cancel,
    attempt_heartbeat,
    case_claim,
    keep_alive,
    record_slot_released,
)
from cases.models import (
    Attempt,
    Case,
    CaseEvent,
    Status,
    WaitingOn,
)
from cases.services import (
    Worker,
    _bump_and_save,
    apply_transition,
    cancellations_mark_after_change,
    lock_case,
    record_event,
    record_fact,
)
from reconciliation.client import OperationRecord, OperationResult, OrderSystemClient
from reconciliation.drills.hooks import drill_point
from reconciliation.exceptions import (
    ApprovalRefused,
    Conflict,
    EffectUnknown,
    OrderSystemError,
    Transient,
    UnknownOperation,
)
from reconciliation.restore import (
    APPLIED_BEFORE_RESTORE,
    RecoveryRequired,
    recover_after_restore,
    restore_detected_at_source,
    source_check_forget,
)
from reconciliation.settle import operation_confirm

logger = logging.getLogger(__name__)

STEPS = ("apply", "notify", "close")
# Facts that mean the customer may already have been told about an applied operation.
UNEXPECTED_REPLAY = "reconciliation.restore.unexpected_replay"
NOTIFY_SENDING = "cases.notification.sending"
NOTIFY_FAILED = "cases.notification.failed"


def apply_case(
    *, case_id: int, client: OrderSystemClient | None = None, worker: Worker | None = None
) -> str:
    """Claim the case and run its remaining steps. Safe to run twice: only a claim acts."""
    worker = worker or Worker.current("apply")
    own_client = client is None
    client = client or OrderSystemClient.from_settings()
    try:
        # No claim that may write on records older than the order system: asks only if
        # nobody did recently.
        why = _write_may_follow(case_id) and restore_detected_at_source(client=client)
        if why:
            logger.warning("Database restore detected at the source (%s): recovering", why)
            recover_after_restore(progress=logger.info, client=client)
            return f"refused: restore detected ({why}); recovered before any claim"
        try:
            attempt = case_claim(case_id=case_id, worker=worker)
        except ClaimRefused as refusal:
            return f"refused: {refusal.extra.get('reason', refusal.code)}"
        except RecoveryRequired:
            return "refused: recovery after restore required"
        return run_attempt(attempt_id=attempt.pk, client=client, worker=worker)
    finally:
        if own_client:
            client.close()


def _write_may_follow(case_id: int) -> bool:
    """A claim of this case could send a write: it is ready with an unconfirmed operation."""
    return Operation.objects.filter(
        case_id=case_id,
        case__status=Status.READY,
        confirmed_at__isnull=True,
        retired_at__isnull=True,
    ).exists()


def run_attempt(*, attempt_id: int, client: OrderSystemClient, worker: Worker) -> str:
    for step in STEPS:
        attempt = Attempt.objects.select_related("operation", "case__account").get(pk=attempt_id)
        if _confirmed(attempt.operation, attempt.case, step):
            continue
        try:
            lease = attempt_heartbeat(attempt_id=attempt.pk, fencing_token=attempt.fencing_token)
        except StaleAttempt:
            return "stale: stopped before doing anything more"
        if lease.cancel_requested and step == "apply":
            # Only before the change is sent does stopping mean nothing was applied; after it
            # is confirmed the remaining steps finish and the cancellation is "after change".
            attempt_acknowledge_cancel(attempt_id=attempt.pk, worker=worker)
            return "cancel acknowledged"
        outcome = _STEP_RUNNERS[step](attempt, client, worker)
        if outcome != "confirmed":
            return outcome
    return "done"


def _confirmed(operation: Operation, case: Case, step: str) -> bool:
    if step == "apply":
        return operation.confirmed_at is not None
    if step == "notify":
        return operation.notified_at is not None
    return case.status == Status.DONE


# --- step: apply ---------------------------------------------------------------------------


def _apply(attempt: Attempt, client: OrderSystemClient, worker: Worker) -> str:
    from approvals.services import live_approval, open_proposal

    case = attempt.case
    approval = live_approval(case)
    proposal = open_proposal(case)
    if approval is None or proposal is None:
        # Checked again here, not only at claim time: the approval may lapse in between.
        return _finish(
            attempt, worker, "approval_expired", "The approval expired before the change was sent"
        )
    operation = attempt.operation
    why = _may_have_been_sent(attempt)
    if why:
        looked = _look_before_write(attempt, client, worker, why)
        if looked is not None:
            return looked
    drill_point("after_claim")  # a no-op unless a drill asked this worker to stop here
    if not _mark_submitting(attempt):
        return _stopped_before_submitting(attempt, worker)
    try:
        with keep_alive(attempt):
            result = client.apply_operation(
                operation.order_id,
                operation_key=operation.key,
                delivery_date=operation.delivery_date,
                expected_version=proposal.evidence_order_version,
                fencing_token=attempt.fencing_token,
                approval_grant=approval.grant,
            )
    except OrderSystemError as exc:
        return _record_refusal(attempt, worker, exc)
    drill_point("after_submit")
    return _record_applied(attempt, worker, result)


def _may_have_been_sent(attempt: Attempt) -> str:
    """Why the operation may already be at the order system, or '' when these records prove
    nothing could have been sent: no attempt of it ever got as far as submitting
    (``Attempt.submitted_at`` is null on every one) and the case was never recovered after a
    restore. Only then does the write go without a look first."""
    earlier = (
        Attempt.objects.filter(operation_id=attempt.operation_id, submitted_at__isnull=False)
        .exclude(pk=attempt.pk)
        .order_by("-sequence")
        .first()
    )
    if earlier is not None:
        return f"{earlier.reference} submitted it before ({earlier.get_state_display().lower()})"
    restored = CaseEvent.objects.filter(case_id=attempt.case_id).filter(
        Q(detail__transition="hold_for_recovery") | Q(action=UNEXPECTED_REPLAY)
    )
    if restored.exists():
        return "the case's records were restored from a backup"
    return ""


def _look_before_write(
    attempt: Attempt, client: OrderSystemClient, worker: Worker, why: str
) -> str | None:
    """Read the operation by key from the consistent lookup. Returns the step's outcome when
    the look settles it (found, or the lookup failed), ``None`` when it is proven not applied
    yet and the write may go (with the same key and this attempt's fencing token)."""
    operation = attempt.operation
    try:
        with keep_alive(attempt):
            record = client.get_operation(operation.key)
    except UnknownOperation:
        return None
    except OrderSystemError as exc:
        # Not proof either way: nothing is written on a guess.
        return _record_refusal(attempt, worker, exc)
    intended = (
        record.order_id == operation.order_id
        and record.delivery_date == operation.delivery_date
        and record.status == "applied"
        and record.order_version is not None
    )
    if not intended:
        return _finish(
            attempt,
            worker,
            "lookup_mismatch",
            f"{operation.key} exists at the order system with another change "
            f"({record.order_id} → {record.delivery_date}, {record.status}); a person must look",
        )
    return _record_applied(
        attempt, worker, _looked_up(record), looked_up=f"{why}; the consistent lookup found it"
    )


def _looked_up(record: OperationRecord) -> OperationResult:
    return OperationResult(
        operation_key=record.operation_key,
        status=record.status,
        order_version=record.order_version,
        replayed=True,
    )


def _stopped_before_submitting(attempt: Attempt, worker: Worker) -> str:
    """The attempt stopped being current before its write left. Asked to stop (a cancellation
    or a revocation recorded during the claim), it acknowledges at once: worker stopped, slot
    released, and the case settles -- instead of staying 'applying' until its lease runs out.
    Otherwise (lease expired, fenced) the watchdog or the new owner already decides."""
    if Attempt.objects.filter(pk=attempt.pk, state=Attempt.State.CANCEL_REQUESTED).exists():
        attempt_acknowledge_cancel(attempt_id=attempt.pk, worker=worker)
        return "cancel acknowledged"
    return "stale: stopped before submitting"


def _mark_submitting(attempt: Attempt) -> bool:
    """Durably note that the write may leave now, while the attempt is still current."""
    return bool(
        Attempt.objects.filter(
            pk=attempt.pk, state=Attempt.State.RUNNING, fencing_token=attempt.fencing_token
        ).update(submitted_at=timezone.now())
    )


def _record_applied(
    attempt: Attempt, worker: Worker, result: OperationResult, *, looked_up: str = ""
) -> str:
    """The order system applied (or replayed) the operation — or the consistent lookup shows it
    applied (``looked_up`` says why it was looked for): that is a fact, recorded as evidence
    whatever happened to the attempt meanwhile."""
    now = timezone.now()
    with transaction.atomic():
        case = lock_case(attempt.case_id)
        operation = Operation.objects.select_for_update().get(pk=attempt.operation_id)
        unexpected = (
            result.replayed
            and not looked_up
            and not Attempt.objects.filter(operation=operation, submitted_at__isnull=False)
            .exclude(pk=attempt.pk)
            .exists()
        )
        if looked_up:
            kind, how = "operation_lookup", f"found by the consistent lookup ({looked_up})"
        else:
            kind = "operation_replayed" if result.replayed else "operation_applied"
            how = "applied"
        operation_confirm(
            case=case,
            operation=operation,
            order_version=result.order_version,
            actor=worker,
            kind=kind,
            summary=f"{operation.key} {how}: delivery {operation.delivery_date:%Y-%m-%d}, "
            f"order version {result.order_version}",
        )
        if unexpected:
            # A first send answered "already applied": these records lack what the order
            # system holds (a restore nobody detected). What followed the apply is unknown.
            source_check_forget()
            record_fact(
                case=case,
                action=UNEXPECTED_REPLAY,
                actor=worker,
                reason=f"{operation.key} was already applied although these records show no "
                "attempt that sent it: they are older than the order system. The customer may "
                "already have been told",
                detail={"operation_key": operation.key, "attempt": attempt.reference},
            )
        current = Attempt.objects.filter(pk=attempt.pk, state=Attempt.State.RUNNING).update(
            last_confirmed_step=Attempt.Step.APPLIED
        )
        case.last_checked_order_version = result.order_version
        case.retry_count = 0
        _bump_and_save(case, ["last_checked_order_version", "retry_count"])
        cancelling = not current and Attempt.objects.filter(
            pk=attempt.pk, state=Attempt.State.CANCEL_REQUESTED
        ).update(state=Attempt.State.STOPPED, finished_at=now)
        record_event(
            case=case,
            action="cases.step.applied" if current else "cases.attempt.late_result_recorded",
            actor=worker,
            reason=(
                f"{operation.key} {'found applied' if looked_up else 'applied'} at order "
                f"version {result.order_version}"
                + (f" ({looked_up}); not written again" if looked_up else "")
                + (
                    ""
                    if current
                    else f"; {attempt.reference} was no longer current, "
                    "so its result is recorded as evidence only"
                )
            ),
            detail={
                "attempt": attempt.reference,
                "order_version": result.order_version,
                "replayed": result.replayed,
                "looked_up": bool(looked_up),
            },
        )
        if cancelling and case.status == Status.APPLYING:
            # The change landed before the stop took effect: a fact, not something to undo
            # silently. The case closes as done; reversing it would be a new proposal.
            note = cancellations_mark_after_change(case)
            apply_transition(
                case,
                "complete",
                actor=worker,
                reason=f"{operation.key} was applied before the stop took effect; no further "
                f"steps run. {note}".strip(),
                detail={"attempt": attempt.reference, "revoked": bool(case.revoked_at)},
                outstanding_question=note or case.outstanding_question,
            )
    return "confirmed" if current else "late: recorded as evidence"


def _record_refusal(attempt: Attempt, worker: Worker, exc: OrderSystemError) -> str:
    text = f"{exc.error}: {exc.detail}".strip(": ")
    if isinstance(exc, EffectUnknown):
        return _finish(attempt, worker, "effect_unknown", text)
    if isinstance(exc, Transient):
        return _finish(attempt, worker, "transient", text, retry_after=exc.retry_after)
    if isinstance(exc, Conflict) and exc.error == "version_conflict":
        return _finish(attempt, worker, "source_changed", text)
    if isinstance(exc, Conflict) and exc.error == "stale_fencing_token":
        return _finish(attempt, worker, "fenced", text)
    if isinstance(exc, ApprovalRefused) and exc.error == "approval_expired":
        return _finish(attempt, worker, "approval_expired", text)
    # Definite refusals that need a person: invalid input, a full slot, a grant the receiver
    # does not accept, revoked permission, a reused key. Repeating them changes nothing.
    return _finish(attempt, worker, "needs_attention", text, error=exc.error)


# --- step: notify --------------------------------------------------------------------------


def notification_key(operation: Operation) -> str:
    """The notification's identity: one per operation and step, the same on every resend."""
    return f"{operation.key}:notify"


def _message_id(key: str) -> str:
    domain = settings.DEFAULT_FROM_EMAIL.rpartition("@")[2].strip("> ") or "holdfast.invalid"
    return f"<{key.replace(':', '.')}@{domain}>"


def _may_have_been_told(case: Case, operation: Operation, key: str) -> str:
    """Why the customer may already have been told about this operation, or ''."""
    events = CaseEvent.objects.filter(case=case, detail__notify_key=key)
    started = events.filter(action=NOTIFY_SENDING).count()
    if started > events.filter(action=NOTIFY_FAILED).count():
        return f"a send of {key} was recorded before and never confirmed"
    if events.filter(
        action__in=[APPLIED_BEFORE_RESTORE, UNEXPECTED_REPLAY], detail__operation_key=operation.key
    ).exists():
        return (
            f"{operation.key} was applied after the backup these records were restored from, "
            "and what followed it there is not in them"
        )
    return ""


def _notify(attempt: Attempt, client: OrderSystemClient, worker: Worker) -> str:
    case, operation = attempt.case, attempt.operation
    address = case.account.email
    key = notification_key(operation)
    if address:
        with transaction.atomic():
            case = lock_case(case.pk)
            why = _may_have_been_told(case, operation, key)
            if why:
                return _notification_uncertain(case, attempt, worker, key, address, why)
            # Recorded before the send: a send that dies before its confirmation is
            # recognisable afterwards, and never repeated blindly.
            record_fact(
                case=case,
                action=NOTIFY_SENDING,
                actor=worker,
                reason=f"Notifying the customer at {address} ({key})",
                detail={"attempt": attempt.reference, "notify_key": key},
            )
        try:
            EmailMessage(
                subject=f"Your delivery for order {operation.order_id} is moved",
                body=(
                    f"Hello {case.account.name},\n\nAs you asked ({case.reference}), the "
                    f"delivery of order {operation.order_id} is now on "
                    f"{operation.delivery_date:%A %d %B %Y}.\n"
                ),
                from_email=settings.DEFAULT_FROM_EMAIL,
                to=[address],
                headers={"Message-ID": _message_id(key), "X-Holdfast-Notification-Key": key},
            ).send()
        except Exception as exc:  # noqa: BLE001 - any mail failure is a transient step failure
            _notification_not_sent(case.pk, attempt, worker, key, exc)
            return _finish(
                attempt, worker, "transient", f"notification failed: {exc}", step="notify"
            )
    with transaction.atomic():
        case = lock_case(case.pk)
        Operation.objects.filter(pk=operation.pk, notified_at__isnull=True).update(
            notified_at=timezone.now()
        )
        Attempt.objects.filter(pk=attempt.pk).update(last_confirmed_step=Attempt.Step.NOTIFIED)
        record_fact(
            case=case,
            action="cases.step.notified",
            actor=worker,
            reason=f"Customer notified at {address} ({key})"
            if address
            else "No customer address on file: nothing sent",
            detail={"attempt": attempt.reference, "notify_key": key if address else None},
        )
    return "confirmed"


def _notification_not_sent(case_id: int, attempt: Attempt, worker: Worker, key: str, exc) -> None:
    """The mail backend refused the message: it did not go, so the next run sends it again."""
    with transaction.atomic():
        case = lock_case(case_id)
        record_fact(
            case=case,
            action=NOTIFY_FAILED,
            actor=worker,
            # Accounts for the "sending" record before it: that send did not go.
            reason=f"{key} was not sent: {exc}",
            detail={"attempt": attempt.reference, "notify_key": key, "sent": False},
        )


def _notification_uncertain(
    case: Case, attempt: Attempt, worker: Worker, key: str, address: str, why: str
) -> str:
    """The customer may already have been told: not sent again, shown on the case for a person
    to confirm (the step counts as done; ``notified_at`` stays empty until someone does)."""
    Attempt.objects.filter(pk=attempt.pk).update(last_confirmed_step=Attempt.Step.NOTIFIED)
    question = (
        f"The notification {key} to {address} may already have gone ({why}); it was not sent "
        "again. If the customer was not told, tell them and record it."
    )
    case.outstanding_question = question[:500]
    _bump_and_save(case, ["outstanding_question"])
    record_event(
        case=case,
        action="cases.notification.may_have_gone",
        actor=worker,
        reason=f"Notification may have gone twice if sent now: {why}. Not re-sent",
        detail={"attempt": attempt.reference, "notify_key": key, "address": address},
    )
    return "confirmed"


# --- step: close ---------------------------------------------------------------------------


def _close(attempt: Attempt, client: OrderSystemClient, worker: Worker) -> str:
    with transaction.atomic():
        case = lock_case(attempt.case_id)
        if case.status != Status.APPLYING:
            return "stale: the case moved on"
        Attempt.objects.filter(pk=attempt.pk).update(
            state=Attempt.State.SUCCEEDED,
            last_confirmed_step=Attempt.Step.CLOSED,
            finished_at=timezone.now(),
        )
        note = cancellations_mark_after_change(case)
        apply_transition(
            case,
            "complete",
            actor=worker,
            reason=f"{attempt.operation.key} confirmed at order version "
            f"{attempt.operation.result_order_version} and the customer notified. {note}".strip(),
            detail={"attempt": attempt.reference},
            apply_authorized_by=None,
            outstanding_question=note or case.outstanding_question,
        )
    return "done"


_STEP_RUNNERS = {"apply": _apply, "notify": _notify, "close": _close}


# --- outcomes ------------------------------------------------------------------------------

_ATTEMPT_STATE = {
    "effect_unknown": Attempt.State.EFFECT_UNKNOWN,
    "fenced": Attempt.State.FENCED,
}


def _finish(
    attempt: Attempt,
    worker: Worker,
    outcome: str,
    text: str,
    *,
    retry_after: float | None = None,
    error: str = "",
    step: str = "apply",
) -> str:
    """Record how the attempt ended and move the case to the next safe status."""
    from approvals.services import proposal_invalidate_for_source_change

    now = timezone.now()
    with transaction.atomic():
        case = lock_case(attempt.case_id)
        fresh = Attempt.objects.select_for_update().get(pk=attempt.pk)
        current = fresh.state == Attempt.State.RUNNING
        cancelling = fresh.state == Attempt.State.CANCEL_REQUESTED
        Attempt.objects.filter(pk=attempt.pk, state__in=Attempt.ACTIVE).update(
            state=_ATTEMPT_STATE.get(outcome, Attempt.State.FAILED),
            last_error=text[:2000],
            finished_at=now,
        )
        if cancelling and case.status == Status.APPLYING:
            return _finish_cancelling(case, attempt, worker, outcome, text)
        if not current or case.status != Status.APPLYING:
            record_fact(
                case=case,
                action="cases.attempt.late_result_refused",
                actor=worker,
                reason=f"{attempt.reference} is no longer current ({fresh.state}); "
                f"its outcome '{text}' changes nothing",
                detail={"attempt": attempt.reference, "outcome": outcome},
            )
            return f"late: {outcome} recorded only"
        detail = {
            "attempt": attempt.reference,
            "outcome": outcome,
            "error": error or outcome,
            "confirmed_steps": _confirmed_steps(fresh),
        }
        if outcome == "effect_unknown":
            apply_transition(
                case,
                "hold",
                actor=worker,
                detail=detail,
                last_error=text,
                reason=f"Effect unknown: {attempt.operation.key} was sent and no answer came "
                "back. Reconcile the same operation from evidence; never send it blindly again",
                waiting=(WaitingOn.OWNER, "Effect unknown: reconcile from the order system"),
                next_check_at=next_retry_at(1),
            )
        elif outcome == "fenced":
            apply_transition(
                case,
                "hold",
                actor=worker,
                detail=detail,
                last_error=text,
                reason="The order system refused a stale fencing token: another owner exists",
                waiting=(WaitingOn.OWNER, "Another owner exists: reconcile before anything else"),
                next_check_at=next_retry_at(1),
            )
        elif outcome == "lookup_mismatch":
            apply_transition(
                case,
                "hold",
                actor=worker,
                detail=detail,
                last_error=text,
                reason=f"Looked before writing: {text}. Nothing was sent",
                waiting=(WaitingOn.OWNER, "The operation key shows another change: look"),
                next_check_at=next_retry_at(1),
            )
        elif outcome == "transient":
            _retry_or_give_up(case, worker, attempt, text, retry_after, detail)
        elif outcome == "source_changed":
            proposal_invalidate_for_source_change(
                case=case,
                order_version=None,
                actor=worker,
                via=f"{attempt.reference}: {text}",
            )
        elif outcome == "approval_expired":
            from approvals.services import open_proposal, proposal_return_to_review

            proposal_return_to_review(open_proposal(case), "Expired before it was applied")
            apply_transition(
                case,
                "approval_expired",
                actor=worker,
                detail=detail,
                reason=f"{text}; the same proposal needs a fresh decision",
                next_check_at=review_due_at(timezone.now()),
                apply_authorized_by=None,
            )
        else:
            apply_transition(
                case,
                "escalate",
                actor=worker,
                detail=detail,
                last_error=text,
                reason=f"The order system refused {attempt.operation.key}: {text}. Repeating "
                "it would change nothing; a person must correct the cause",
                waiting=(WaitingOn.OWNER, f"Needs a person: {error or outcome}"),
                next_check_at=None,
            )
    return outcome


def _finish_cancelling(
    case: Case, attempt: Attempt, worker: Worker, outcome: str, text: str
) -> str:
    """The attempt was asked to stop (a revocation or a cancellation) and came back with an
    answer anyway."""
    from cases.revocation import settle_after_stop

    record_fact(
        case=case,
        action="cases.attempt.late_result_refused",
        actor=worker,
        reason=f"{attempt.reference} was asked to stop; its result '{text}' is "
        "recorded and changes nothing",
        detail={"attempt": attempt.reference, "outcome": outcome},
    )
    record_slot_released(case, attempt, worker)
    if outcome == "effect_unknown":
        apply_transition(
            case,
            "hold",
            actor=worker,
            last_error=text,
            reason="Asked to stop while a change was in flight and the outcome "
            "is unknown: reconcile before anything else",
            next_check_at=next_retry_at(1),
        )
        return "late: effect unknown, held"
    settle_after_stop(case, worker, f"{attempt.reference} ended: {text}")
    return f"late: {outcome} recorded only"


def _confirmed_steps(attempt: Attempt) -> list[str]:
    order = [Attempt.Step.APPLIED, Attempt.Step.NOTIFIED, Attempt.Step.CLOSED]
    if attempt.last_confirmed_step not in order:
        return []
    return [str(s) for s in order[: order.index(attempt.last_confirmed_step) + 1]]


def _retry_or_give_up(
    case: Case, worker: Worker, attempt: Attempt, text: str, retry_after: float | None, detail: dict
) -> None:
    case.retry_count += 1
    retry_at = next_retry_at(case.retry_count, retry_after=retry_after)
    detail = {**detail, "failures": case.retry_count, "next_check_at": retry_at.isoformat()}
    if case.retry_count >= settings.ATTEMPT_LIMIT:
        steps = ", ".join(detail["confirmed_steps"]) or "none"
        apply_transition(
            case,
            "escalate",
            actor=worker,
            detail=detail,
            last_error=text,
            retry_count=case.retry_count,
            reason=f"Gave up after {case.retry_count} attempts. Last error: {text}. "
            f"Confirmed steps: {steps}. Next permitted check: "
            f"{timezone.localtime(retry_at):%Y-%m-%d %H:%M:%S}",
            waiting=(WaitingOn.OWNER, "Attempts exhausted: a person decides when to retry"),
            next_check_at=retry_at,
        )
        return
    apply_transition(
        case,
        "retry_later",
        actor=worker,
        detail=detail,
        last_error=text,
        retry_count=case.retry_count,
        reason=f"Nothing applied ({text}); retry {case.retry_count + 1} of "
        f"{settings.ATTEMPT_LIMIT} at {timezone.localtime(retry_at):%H:%M:%S}",
        waiting=(WaitingOn.ORDER_SYSTEM, "Unavailable; retrying on a bounded backoff"),
        next_check_at=retry_at,
    )
