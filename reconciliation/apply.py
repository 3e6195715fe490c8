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
(``reconciliation.restore_detection``): a restored database is recovered before any claim.

Notifications carry a key per operation and step (``<operation key>:notify``, also the message's
``Message-ID``), recorded before sending. When the records show the notification may already
have gone (a send was recorded without its confirmation, or the change was applied after the
backup these records came from), it is not sent again: the case shows that it may have gone,
and a person confirms (``case_record_customer_told``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from approvals.models import Operation
from approvals.services import review_deadline
from cases import kinds
from cases.attempts import attempt_finish
from cases.backoff import next_retry_at
from cases.codes import Action
from cases.kernel import (
    Worker,
    apply_transition,
    bump_and_save,
    case_step,
    lock_case_at_head,
    lock_case_at_head_with,
    record_event,
    record_fact,
    writes_batched,
)
from cases.logcontext import log_context
from cases.models import (
    Attempt,
    Case,
    CaseEvent,
    Status,
    WaitingOn,
)
from cases.retries import retries_reset
from cases.rows import update_unread, writes_held
from cases.scheduling import enqueue_on_commit
from cases.services import CANCELLATION_PENDING
from reconciliation import customer_mail, metrics
from reconciliation.claims import (
    Claimed,
    ClaimRefused,
    SourceCheckDue,
    StaleAttempt,
    attempt_acknowledge_cancel,
    attempt_heartbeat,
    claim_case,
    claim_next_due,
    keep_alive,
    record_claim_released,
)
from reconciliation.client import OperationRecord, OperationResult, OrderSystemClient
from reconciliation.complete import case_complete
from reconciliation.exceptions import (
    ApprovalRefused,
    Conflict,
    EffectUnknown,
    InvalidInput,
    OrderSystemError,
    Transient,
    UnknownOperation,
    plain_failure,
)
from reconciliation.failures import Words, literal, transient_failure_record
from reconciliation.leases import (
    approval_live,
    lease_expiry,
    lease_renew_applied,
    lease_renew_submitting,
)
from reconciliation.restore_detection import (
    RecoveryRequired,
    restore_detected_at_source,
    source_check_forget,
)
from reconciliation.restore_recovery import recover_after_restore
from reconciliation.settle import found_as_intended, operation_confirm
from reconciliation.stopping import stopping

logger = logging.getLogger(__name__)
# A worker's steps read the locked case with its account only: no permission check runs for a
# worker, and the notification needs the customer's address.
WORKER_RELATED = ("account",)

# Facts that mean the customer may already have been told about an applied operation.

# Named points of the apply step (``after_claim``: claimed, nothing sent yet; ``after_submit``:
# the order system answered, the answer not saved yet; ``after_confirm``: the answer and the
# notification's start are saved, the email not sent yet -- or, with no address to send to,
# the notification's step and the close are saved with the answer; with ``notify_later`` the
# answer alone, its notification queued as its own task). Each observer is called
# with the point's name; none is registered unless a drill worker registers its stop point
# (``lab.drills.step_points``, never in production) or a test adds one, so by default the
# points do nothing.
STEP_POINT_OBSERVERS: list[Callable[[str], None]] = []


def _reached(point: str) -> None:
    for observer in STEP_POINT_OBSERVERS:
        observer(point)


# The outcomes of a claim refused because these records may be older than the order system:
# a worker taking one due case after another stops at them (recovery ran, or must).
RESTORE_DETECTED = "refused: restore detected"
RECOVERY_REQUIRED = "refused: recovery after restore required"
RESTORE_REFUSALS = (RESTORE_DETECTED, RECOVERY_REQUIRED)
NOTIFY_TASK = "reconciliation.tasks.notify_case"


def apply_case(
    *,
    case_id: int,
    client: OrderSystemClient | None = None,
    worker: Worker | None = None,
    notify_later: bool = False,
) -> str:
    """Claim the case and run its remaining steps. Safe to run twice: only a claim acts.
    ``notify_later``: the customer's notification is its own task (:func:`notify_case`)."""
    worker = worker or Worker.current("apply")
    client = client or OrderSystemClient.from_settings()

    def claim(source_checked: bool) -> Claimed:
        return claim_case(case_id=case_id, worker=worker, source_checked=source_checked)

    outcome = _claim_and_run(claim, client, worker, notify_later=notify_later)
    return outcome if outcome is not None else "refused: nothing to claim"


def apply_due(
    *,
    client: OrderSystemClient | None = None,
    worker: Worker | None = None,
    seconds: float = 30.0,
    limit: int | None = None,
    notify_later: bool = False,
) -> list[str]:
    """Apply due ready cases one after another, each taken the moment the last one is done
    (``claim_next_due``), until none is due, ``limit`` were taken or ``seconds`` have passed
    (then the dispatcher's next pass goes on). Returns each case's outcome."""
    worker = worker or Worker.current("apply")
    client = client or OrderSystemClient.from_settings()
    deadline = time.monotonic() + seconds
    skip: set[int] = set()
    outcomes: list[str] = []

    def claim(source_checked: bool) -> Claimed | None:
        return claim_next_due(worker=worker, skip=skip, source_checked=source_checked)

    while (limit is None or len(outcomes) < limit) and time.monotonic() < deadline:
        if stopping():  # the cluster is stopping: the dispatcher gives the rest to the next
            break
        outcome = _claim_and_run(claim, client, worker, notify_later=notify_later)
        if outcome is None:
            break
        outcomes.append(outcome)
        if outcome.startswith(RESTORE_REFUSALS):  # a restore: recovery ran, stop here
            break
    return outcomes


def _claim_and_run(
    claim: Callable[[bool], Claimed | None],
    client: OrderSystemClient,
    worker: Worker,
    *,
    notify_later: bool = False,
) -> str | None:
    """Claim (``claim(source_checked)``), then run the steps; None when nothing was claimable.

    No claim that may write on records older than the order system: when no comparison with it
    is recent, the claim says so (``SourceCheckDue``), the order system is asked outside any
    transaction, and the claim is made again."""
    try:
        try:
            claimed = claim(False)
        except SourceCheckDue:
            why = restore_detected_at_source(client=client)
            if why:
                logger.warning("Database restore detected at the source (%s): recovering", why)
                recover_after_restore(progress=logger.info, client=client)
                return f"{RESTORE_DETECTED} ({why}); recovered before any claim"
            claimed = claim(True)
    except ClaimRefused as refusal:
        return f"refused: {refusal.extra.get('reason', refusal.code)}"
    except RecoveryRequired:
        return RECOVERY_REQUIRED
    if claimed is None:
        return None
    attempt = claimed.attempt
    with log_context(
        case=claimed.case.reference,
        operation=claimed.operation.key,
        attempt=attempt.reference,
        fencing_token=attempt.fencing_token,
        worker=worker.label,
    ):
        outcome = run_attempt(
            attempt_id=attempt.pk,
            client=client,
            worker=worker,
            claimed=claimed,
            notify_later=notify_later,
        )
        logger.info("%s ended: %s", attempt.reference, outcome)
    return outcome


@dataclass(frozen=True)
class _Authority:
    """What the apply step sends under: the live approval's grant and the proposal's evidence
    version (read by the claim, or here for an attempt run without one)."""

    approval_id: int
    grant: str
    evidence_order_version: int
    decided_at: dt.datetime | None = None


def _authority(attempt: Attempt, claimed: Claimed | None) -> _Authority | None:
    if claimed is not None:
        if claimed.approval_id is None:
            return None
        return _Authority(
            claimed.approval_id,
            claimed.approval_grant,
            claimed.evidence_order_version,
            claimed.approval_decided_at,
        )
    from approvals.services import live_approval, open_proposal

    approval = live_approval(attempt.case)
    proposal = open_proposal(attempt.case)
    if approval is None or proposal is None:
        return None
    return _Authority(
        approval.pk, approval.grant, proposal.evidence_order_version, approval.decided_at
    )


def run_attempt(
    *,
    attempt_id: int,
    client: OrderSystemClient,
    worker: Worker,
    claimed: Claimed | None = None,
    notify_later: bool = False,
) -> str:
    """Run the attempt's steps that are not confirmed yet. After a claim (``claimed``) nothing
    the claim read is read again: the change goes out after one more write (the mark that it
    may leave, which also renews the lease), its answer and the notification's start are one
    transaction, and the notification's confirmation closes the case in the next (in the same
    one, when there is no address to send to).

    ``notify_later`` (the cluster's tasks): the notification is its own step, in its own task
    (:func:`notify_case`, enqueued once the answer is saved), so this worker takes its next
    case without waiting on the mail server. The answer's transaction then begins nothing of
    the notification: a worker that dies between the two leaves a notification that was never
    begun, which the task (or, if the task is lost, the attempt resumed after its lease) sends
    exactly once."""
    if claimed is not None:
        attempt = claimed.attempt
    else:
        attempt = Attempt.objects.select_related("operation", "case__account").get(pk=attempt_id)
    plan: Notify | None = None
    if attempt.operation.confirmed_at is None:
        outcome, plan = _apply_step(attempt, client, worker, claimed, notify_later=notify_later)
        metrics.apply_outcome(outcome)
        if outcome != "confirmed":
            return outcome
        _reached("after_confirm")
        if plan is Notify.CLOSED:
            return "done"
        if plan is Notify.LATER:
            enqueue_on_commit(NOTIFY_TASK, attempt.case_id)
            return "applied: the customer's notification queued"
    if attempt.operation.notified_at is None:
        outcome = _notify(attempt, worker, plan)
        if outcome != "confirmed":
            return outcome
    return _close(attempt, worker)


# --- step: apply ---------------------------------------------------------------------------


def _apply(attempt: Attempt, client: OrderSystemClient, worker: Worker) -> str:
    """The apply step alone (nothing of the notification begins with it), for an attempt run
    without its claim's reads; its outcome."""
    return _apply_step(attempt, client, worker, None, then_notify=False)[0]


def _apply_step(
    attempt: Attempt,
    client: OrderSystemClient,
    worker: Worker,
    claimed: Claimed | None,
    *,
    then_notify: bool = True,
    notify_later: bool = False,
) -> tuple[str, Notify | None]:
    if claimed is None:
        # Not just claimed: the attempt may have lost its lease or been asked to stop.
        try:
            lease = attempt_heartbeat(attempt_id=attempt.pk, fencing_token=attempt.fencing_token)
        except StaleAttempt:
            return "stale: stopped before doing anything more", None
        if lease.cancel_requested:
            # Only before the change is sent does stopping mean nothing was applied; after it
            # is confirmed the remaining steps finish and the cancellation is "after change".
            attempt_acknowledge_cancel(attempt_id=attempt.pk, worker=worker)
            return "cancel acknowledged", None
    authority = _authority(attempt, claimed)
    if authority is None:
        # Checked again here, not only at claim time: the approval may lapse in between.
        ended = EndedApprovalExpired("The approval expired before the change was sent")
        return _finish(attempt, worker, ended), None
    operation = attempt.operation
    why = _may_have_been_sent(attempt, claimed)
    if why:
        looked = _look_before_write(
            attempt, client, worker, why, then_notify=then_notify, notify_later=notify_later
        )
        if looked is not None:
            _observe_latency(looked[0], authority)
            return looked
    _reached("after_claim")  # a drill may stop this worker here
    if not _mark_submitting(attempt, authority):
        return _stopped_before_submitting(attempt, worker, authority), None
    try:
        with keep_alive(attempt):
            result = client.apply_operation(
                operation.order_id,
                operation_key=operation.key,
                change=operation.change,
                expected_version=authority.evidence_order_version,
                fencing_token=attempt.fencing_token,
                approval_grant=authority.grant,
            )
    except OrderSystemError as exc:
        return attempt_record_refusal(attempt, worker, exc), None
    _reached("after_submit")
    recorded = _record_applied(
        attempt, worker, result, then_notify=then_notify, notify_later=notify_later
    )
    _observe_latency(recorded[0], authority)
    return recorded


def _observe_latency(outcome: str, authority: _Authority) -> None:
    """A confirmed apply step: the time from its approval to the confirmation."""
    if outcome == "confirmed" and authority.decided_at is not None:
        metrics.approval_to_applied((timezone.now() - authority.decided_at).total_seconds())


def _may_have_been_sent(attempt: Attempt, claimed: Claimed | None = None) -> str:
    """Why the operation may already be at the order system, or '' when these records prove
    nothing could have been sent: no attempt of it ever got as far as submitting
    (``Attempt.submitted_at`` is null on every one) and the case was never recovered after a
    restore. Only then does the write go without a look first. The claim already read both
    (``claimed``): then only a yes is looked at again, for its words."""
    if claimed is not None and not (claimed.earlier_submitted or claimed.restored):
        return ""
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
    attempt: Attempt,
    client: OrderSystemClient,
    worker: Worker,
    why: str,
    *,
    then_notify: bool,
    notify_later: bool = False,
) -> tuple[str, Notify | None] | None:
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
        return attempt_record_refusal(attempt, worker, exc), None
    intended = (
        found_as_intended(operation, record)
        and record.status == "applied"
        and record.order_version is not None
    )
    if not intended:
        ended = EndedLookupMismatch(
            f"{operation.key} exists at the order system with another change "
            f"({record.order_id}: {kinds.audit_words(record.change)}, {record.status}); "
            "a person must look"
        )
        return _finish(attempt, worker, ended), None
    return _record_applied(
        attempt,
        worker,
        _looked_up(record),
        looked_up=f"{why}; the consistent lookup found it",
        then_notify=then_notify,
        notify_later=notify_later,
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


def _stopped_before_submitting(attempt: Attempt, worker: Worker, authority: _Authority) -> str:
    """The write may not leave (:func:`_mark_submitting` refused). Asked to stop (a
    cancellation or a revocation recorded during the claim), the attempt acknowledges at once:
    worker stopped, claim released, and the case settles -- instead of staying 'applying' until
    its lease runs out. Still running, its approval lapsed meanwhile: ended as expired, nothing
    sent. Otherwise (lease expired, fenced) the watchdog or the new owner already decides."""
    state = Attempt.objects.filter(pk=attempt.pk).values_list("state", flat=True).first()
    if state == Attempt.State.CANCEL_REQUESTED:
        attempt_acknowledge_cancel(attempt_id=attempt.pk, worker=worker)
        return "cancel acknowledged"
    live = approval_live(authority.approval_id, timezone.now())
    if state == Attempt.State.RUNNING and not live.exists():
        ended = EndedApprovalExpired("The approval expired before the change was sent")
        return _finish(attempt, worker, ended)
    return "stale: stopped before submitting"


def _mark_submitting(attempt: Attempt, authority: _Authority | None = None) -> bool:
    """Durably note that the write may leave now, in one statement that also renews the lease
    (``reconciliation.leases.lease_renew_submitting``): only while the attempt is current, its
    lease unexpired and the approval it sends under (``authority``) still live."""
    now = timezone.now()
    return lease_renew_submitting(
        attempt,
        None if authority is None else authority.approval_id,
        now=now,
        lease=lease_expiry(attempt.kind, now),
    )


def attempt_record_applied(
    attempt: Attempt, worker: Worker, result: OperationResult, *, looked_up: str = ""
) -> str:
    """The order system applied (or replayed) the operation — or the consistent lookup shows it
    applied (``looked_up`` says why it was looked for): that is a fact, recorded as evidence
    whatever happened to the attempt meanwhile."""
    return _record_applied(attempt, worker, result, looked_up=looked_up)[0]


def _record_applied(
    attempt: Attempt,
    worker: Worker,
    result: OperationResult,
    *,
    looked_up: str = "",
    then_notify: bool = False,
    notify_later: bool = False,
) -> tuple[str, Notify | None]:
    """:func:`attempt_record_applied`; with ``then_notify`` the notification's start (the next
    step) is recorded in the same transaction when the attempt is still current, and how it is
    to go is returned with the outcome. With ``notify_later`` too, a notification with an
    address to go to is not begun here (``Notify.LATER``: its own task begins it)."""
    now = timezone.now()
    plan: Notify | None = None
    # The writes whose answer nothing reads go with the next statement (the lease's renewal
    # carries the confirmation and its evidence; the case and its events go together).
    with transaction.atomic(), writes_held():
        case, head, operation = lock_case_at_head_with(
            attempt.case_id,
            WORKER_RELATED,
            Operation,
            attempt.operation_id,
            exists=CANCELLATION_PENDING,
        )
        # The order system applied the change just now, for the first time (not a replay of
        # an earlier send, not found by a look), and these records had not confirmed it: it
        # was never applied before, so nobody can have been told of it yet, and nothing below
        # records an event before the batch (``_confirm_answer`` records one only for a replay).
        first_applied = operation.confirmed_at is None and not result.replayed and not looked_up
        _confirm_answer(case, operation, attempt, worker, result, looked_up)
        # Still current: the step is confirmed and the lease renewed for the steps after it.
        current = lease_renew_applied(attempt, now)
        begins = current and then_notify and operation.notified_at is None
        batched = _answer_batched(case, head, begins=begins, first_applied=first_applied)
        with batched:
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
            step = record_event(
                case=case,
                action=Action.STEP_APPLIED if current else Action.ATTEMPT_LATE_RESULT_RECORDED,
                actor=worker,
                reason=_step_reason(operation, attempt, result, looked_up, current=current),
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
            attempt.operation = operation  # as locked and confirmed here
            if current and then_notify and operation.notified_at is None:
                attempt.case = case
                # The chain's head is the step's event, recorded just now under this lock.
                plan = (
                    Notify.LATER
                    if notify_later and not _no_address(case)
                    else _notify_begin(
                        case, attempt, worker, head=step.hash, first_applied=first_applied
                    )
                )
                if plan is Notify.NO_ADDRESS:
                    # Nothing leaves for the notification: its step and the close are recorded with
                    # the answer, in this transaction.
                    closed = _notified_locked(case, attempt, worker, plan, head=step.hash)
                    if closed != "done":
                        return closed, None
                    plan = Notify.CLOSED
    return ("confirmed" if current else "late: recorded as evidence"), plan


def _answer_batched(
    case: Case, head: str | None, *, begins: bool, first_applied: bool
) -> contextlib.AbstractContextManager[None]:
    """How the answer's transaction writes what follows the confirmation. When it begins the
    notification (``begins``) and nothing below reads the case's row or its events back (a
    first application skips the look for an earlier notification; with no address there is
    nothing to look for), the case is saved once and the events inserted together, linked
    from the head read with the lock (only when no event was recorded since: a replay
    records its finding first)."""
    if begins and (first_applied or _no_address(case)):
        return writes_batched(case, head=head if first_applied else None)
    return contextlib.nullcontext()


def _confirm_answer(
    case: Case,
    operation: Operation,
    attempt: Attempt,
    worker: Worker,
    result: OperationResult,
    looked_up: str,
) -> None:
    """Confirm the operation from the order system's answer (or the look's find), under the
    case and operation locks the caller holds; a first send answered "already applied" is
    recorded as what it shows: these records are older than the order system."""
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
        summary=f"{operation.key} {how}: {operation.description}, "
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


def _step_reason(
    operation: Operation,
    attempt: Attempt,
    result: OperationResult,
    looked_up: str,
    *,
    current: bool,
) -> str:
    """The words of the apply step's event."""
    reason = (
        f"{operation.key} {'found applied' if looked_up else 'applied'} at order "
        f"version {result.order_version}"
    )
    if looked_up:
        reason += f" ({looked_up}); not written again"
    if not current:
        reason += (
            f"; {attempt.reference} was no longer current, so its result is recorded as "
            "evidence only"
        )
    return reason


def attempt_record_refusal(attempt: Attempt, worker: Worker, exc: OrderSystemError) -> str:
    """End the attempt on the order system's error (``ending_for``)."""
    return _finish(attempt, worker, ending_for(exc))


def ending_for(exc: OrderSystemError) -> Ending:
    """How an order-system error ends the attempt: decided here once, by the error's class
    (``reconciliation.exceptions``) and, for a conflict or a refused grant, its code."""
    text = f"{exc.error}: {exc.detail}".strip(": ")
    match exc:
        case EffectUnknown():
            return EndedEffectUnknown(
                f"the change was sent and the order system {plain_failure(exc)} ({text})"
            )
        case Transient(retry_after=retry_after):
            return EndedTransient(text, retry_after=retry_after)
        case Conflict(error="version_conflict"):
            return EndedSourceChanged(text)
        case Conflict(error="stale_fencing_token"):
            return EndedFenced(text)
        case ApprovalRefused(error="approval_expired"):
            return EndedApprovalExpired(text)
        case InvalidInput(fields=fields) if fields:
            # Which field the receiver refused and why: what the person must correct.
            named = "; ".join(
                f"{name}: {' '.join(messages) or 'refused'}" for name, messages in fields.items()
            )
            return EndedNeedsAttention(f"{text} ({named})", refusal=exc.error, fields=dict(fields))
        case _:
            # Definite refusals that need a person: invalid input, a kind's conflict, a grant the
            # receiver does not accept, revoked permission, a reused key, an unknown order, a
            # credential the order system refuses. Repeating them changes nothing.
            return EndedNeedsAttention(text, refusal=exc.error)


# --- step: notify --------------------------------------------------------------------------


def notification_key(operation: Operation) -> str:
    """The notification's identity: one per operation and step, the same on every resend."""
    return f"{operation.key}:notify"


def _message_id(key: str) -> str:
    domain = settings.DEFAULT_FROM_EMAIL.rpartition("@")[2].strip("> ") or "holdfast.invalid"
    return f"<{key.replace(':', '.')}@{domain}>"


def _may_have_been_told(case: Case, operation: Operation, key: str) -> str:
    """Why the customer may already have been told about this operation, or '' (one read of the
    case's events: sends of ``key`` begun and failed, and restore findings about the operation,
    whether the recovery found it applied or a first send was answered "already applied")."""
    restore_findings = [Action.RESTORE_APPLIED_BEFORE_RESTORE, Action.RESTORE_UNEXPECTED_REPLAY]
    seen = (
        CaseEvent.objects.filter(case=case)
        .filter(
            Q(detail__notify_key=key)
            | Q(action__in=restore_findings, detail__operation_key=operation.key)
        )
        .aggregate(
            started=Count("pk", filter=Q(action=Action.NOTIFICATION_SENDING)),
            failed=Count("pk", filter=Q(action=Action.NOTIFICATION_FAILED)),
            restored=Count("pk", filter=Q(action__in=restore_findings)),
        )
    )
    if seen["started"] > seen["failed"]:
        return f"a send of {key} was recorded before and never confirmed"
    if seen["restored"]:
        return (
            f"{operation.key} was applied after the backup these records were restored from, "
            "and what followed it there is not in them"
        )
    return ""


class Notify(enum.Enum):
    """How the notification step goes, decided (and its start recorded) under the case lock."""

    SEND = "send"  # the send is recorded as started: send it, then confirm it
    NO_ADDRESS = "no_address"  # nothing to send: confirm the step
    UNCERTAIN = "uncertain"  # it may already have gone: not sent, a person confirms
    CLOSED = "closed"  # nothing to send: the step confirmed and the case closed with the answer
    LATER = "later"  # not begun: its own task (notify_case) begins it once the answer is saved


def _no_address(case: Case) -> bool:
    """Nothing to send the notification to: the step is confirmed without a send."""
    return not case.account.email


def _notify_begin(
    case: Case,
    attempt: Attempt,
    worker: Worker,
    *,
    head: str | None = None,
    first_applied: bool = False,
) -> Notify:
    """Decide the notification under the case lock the caller holds, and record its start
    (``head``: the audit chain's head, when the caller just recorded an event). The caller
    just confirmed the operation from the order system's first application of it
    (``first_applied``): nobody can have been told of a change that was never applied, so the
    case's events are not searched for an earlier send."""
    operation = attempt.operation
    if _no_address(case):
        return Notify.NO_ADDRESS
    address = case.account.email
    key = notification_key(operation)
    why = "" if first_applied else _may_have_been_told(case, operation, key)
    if why:
        _notification_uncertain(case, attempt, worker, key, address, why, head=head)
        return Notify.UNCERTAIN
    # Recorded before the send: a send that dies before its confirmation is recognisable
    # afterwards, and never repeated blindly.
    record_fact(
        case=case,
        action=Action.NOTIFICATION_SENDING,
        actor=worker,
        reason=f"Notifying the customer at {address} ({key})",
        detail={"attempt": attempt.reference, "notify_key": key},
        head=head,
    )
    return Notify.SEND


def _notify(attempt: Attempt, worker: Worker, plan: Notify | None) -> str:
    """Tell the customer (``plan``: begun with the apply's answer; None: begin here), then
    confirm the step and close the case in one transaction. Returns "confirmed" when only the
    close is left."""
    operation = attempt.operation
    if plan is None:
        try:
            attempt_heartbeat(attempt_id=attempt.pk, fencing_token=attempt.fencing_token)
        except StaleAttempt:
            return "stale: stopped before doing anything more"
        with case_step(attempt.case_id, actor=worker, related=WORKER_RELATED) as case:
            if not _still_to_notify(attempt):
                return "nothing to notify"
            attempt.case = case
            plan = _notify_begin(case, attempt, worker)
    if plan is Notify.UNCERTAIN:
        return "confirmed"
    case = attempt.case
    address = case.account.email
    key = notification_key(operation)
    if plan is Notify.SEND:
        try:
            customer_mail.send(
                EmailMessage(
                    subject=f"Your request {case.reference} for order {operation.order_id} is done",
                    body=(
                        f"Hello {case.account.name},\n\nAs you asked ({case.reference}), for "
                        f"order {operation.order_id}: {operation.description}. This is done.\n"
                    ),
                    from_email=settings.DEFAULT_FROM_EMAIL,
                    to=[address],
                    headers={"Message-ID": _message_id(key), "X-Holdfast-Notification-Key": key},
                )
            )
        except customer_mail.NotSent as exc:  # nothing went: the next run sends it again
            _notification_not_sent(case.pk, attempt, worker, key, exc)
            return _finish(attempt, worker, EndedTransient(f"notification failed: {exc}"))
        except customer_mail.MayHaveGone as exc:  # it may have gone: never sent again
            with case_step(case.pk, actor=worker, related=WORKER_RELATED) as locked_case:
                why = f"the mail server never confirmed the send ({exc})"
                _notification_uncertain(locked_case, attempt, worker, key, address, why)
            return "confirmed"
    # The step and the close read nothing back: one save of the case, the events together,
    # and what nothing reads goes with the next statement.
    with transaction.atomic(), writes_held():
        case, head = lock_case_at_head(case.pk, WORKER_RELATED, exists=CANCELLATION_PENDING)
        with writes_batched(case, head=head):
            return _notified_locked(case, attempt, worker, plan)


def _still_to_notify(attempt: Attempt) -> bool:
    """Under the case lock: whether the attempt still runs and its notification step is not
    done, read now. What the caller read before the lock may be from before another run of
    the same step (a task delivered twice) confirmed it and closed the case, whose send would
    then look begun and never confirmed: a question for a person about a mail that went."""
    return Attempt.objects.filter(
        pk=attempt.pk, state__in=Attempt.ACTIVE, operation__notified_at__isnull=True
    ).exists()


def notify_case(*, case_id: int, worker: Worker | None = None) -> str:
    """The notification step as its own task (``run_attempt(notify_later=True)`` enqueues it
    once the apply's answer is saved): begin it, send, confirm and close, as the attempt that
    confirmed the apply (its lease, renewed with the answer, and its fencing token decide).

    Safe to run twice: once the step is confirmed there is nothing to notify; a send begun and
    not confirmed is never repeated (:func:`_notify_begin`: a person confirms). Lost, the
    attempt's lease runs out and the sweep's watchdog sends the case back to resume its
    remaining steps; too late (the lease ran out first), the heartbeat refuses it."""
    worker = worker or Worker.current("notify")
    attempt = (
        Attempt.objects.select_related("operation", "case__account")
        .filter(
            case_id=case_id,
            state__in=Attempt.ACTIVE,
            operation__confirmed_at__isnull=False,
            operation__notified_at__isnull=True,
        )
        .order_by("-sequence")
        .first()
    )
    if attempt is None:
        return "nothing to notify"
    with log_context(
        case=attempt.case.reference,
        operation=attempt.operation.key,
        attempt=attempt.reference,
        fencing_token=attempt.fencing_token,
        worker=worker.label,
    ):
        outcome = _notify(attempt, worker, None)
        if outcome == "confirmed":
            outcome = _close(attempt, worker)
        logger.info("%s notification: %s", attempt.reference, outcome)
    return outcome


def _notified_locked(
    case: Case, attempt: Attempt, worker: Worker, plan: Notify, *, head: str | None = None
) -> str:
    """Under the case lock the caller holds: the notification step confirmed (sent, or nothing
    to send), then the close, unless the case moved on meanwhile. ``head``: the audit chain's
    head, when the caller just recorded an event."""
    operation = attempt.operation
    key = notification_key(operation)
    now = timezone.now()
    update_unread(
        Operation, {"pk": operation.pk, "notified_at__isnull": True}, {"notified_at": now}
    )
    operation.notified_at = operation.notified_at or now
    notified = record_fact(
        case=case,
        action=Action.STEP_NOTIFIED,
        actor=worker,
        reason=f"Customer notified at {case.account.email} ({key})"
        if plan is Notify.SEND
        else "No customer address on file: nothing sent",
        detail={
            "attempt": attempt.reference,
            "notify_key": key if plan is Notify.SEND else None,
        },
        head=head,
    )
    if case.status != Status.APPLYING:
        Attempt.objects.filter(pk=attempt.pk).update(last_confirmed_step=Attempt.Step.NOTIFIED)
        return "stale: the case moved on"
    # The chain's head is the step's event, recorded just now under this lock.
    _close_locked(case, attempt, worker, head=notified.hash)
    return "done"


def _notification_not_sent(case_id: int, attempt: Attempt, worker: Worker, key: str, exc) -> None:
    """The mail backend refused the message: it did not go, so the next run sends it again."""
    with case_step(case_id, actor=worker, related=WORKER_RELATED) as case:
        record_fact(
            case=case,
            action=Action.NOTIFICATION_FAILED,
            actor=worker,
            # Accounts for the "sending" record before it: that send did not go.
            reason=f"{key} was not sent: {exc}",
            detail={"attempt": attempt.reference, "notify_key": key, "sent": False},
        )


def _notification_uncertain(
    case: Case,
    attempt: Attempt,
    worker: Worker,
    key: str,
    address: str,
    why: str,
    *,
    head: str | None = None,
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
        head=head,
    )
    return "confirmed"


# --- step: close ---------------------------------------------------------------------------


def _close(attempt: Attempt, worker: Worker) -> str:
    with transaction.atomic(), writes_held():
        case, head = lock_case_at_head(attempt.case_id, WORKER_RELATED, exists=CANCELLATION_PENDING)
        if case.status == Status.DONE:
            return "done"  # closed already (run again, or by settlement): nothing left
        if case.status != Status.APPLYING:
            return "stale: the case moved on"
        with writes_batched(case, head=head):
            _close_locked(case, attempt, worker)
    return "done"


def _close_locked(case: Case, attempt: Attempt, worker: Worker, *, head: str | None = None) -> None:
    """The last step, under the case lock the caller holds: the attempt succeeded and the case
    is complete (``head``: the audit chain's head, when the caller just recorded an event)."""
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
        head=head,
    )


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
            reason=f"Looked before writing: {self.text.rstrip('.')}. Nothing was sent",
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
            **review_deadline(case),
            apply_authorized_by=None,
        )


@dataclass(frozen=True)
class EndedNeedsAttention(Ending):
    """A definite refusal repeating would not change (``refusal`` is its code): escalated."""

    code: ClassVar[str] = "needs_attention"
    refusal: str = ""
    # The fields the receiver refused, with its messages (an invalid input's ``fields``).
    fields: dict[str, list[str]] = field(default_factory=dict)

    @property
    def error(self) -> str:
        return self.refusal or self.code

    def settle(self, case: Case, attempt: Attempt, worker: Worker, detail: dict[str, Any]) -> None:
        apply_transition(
            case,
            "escalate",
            actor=worker,
            detail={**detail, "refused_fields": self.fields} if self.fields else detail,
            last_error=self.text,
            reason=f"The order system refused {attempt.operation.key}: "
            f"{self.text.rstrip('.')}. Repeating it would change nothing; a person must correct "
            "the cause",
            waiting=(WaitingOn.OWNER, "Needs a person: the order system refused the change"),
            next_check_at=None,
        )


def _finish(attempt: Attempt, worker: Worker, ending: Ending) -> str:
    """Record how the attempt ended and move the case to the next safe status.

    An attempt still active ends in ``ending.attempt_state`` (one already ended keeps its own
    state). Only a current
    attempt of an applying case moves it (``ending.settle``); an attempt asked to stop settles
    as a stop; any other late ending is recorded and changes nothing. Returns the outcome."""
    now = timezone.now()
    with case_step(attempt.case_id, actor=worker, related=WORKER_RELATED) as case:
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
    record_claim_released(case, attempt, worker)
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
    """A step failed for now: one more failure of the ``apply`` policy (its own counter),
    retried later or, at ``settings.ATTEMPT_LIMIT``, given to a person
    (``transient_failure_record``). Before the change is confirmed nothing was applied and the
    order system is what the case waits on; after it (the customer's notification failed) the
    change stands and a worker's next try of the remaining steps is."""
    steps = literal(", ".join(detail["confirmed_steps"]) or "none")
    applied = Attempt.Step.APPLIED in detail["confirmed_steps"]
    retry = (
        Words(
            reason="The change is applied; the next step failed ({error}); retry {next_try} of "
            "{limit} at {next_time}",
            waiting="Applied; the remaining steps retry on a bounded backoff",
        )
        if applied
        else Words(
            reason="Nothing applied ({error}); retry {next_try} of {limit} at {next_time}",
            waiting="Unavailable; retrying on a bounded backoff",
        )
    )
    transient_failure_record(
        case=case,
        kind="apply",
        error=text,
        actor=worker,
        retry_after=retry_after,
        detail=detail,
        retry=retry,
        retry_waiting_on=WaitingOn.WORKER if applied else WaitingOn.ORDER_SYSTEM,
        give_up=Words(
            reason="Gave up after {failures} attempts. Last error: {error}. Confirmed steps: "
            f"{steps}. Next permitted check: {{next_check}}",
            waiting="Attempts exhausted: a person decides when to retry",
        ),
        retry_transition="retry_later",
    )
