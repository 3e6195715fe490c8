"""Claims, leases and heartbeats: who may act on a case right now.

A claim is one conditional UPDATE that moves the expected case version from ``ready`` to
``applying``; exactly one of any number of racing workers (or a racing cancellation, which is the
same kind of update) wins. The winner's attempt carries a fencing token from the global sequence;
the order system refuses any token below the highest it has seen, so a paused worker that wakes
after its lease ran out cannot change the order. A lease expiry proves nothing about the old
worker: the watchdog holds the case for reconciliation and never starts a replacement itself.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Max
from django.utils import timezone

from cases.attempts import attempt_finish
from cases.codes import Action
from cases.exceptions import CaseError
from cases.fencing import next_fencing_token
from cases.kernel import (
    Actor,
    Worker,
    actor_label,
    apply_transition,
    bump_and_save,
    case_step,
    lock_case,
    record_event,
    record_fact,
    user_or_none,
)
from cases.models import Attempt, Case, Status, WaitingOn
from reconciliation.complete import case_complete
from reconciliation.restored import restore_guard

logger = logging.getLogger(__name__)


class ClaimRefused(CaseError):
    """This worker may not start: someone else holds the case, or a guard does not hold."""

    code = "claim_refused"
    http_status = 409


class StaleAttempt(CaseError):
    """The attempt is no longer the case's current one: stop before submitting anything."""

    code = "stale_attempt"
    http_status = 409


@dataclass(frozen=True)
class Lease:
    attempt_id: int
    fencing_token: int
    expires_at: dt.datetime
    cancel_requested: bool = False


def record_slot_released(case: Case, attempt: Attempt, actor: Actor) -> None:
    """The attempt no longer occupies the case's one execution slot (an operator-visible fact
    distinct from 'worker stopped' and 'lease expired')."""
    record_fact(
        case=case,
        action=Action.ATTEMPT_SLOT_RELEASED,
        actor=actor,
        reason=f"{attempt.reference} released its claim on {case.reference}",
        detail={"attempt": attempt.reference},
    )


def lease_seconds(kind: str) -> float:
    return float(settings.LEASES[kind]["lease_seconds"])


def _claim_guards(case: Case, *, worker: Actor, now: dt.datetime):
    """Check every guard no status can override; return (operation, approval) or refuse."""
    from approvals.services import live_approval, open_proposal
    from reconciliation.selectors import current_autonomy

    if case.revoked_at is not None:
        raise ClaimRefused(f"Authority over {case.reference} was revoked.", reason="revoked")
    if not case.account.access_active:
        raise ClaimRefused(
            f"{case.account.reference} no longer has access: the work stops.",
            reason="access_revoked",
        )
    if case.cancellations.filter(outcome="pending").exists():
        raise ClaimRefused("A cancellation is pending.", reason="cancel_requested")
    proposal = open_proposal(case)
    operation = proposal.operation if proposal else None
    if proposal is None or operation is None:
        raise ClaimRefused("No approved proposal to apply.", reason="no_proposal")
    resuming = operation.confirmed_at is not None
    approval = None
    if not resuming:
        approval = live_approval(case, now)
        if approval is None:
            raise ClaimRefused("The approval has expired.", reason="approval_expired")
        if proposal.evidence_order_version != case.last_checked_order_version:
            raise ClaimRefused(
                "The order changed since the proposal's evidence.", reason="source_changed"
            )
        autonomy = current_autonomy()
        if not autonomy.is_autonomous and case.apply_authorized_by_id is None:
            raise ClaimRefused(
                f"The order system is {autonomy.autonomy.label.lower()}: a person must start "
                "this apply.",
                reason="not_autonomous",
            )
    return operation, approval


def case_claim(
    *, case_id: int, worker: Worker, expected_version: int | None = None, kind: str = "apply"
) -> Attempt:
    """Start one attempt on a ready case, or refuse with the reason.

    ``expected_version`` defaults to the version read here; the conditional UPDATE is what
    decides between racing claimers (and a racing cancellation).
    """
    restore_guard()  # a database restored from a backup is reconciled before any claim
    now = timezone.now()
    case = Case.objects.select_related("account").get(pk=case_id)
    version = case.version if expected_version is None else expected_version
    if case.status != Status.READY or case.version != version:
        raise _lost(case, version)
    try:
        # Read outside the write: every change to these guards bumps the case version
        # (or is time, which the receiver checks again), so the compare-and-set below
        # refuses a claim made on stale guards.
        operation, approval = _claim_guards(case, worker=worker, now=now)
    except ClaimRefused as refusal:
        # The guards read rows one by one: a revocation (or any change) that committed
        # meanwhile closes the approval too, and must be reported as what it is, not as the
        # guard it happened to trip ("approval expired").
        fresh = Case.objects.get(pk=case.pk)
        if fresh.revoked_at is not None and refusal.extra.get("reason") != "revoked":
            raise ClaimRefused(
                f"Authority over {case.reference} was revoked.", reason="revoked"
            ) from None
        if fresh.status != Status.READY or fresh.version != version:
            raise _lost(fresh, version) from None
        with transaction.atomic():
            _act_on_refusal(case.pk, version, refusal)
        raise
    with transaction.atomic():
        won = Case.objects.filter(
            pk=case.pk, status=Status.READY, version=version, revoked_at__isnull=True
        ).update(
            status=Status.APPLYING,
            version=version + 1,
            waiting_on=WaitingOn.WORKER,
            waiting_reason="A worker is applying the change",
            # The watchdog's look: when the attempt's lease runs out without a heartbeat.
            next_check_at=now + dt.timedelta(seconds=lease_seconds(kind)),
            updated_at=now,
        )
        if not won:
            raise _lost(Case.objects.get(pk=case.pk), version)
        case = lock_case(case.pk)
        sequence = (case.attempts.aggregate(n=Max("sequence"))["n"] or 0) + 1
        try:
            with transaction.atomic():
                attempt = Attempt.objects.create(
                    case=case,
                    operation=operation,
                    reference=f"{case.reference}-a{sequence}",
                    sequence=sequence,
                    kind=kind,
                    worker=worker.label,
                    started_by_id=case.apply_authorized_by_id,
                    fencing_token=next_fencing_token(),
                    claimed_at=now,
                    lease_expires_at=now + dt.timedelta(seconds=lease_seconds(kind)),
                    heartbeat_at=now,
                )
        except IntegrityError:
            raise ClaimRefused("Another attempt is already active.", reason="claimed") from None
        record_event(
            case=case,
            action=Action.CASE_CLAIMED,
            actor=worker,
            reason=f"{attempt.reference} claimed {operation.key} (token {attempt.fencing_token})",
            from_status=Status.READY,
            to_status=Status.APPLYING,
            detail={
                "attempt": attempt.reference,
                "operation_key": operation.key,
                "fencing_token": attempt.fencing_token,
                "worker": worker.label,
                "approval": approval.reference if approval else None,
                "lease_expires_at": attempt.lease_expires_at.isoformat(),
            },
        )
    return attempt


def _lost(case: Case, version: int) -> ClaimRefused:
    active = case.attempts.filter(state__in=Attempt.ACTIVE).first()
    if active is not None:
        return ClaimRefused(
            f"{active.reference} already holds {case.reference}.",
            reason="claimed",
            attempt=active.reference,
        )
    if case.status != Status.READY:
        return ClaimRefused(
            f"{case.reference} is {case.get_status_display().lower()}, not ready.",
            reason="not_ready",
            status=case.status,
        )
    return ClaimRefused(
        f"{case.reference} changed (version {version} → {case.version}).", reason="version_changed"
    )


def _act_on_refusal(case_id: int, version: int, refusal: ClaimRefused) -> None:
    """A guard that fails at claim time moves the case where it belongs, once."""
    from approvals.services import approval_expire, proposal_invalidate_for_source_change

    reason = refusal.extra.get("reason")
    worker = Worker.current("claim-guard")
    if reason == "approval_expired":
        approval_expire(case=Case(pk=case_id), actor=worker)
    elif reason == "source_changed":
        case = lock_case(case_id)
        if case.version == version:
            proposal_invalidate_for_source_change(
                case=case,
                order_version=None,
                actor=worker,
                via="claim guard",
            )
    elif reason == "access_revoked":
        case = lock_case(case_id)
        if case.version == version and case.status == Status.READY:
            apply_transition(
                case,
                "escalate",
                actor=worker,
                reason=refusal.detail,
                waiting=(WaitingOn.OWNER, "The customer lost access: the work is stopped"),
                next_check_at=None,
                last_error=refusal.detail,
            )
    elif reason == "not_autonomous":
        case = lock_case(case_id)
        if case.version == version and case.waiting_on != WaitingOn.OWNER:
            case.waiting_on = WaitingOn.OWNER
            case.waiting_reason = "Supervised: a person must start the apply"
            case.next_check_at = None
            bump_and_save(case, ["waiting_on", "waiting_reason", "next_check_at"])
            record_event(
                case=case,
                action=Action.CLAIM_REFUSED,
                actor=worker,
                reason=refusal.detail,
                detail={"reason": reason},
            )


def case_authorize_apply(*, case: Case, actor: Actor, expected_version: int) -> Case:
    """Supervised autonomy: a person starts this apply (a worker then claims it)."""
    from cases.scheduling import enqueue_on_commit

    with case_step(
        case,
        actor=actor,
        permission="cases.lead_case",
        what="start the apply",
        expected_version=expected_version,
    ) as case:
        if case.status != Status.READY:
            raise ClaimRefused(f"{case.reference} is not ready.", reason="not_ready")
        case.apply_authorized_by = user_or_none(actor)
        case.next_check_at = timezone.now()
        case.waiting_on = WaitingOn.WORKER
        case.waiting_reason = f"{actor_label(actor)} started the apply"
        bump_and_save(
            case, ["apply_authorized_by", "next_check_at", "waiting_on", "waiting_reason"]
        )
        record_event(
            case=case,
            action=Action.APPLY_AUTHORIZED,
            actor=actor,
            reason="A person started the apply (supervised autonomy)",
        )
        enqueue_on_commit("reconciliation.tasks.apply_case", case.pk)
    return case


def attempt_heartbeat(*, attempt_id: int, fencing_token: int) -> Lease:
    """Extend the lease of the case's current attempt, or tell the worker to stop.

    A refused heartbeat (lease expired, fenced, finished) raises ``StaleAttempt``; a recorded
    cancellation intent comes back as ``cancel_requested`` so the worker can acknowledge it.
    """
    now = timezone.now()
    attempt = Attempt.objects.only("kind", "state").get(pk=attempt_id)
    expires = now + dt.timedelta(seconds=lease_seconds(attempt.kind))
    extended = Attempt.objects.filter(
        pk=attempt_id,
        fencing_token=fencing_token,
        state__in=Attempt.ACTIVE,
        lease_expires_at__gt=now,
    ).update(lease_expires_at=expires, heartbeat_at=now)
    if not extended:
        attempt.refresh_from_db(fields=["state", "lease_expires_at"])
        raise StaleAttempt(
            f"Attempt is {attempt.get_state_display().lower()}: stop without submitting.",
            state=attempt.state,
        )
    return Lease(
        attempt_id,
        fencing_token,
        expires,
        cancel_requested=attempt.state == Attempt.State.CANCEL_REQUESTED,
    )


@contextlib.contextmanager
def keep_alive(attempt: Attempt) -> Iterator[threading.Event]:
    """Renew the attempt's lease every heartbeat interval while this thread waits on a long call.

    Yields an event that is set if a heartbeat was refused (the lease was lost meanwhile): the
    caller's result is then recorded as late evidence, never acted on as the current owner. A
    paused or killed process stops heartbeating with it, so the lease still bounds it.
    """
    interval = float(settings.LEASES[attempt.kind]["heartbeat_seconds"])
    stop, lost = threading.Event(), threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(interval):
                attempt_heartbeat(attempt_id=attempt.pk, fencing_token=attempt.fencing_token)
        except StaleAttempt:
            lost.set()
        except Exception:  # a boundary: a failed heartbeat is logged, never kills the worker
            logger.exception("Heartbeat of %s failed", attempt.reference)
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=beat, name=f"heartbeat {attempt.reference}", daemon=True)
    thread.start()
    try:
        yield lost
    finally:
        stop.set()
        thread.join(timeout=interval + 5)


def attempt_acknowledge_cancel(*, attempt_id: int, worker: Worker) -> None:
    """The worker saw the cancellation intent and stopped before submitting anything."""
    with transaction.atomic():
        attempt = Attempt.objects.select_related("case").get(pk=attempt_id)
        case = lock_case(attempt.case_id)
        updated = attempt_finish(
            attempt,
            Attempt.State.STOPPED,
            case=case,
            actor=worker,
            expected=(Attempt.State.CANCEL_REQUESTED,),
            event=Action.ATTEMPT_WORKER_STOPPED,
            reason=f"{attempt.reference}: the worker acknowledged the "
            "cancellation and stopped before sending anything",
        )
        if updated:
            from reconciliation.revocation import settle_after_stop

            record_slot_released(case, attempt, worker)
            settle_after_stop(case, worker, f"{attempt.reference} stopped")


def attempts_expire_leases(*, now: dt.datetime | None = None, limit: int = 500) -> int:
    """Watchdog: hold every case whose active attempt's lease ran out.

    It never starts a replacement: a paused worker may still submit, so reconciliation of the
    same operation decides what happens next. An attempt whose apply step is already confirmed
    is not uncertain: its case goes back to the queue to resume the remaining steps.
    """
    now = now or timezone.now()
    expired = list(
        Attempt.objects.filter(state__in=Attempt.ACTIVE, lease_expires_at__lte=now)
        .order_by("lease_expires_at")
        .values_list("pk", flat=True)[:limit]
    )
    return sum(_expire_one(pk, now) for pk in expired)


def _expire_one(attempt_id: int, now: dt.datetime) -> bool:
    from cases.backoff import next_retry_at

    watchdog = Worker("watchdog")
    with transaction.atomic():
        attempt = Attempt.objects.select_related("operation").get(pk=attempt_id)
        case = lock_case(attempt.case_id)
        text = (
            f"{attempt.reference} stopped reporting: its lease expired at "
            f"{timezone.localtime(attempt.lease_expires_at):%H:%M:%S}"
        )
        moved = attempt_finish(
            attempt,
            Attempt.State.LEASE_EXPIRED,
            case=case,
            actor=watchdog,
            where={"lease_expires_at__lte": now},
            event=Action.ATTEMPT_LEASE_EXPIRED,
            reason=text,
            detail={"fencing_token": attempt.fencing_token},
            finished_at=now,
        )
        if not moved:
            return False
        record_slot_released(case, attempt, watchdog)
        if case.status != Status.APPLYING:
            return True
        attempt.operation.refresh_from_db(fields=["confirmed_at"])
        stopping = (
            case.revoked_at is not None or case.cancellations.filter(outcome="pending").exists()
        )
        if attempt.operation.confirmed_at is not None and stopping:
            case_complete(
                case,
                actor=watchdog,
                reason=f"{text}; the change is confirmed and the work was asked to stop, so no "
                "further steps run.",
            )
        elif attempt.operation.confirmed_at is not None:
            apply_transition(
                case,
                "retry_later",
                actor=watchdog,
                reason=f"{text}; the change is confirmed, the remaining steps resume",
                waiting=(WaitingOn.WORKER, "Resuming the steps after the confirmed change"),
                next_check_at=next_retry_at(1),
            )
        else:
            apply_transition(
                case,
                "hold",
                actor=watchdog,
                reason=f"{text}. The worker may only be paused: reconcile "
                f"{attempt.operation.key} before any new attempt",
                waiting=(WaitingOn.OWNER, "Worker missing: reconcile the same operation"),
                next_check_at=now + dt.timedelta(seconds=settings.HOLD_FIRST_CHECK_SECONDS),
                last_error=text,
            )
    return True
