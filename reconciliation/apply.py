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
(``reconciliation.restored``): a restored database is recovered before any claim.

Notifications carry a key per operation and step (``DATE-41-1:notify``, also the message's
``Message-ID``), recorded before sending. When the records show the notification may already
have gone (a send was recorded without its confirmation, or the change was applied after the
backup these records came from), it is not sent again: the case shows that it may have gone,
and a person confirms (``case_record_customer_told``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from django.conf import settings
from django.core.mail import EmailMessage
from django.db.models import Q
from django.utils import timezone

from approvals.models import Operation
from approvals.services import review_due_at
from cases.attempts import attempt_finish
from cases.backoff import next_retry_at
from cases.codes import Action
from cases.kernel import (
    Worker,
    apply_transition,
    bump_and_save,
    case_step,
    record_event,
    record_fact,
)
from cases.models import (
    Attempt,
    Case,
    CaseEvent,
    Status,
    WaitingOn,
)
from cases.retries import retries_reset
from reconciliation.claims import (
    ClaimRefused,
    StaleAttempt,
    attempt_acknowledge_cancel,
    attempt_heartbeat,
    case_claim,
    keep_alive,
    record_slot_released,
)
from reconciliation.client import OperationRecord, OperationResult, OrderSystemClient
from reconciliation.complete import case_complete
from reconciliation.exceptions import (
    ApprovalRefused,
    Conflict,
    EffectUnknown,
    OrderSystemError,
    Transient,
    UnknownOperation,
)
from reconciliation.restore import recover_after_restore
from reconciliation.restored import (
    RecoveryRequired,
    restore_detected_at_source,
    source_check_forget,
)
from reconciliation.retries import Words, literal, transient_failure_record
from reconciliation.settle import operation_confirm

logger = logging.getLogger(__name__)

STEPS = ("apply", "notify", "close")
# Facts that mean the customer may already have been told about an applied operation.

# Named points of the apply step (``after_claim``: claimed, nothing sent yet; ``after_submit``:
# the order system answered, the answer not saved yet). Each observer is called with the point's
# name; none is registered unless an upper layer registers one (``ReconciliationConfig.ready``
# registers the drills' stop point), so by default the points do nothing.
STEP_POINT_OBSERVERS: list[Callable[[str], None]] = []


def _reached(point: str) -> None:
    for observer in STEP_POINT_OBSERVERS:
        observer(point)


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
            attempt, worker, EndedApprovalExpired("The approval expired before the change was sent")
        )
    operation = attempt.operation
    why = _may_have_been_sent(attempt)
    if why:
        looked = _look_before_write(attempt, client, worker, why)
        if looked is not None:
            return looked
    _reached("after_claim")  # a drill may stop this worker here
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
        return attempt_record_refusal(attempt, worker, exc)
    _reached("after_submit")
    return attempt_record_applied(attempt, worker, result)


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
        Q(detail__transition="hold_for_recovery") | Q(action=Action.RESTORE_UNEXPECTED_REPLAY)
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
        return attempt_record_refusal(attempt, worker, exc)
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
            EndedLookupMismatch(
                f"{operation.key} exists at the order system with another change "
                f"({record.order_id} → {record.delivery_date}, {record.status}); "
                "a person must look"
            ),
        )
    return attempt_record_applied(
        attempt, worker, _looked_up(record), looked_up=f"{why}; the consistent lookup found it"
    )


def _looked_up(record: OperationRecord) -> OperationResult:
    """An applied record as the write's result; only called for a record with its version."""
    if record.order_version is None:
        raise ValueError(f"{record.operation_key}: an applied record without its order version")
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


def attempt_record_applied(
    attempt: Attempt, worker: Worker, result: OperationResult, *, looked_up: str = ""
) -> str:
    """The order system applied (or replayed) the operation — or the consistent lookup shows it
    applied (``looked_up`` says why it was looked for): that is a fact, recorded as evidence
    whatever happened to the attempt meanwhile."""
    now = timezone.now()
    with case_step(attempt.case_id, actor=worker) as case:
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
                action=Action.RESTORE_UNEXPECTED_REPLAY,
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
        bump_and_save(case, ["last_checked_order_version", *retries_reset(case, "apply")])
        # Asked to stop and the change landed anyway: the attempt is over (the step event
        # below names it).
        cancelling = not current and attempt_finish(
            attempt,
            Attempt.State.STOPPED,
            case=case,
            actor=worker,
            expected=(Attempt.State.CANCEL_REQUESTED,),
            event=None,
            finished_at=now,
        )
        record_event(
            case=case,
            action=Action.STEP_APPLIED if current else Action.ATTEMPT_LATE_RESULT_RECORDED,
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
            case_complete(
                case,
                actor=worker,
                reason=f"{operation.key} was applied before the stop took effect; no further "
                "steps run.",
                detail={"attempt": attempt.reference, "revoked": bool(case.revoked_at)},
            )
    return "confirmed" if current else "late: recorded as evidence"


def attempt_record_refusal(attempt: Attempt, worker: Worker, exc: OrderSystemError) -> str:
    """End the attempt on the order system's error (``ending_for``)."""
    return _finish(attempt, worker, ending_for(exc))


def ending_for(exc: OrderSystemError) -> Ending:
    """How an order-system error ends the attempt: decided here once, by the error's class
    (``reconciliation.exceptions``) and, for a conflict or a refused grant, its code."""
    text = f"{exc.error}: {exc.detail}".strip(": ")
    match exc:
        case EffectUnknown():
            return EndedEffectUnknown(text)
        case Transient(retry_after=retry_after):
            return EndedTransient(text, retry_after=retry_after)
        case Conflict(error="version_conflict"):
            return EndedSourceChanged(text)
        case Conflict(error="stale_fencing_token"):
            return EndedFenced(text)
        case ApprovalRefused(error="approval_expired"):
            return EndedApprovalExpired(text)
        case _:
            # Definite refusals that need a person: invalid input, a full slot, a grant the
            # receiver does not accept, revoked permission, a reused key, an unknown order.
            # Repeating them changes nothing.
            return EndedNeedsAttention(text, refusal=exc.error)


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
    started = events.filter(action=Action.NOTIFICATION_SENDING).count()
    if started > events.filter(action=Action.NOTIFICATION_FAILED).count():
        return f"a send of {key} was recorded before and never confirmed"
    if events.filter(
        action__in=[Action.RESTORE_APPLIED_BEFORE_RESTORE, Action.RESTORE_UNEXPECTED_REPLAY],
        detail__operation_key=operation.key,
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
        with case_step(case.pk, actor=worker) as case:
            why = _may_have_been_told(case, operation, key)
            if why:
                return _notification_uncertain(case, attempt, worker, key, address, why)
            # Recorded before the send: a send that dies before its confirmation is
            # recognisable afterwards, and never repeated blindly.
            record_fact(
                case=case,
                action=Action.NOTIFICATION_SENDING,
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
            return _finish(attempt, worker, EndedTransient(f"notification failed: {exc}"))
    with case_step(case.pk, actor=worker) as case:
        Operation.objects.filter(pk=operation.pk, notified_at__isnull=True).update(
            notified_at=timezone.now()
        )
        Attempt.objects.filter(pk=attempt.pk).update(last_confirmed_step=Attempt.Step.NOTIFIED)
        record_fact(
            case=case,
            action=Action.STEP_NOTIFIED,
            actor=worker,
            reason=f"Customer notified at {address} ({key})"
            if address
            else "No customer address on file: nothing sent",
            detail={"attempt": attempt.reference, "notify_key": key if address else None},
        )
    return "confirmed"


def _notification_not_sent(case_id: int, attempt: Attempt, worker: Worker, key: str, exc) -> None:
    """The mail backend refused the message: it did not go, so the next run sends it again."""
    with case_step(case_id, actor=worker) as case:
        record_fact(
            case=case,
            action=Action.NOTIFICATION_FAILED,
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
    bump_and_save(case, ["outstanding_question"])
    record_event(
        case=case,
        action=Action.NOTIFICATION_MAY_HAVE_GONE,
        actor=worker,
        reason=f"Notification may have gone twice if sent now: {why}. Not re-sent",
        detail={"attempt": attempt.reference, "notify_key": key, "address": address},
    )
    return "confirmed"


# --- step: close ---------------------------------------------------------------------------


def _close(attempt: Attempt, client: OrderSystemClient, worker: Worker) -> str:
    with case_step(attempt.case_id, actor=worker) as case:
        if case.status != Status.APPLYING:
            return "stale: the case moved on"
        # The completion below names the attempt.
        attempt_finish(
            attempt,
            Attempt.State.SUCCEEDED,
            case=case,
            actor=worker,
            expected=Attempt.State.values,
            event=None,
            last_confirmed_step=Attempt.Step.CLOSED,
        )
        case_complete(
            case,
            actor=worker,
            reason=f"{attempt.operation.key} confirmed at order version "
            f"{attempt.operation.result_order_version} and the customer notified.",
            detail={"attempt": attempt.reference},
            apply_authorized_by=None,
        )
    return "done"


_STEP_RUNNERS = {"apply": _apply, "notify": _notify, "close": _close}


# --- outcomes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ending:
    """How an attempt ended without confirming its step, and what that makes of the case.

    ``code`` is the outcome as stored in the events' detail (``outcome``) and as the step
    returns it; ``attempt_state`` the state the attempt ends in; ``settle`` moves the case to
    the next safe status. ``settle`` runs under the case lock and only while the attempt is
    current and the case applying: otherwise the ending is recorded and changes nothing."""

    code: ClassVar[str]
    attempt_state: ClassVar[Attempt.State] = Attempt.State.FAILED
    text: str

    @property
    def error(self) -> str:
        """The ``error`` of the events' detail: the outcome itself unless a refusal names one."""
        return self.code

    def settle(self, case: Case, attempt: Attempt, worker: Worker, detail: dict[str, Any]) -> None:
        raise NotImplementedError


def _hold(
    case: Case, worker: Worker, detail: dict[str, Any], *, error: str, reason: str, waiting: str
) -> None:
    """The endings that leave the effect for a person to look at: held, waiting on the owner,
    looked at again on the first backoff step."""
    apply_transition(
        case,
        "hold",
        actor=worker,
        detail=detail,
        last_error=error,
        reason=reason,
        waiting=(WaitingOn.OWNER, waiting),
        next_check_at=next_retry_at(1),
    )


@dataclass(frozen=True)
class EndedEffectUnknown(Ending):
    """Sent, and no usable answer came back: held, reconciled from evidence, never re-sent."""

    code: ClassVar[str] = "effect_unknown"
    attempt_state: ClassVar[Attempt.State] = Attempt.State.EFFECT_UNKNOWN

    def settle(self, case: Case, attempt: Attempt, worker: Worker, detail: dict[str, Any]) -> None:
        _hold(
            case,
            worker,
            detail,
            error=self.text,
            reason=f"Effect unknown: {attempt.operation.key} was sent and no answer came "
            "back. Reconcile the same operation from evidence; never send it blindly again",
            waiting="Effect unknown: reconcile from the order system",
        )


@dataclass(frozen=True)
class EndedFenced(Ending):
    """The order system refused this attempt's token: another owner exists. Held."""

    code: ClassVar[str] = "fenced"
    attempt_state: ClassVar[Attempt.State] = Attempt.State.FENCED

    def settle(self, case: Case, attempt: Attempt, worker: Worker, detail: dict[str, Any]) -> None:
        _hold(
            case,
            worker,
            detail,
            error=self.text,
            reason="The order system refused a stale fencing token: another owner exists",
            waiting="Another owner exists: reconcile before anything else",
        )


@dataclass(frozen=True)
class EndedLookupMismatch(Ending):
    """The look before writing found the operation key holding another change; nothing sent."""

    code: ClassVar[str] = "lookup_mismatch"

    def settle(self, case: Case, attempt: Attempt, worker: Worker, detail: dict[str, Any]) -> None:
        _hold(
            case,
            worker,
            detail,
            error=self.text,
            reason=f"Looked before writing: {self.text}. Nothing was sent",
            waiting="The operation key shows another change: look",
        )


@dataclass(frozen=True)
class EndedTransient(Ending):
    """Nothing was applied: retried on the bounded backoff, then a person decides."""

    code: ClassVar[str] = "transient"
    retry_after: float | None = None

    def settle(self, case: Case, attempt: Attempt, worker: Worker, detail: dict[str, Any]) -> None:
        _retry_or_give_up(case, worker, attempt, self.text, self.retry_after, detail)


@dataclass(frozen=True)
class EndedSourceChanged(Ending):
    """The order moved since the proposal's evidence: the proposal and its approval are void."""

    code: ClassVar[str] = "source_changed"

    def settle(self, case: Case, attempt: Attempt, worker: Worker, detail: dict[str, Any]) -> None:
        from approvals.services import proposal_invalidate_for_source_change

        proposal_invalidate_for_source_change(
            case=case,
            order_version=None,
            actor=worker,
            via=f"{attempt.reference}: {self.text}",
        )


@dataclass(frozen=True)
class EndedApprovalExpired(Ending):
    """The approval lapsed before the change was sent: the same proposal goes back to review."""

    code: ClassVar[str] = "approval_expired"

    def settle(self, case: Case, attempt: Attempt, worker: Worker, detail: dict[str, Any]) -> None:
        from approvals.services import open_proposal, proposal_return_to_review

        proposal_return_to_review(open_proposal(case), "Expired before it was applied")
        apply_transition(
            case,
            "approval_expired",
            actor=worker,
            detail=detail,
            reason=f"{self.text}; the same proposal needs a fresh decision",
            next_check_at=review_due_at(timezone.now()),
            apply_authorized_by=None,
        )


@dataclass(frozen=True)
class EndedNeedsAttention(Ending):
    """A definite refusal repeating would not change (``refusal`` is its code): escalated."""

    code: ClassVar[str] = "needs_attention"
    refusal: str = ""

    @property
    def error(self) -> str:
        return self.refusal or self.code

    def settle(self, case: Case, attempt: Attempt, worker: Worker, detail: dict[str, Any]) -> None:
        apply_transition(
            case,
            "escalate",
            actor=worker,
            detail=detail,
            last_error=self.text,
            reason=f"The order system refused {attempt.operation.key}: {self.text}. Repeating "
            "it would change nothing; a person must correct the cause",
            waiting=(WaitingOn.OWNER, f"Needs a person: {self.error}"),
            next_check_at=None,
        )


def _finish(attempt: Attempt, worker: Worker, ending: Ending) -> str:
    """Record how the attempt ended and move the case to the next safe status.

    An attempt still active ends in ``ending.attempt_state`` (one already ended keeps its own
    state). Only a current
    attempt of an applying case moves it (``ending.settle``); an attempt asked to stop settles
    as a stop; any other late ending is recorded and changes nothing. Returns the outcome."""
    now = timezone.now()
    with case_step(attempt.case_id, actor=worker) as case:
        fresh = Attempt.objects.select_for_update().get(pk=attempt.pk)
        current = fresh.state == Attempt.State.RUNNING
        cancelling = fresh.state == Attempt.State.CANCEL_REQUESTED
        # The case's next event (the ending's or a late-result fact) names the attempt.
        attempt_finish(
            attempt,
            ending.attempt_state,
            case=case,
            actor=worker,
            event=None,
            last_error=ending.text[:2000],
            finished_at=now,
        )
        if cancelling and case.status == Status.APPLYING:
            return _finish_cancelling(case, attempt, worker, ending)
        if not current or case.status != Status.APPLYING:
            record_fact(
                case=case,
                action=Action.ATTEMPT_LATE_RESULT_REFUSED,
                actor=worker,
                reason=f"{attempt.reference} is no longer current ({fresh.state}); "
                f"its outcome '{ending.text}' changes nothing",
                detail={"attempt": attempt.reference, "outcome": ending.code},
            )
            return f"late: {ending.code} recorded only"
        detail = {
            "attempt": attempt.reference,
            "outcome": ending.code,
            "error": ending.error,
            "confirmed_steps": _confirmed_steps(fresh),
        }
        ending.settle(case, attempt, worker, detail)
    return ending.code


def _finish_cancelling(case: Case, attempt: Attempt, worker: Worker, ending: Ending) -> str:
    """The attempt was asked to stop (a revocation or a cancellation) and came back with an
    answer anyway: a stop, unless the effect is unknown (then held, to be reconciled)."""
    from reconciliation.revocation import settle_after_stop

    record_fact(
        case=case,
        action=Action.ATTEMPT_LATE_RESULT_REFUSED,
        actor=worker,
        reason=f"{attempt.reference} was asked to stop; its result '{ending.text}' is "
        "recorded and changes nothing",
        detail={"attempt": attempt.reference, "outcome": ending.code},
    )
    record_slot_released(case, attempt, worker)
    if isinstance(ending, EndedEffectUnknown):
        apply_transition(
            case,
            "hold",
            actor=worker,
            last_error=ending.text,
            reason="Asked to stop while a change was in flight and the outcome "
            "is unknown: reconcile before anything else",
            next_check_at=next_retry_at(1),
        )
        return "late: effect unknown, held"
    settle_after_stop(case, worker, f"{attempt.reference} ended: {ending.text}")
    return f"late: {ending.code} recorded only"


def _confirmed_steps(attempt: Attempt) -> list[str]:
    order: list[str] = [Attempt.Step.APPLIED, Attempt.Step.NOTIFIED, Attempt.Step.CLOSED]
    if attempt.last_confirmed_step not in order:
        return []
    return [str(s) for s in order[: order.index(attempt.last_confirmed_step) + 1]]


def _retry_or_give_up(
    case: Case, worker: Worker, attempt: Attempt, text: str, retry_after: float | None, detail: dict
) -> None:
    """Nothing was applied: one more failure of the ``apply`` policy (its own counter), retried
    later or, at ``settings.ATTEMPT_LIMIT``, given to a person (``transient_failure_record``)."""
    steps = literal(", ".join(detail["confirmed_steps"]) or "none")
    transient_failure_record(
        case=case,
        kind="apply",
        error=text,
        actor=worker,
        retry_after=retry_after,
        detail=detail,
        retry=Words(
            reason="Nothing applied ({error}); retry {next_try} of {limit} at {next_time}",
            waiting="Unavailable; retrying on a bounded backoff",
        ),
        give_up=Words(
            reason="Gave up after {failures} attempts. Last error: {error}. Confirmed steps: "
            f"{steps}. Next permitted check: {{next_check}}",
            waiting="Attempts exhausted: a person decides when to retry",
        ),
        retry_transition="retry_later",
    )
