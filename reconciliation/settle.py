"""Settling what is unknown: close the door, then look.

A held case is settled for the same operation key, never a new one. First the fence at the order
system is raised above every token any attempt of the case ever held (a token from the global
sequence is higher than all of them), so no old worker can still apply it. Then the operation is
read by key from the consistent lookup. Found with the intended change → the change happened:
record it and resume the steps after apply. Proven absent after the fence → the same operation may
be applied again by a new attempt, if the approval is still valid and nothing was cancelled.
Anything less — a lagging search's "not found", an unreachable source, a failed fence — is not
proof: the case stays held with its owner, the reason and a next check on a bounded backoff
(the ``reconcile`` retry policy); after its limit it stays held, flagged for a person, with no
automatic next check (``reconciliation.failures``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from django.utils import timezone

from approvals.models import Approval, Operation, Proposal
from approvals.services import review_deadline
from cases import kinds
from cases.codes import Action
from cases.exceptions import CaseError, InvalidCaseInput, TransitionRejected
from cases.fencing import next_fencing_token
from cases.kernel import (
    Actor,
    Worker,
    apply_transition,
    bump_and_save,
    case_step,
    check_version,
    record_event,
    require,
)
from cases.models import CancellationRequest, Case, EvidenceReference, Status, WaitingOn
from cases.retries import retries_reset
from cases.rows import save_fields
from cases.services import evidence_add
from reconciliation.client import OperationRecord, OrderSystemClient
from reconciliation.complete import case_complete
from reconciliation.exceptions import OrderSystemError, UnknownOperation, plain_failure
from reconciliation.failures import Words, transient_failure_record
from reconciliation.restore_detection import restore_detected


@dataclass(frozen=True)
class Applied:
    """The consistent lookup, after the fence at ``fence_token``, holds the operation with the
    intended change (``record``): the change happened."""

    verdict: ClassVar[str] = "applied"  # as stored in the settlement event's detail
    reason: str
    record: OperationRecord
    fence_token: int


@dataclass(frozen=True)
class Absent:
    """After the fence at ``fence_token``, the consistent lookup does not know the operation:
    proof that it was not applied and no older token can apply it any more."""

    verdict: ClassVar[str] = "absent"
    reason: str
    fence_token: int


@dataclass(frozen=True)
class Unknown:
    """No proof either way (the fence or the lookup failed, or the key holds another change),
    with the reason; ``fence_token`` is set when the fence was raised before the look."""

    verdict: ClassVar[str] = "unknown"
    reason: str
    record: OperationRecord | None = None
    fence_token: int | None = None


# What the order system showed about a held operation.
Finding = Applied | Absent | Unknown


def held_operation(case: Case) -> Operation | None:
    """The operation the held case is about: the one its latest attempt served."""
    attempt = case.attempts.order_by("-sequence").select_related("operation").first()
    if attempt is not None:
        return attempt.operation
    # Held without an attempt (after a restore): the newest unconfirmed operation.
    return case.operations.filter(confirmed_at__isnull=True).order_by("-sequence").first()


def found_as_intended(operation: Operation, record: OperationRecord) -> bool:
    """Whether the order system's record of ``operation``'s key is this operation: the same
    order and the whole same change (``cases.kinds.same_change``), never one field of it."""
    return record.order_id == operation.order_id and kinds.same_change(
        operation.change, record.change
    )


def investigate(case: Case, operation: Operation, client: OrderSystemClient) -> Finding:
    """Fence, then look. Never called inside a transaction (it does HTTP)."""
    token = next_fencing_token()
    try:
        client.fence(operation.order_id, token)
    except OrderSystemError as exc:
        return Unknown(
            f"the fence could not be raised: the order system {plain_failure(exc)}, so an "
            "older worker might still apply the change and nothing is proven yet"
        )
    try:
        record = client.get_operation(operation.key)
    except UnknownOperation:
        return Absent(
            f"after the fence at token {token}, the consistent lookup "
            f"does not know {operation.key}",
            fence_token=token,
        )
    except OrderSystemError as exc:
        return Unknown(
            f"the consistent lookup failed: asked for the operation after the fence, the "
            f"order system {plain_failure(exc)}, so nothing is proven yet",
            fence_token=token,
        )
    if not found_as_intended(operation, record):
        return Unknown(
            f"{operation.key} exists with another change "
            f"({record.order_id}: {kinds.audit_words(record.change)}); a person must look",
            record,
            token,
        )
    return Applied(
        f"{operation.key} found applied at order version {record.order_version}",
        record,
        token,
    )


def case_reconcile(
    *,
    case_id: int,
    client: OrderSystemClient | None = None,
    actor: Actor | None = None,
    recovering: bool = False,
) -> str:
    """Settle a held case from evidence if the order system's autonomy allows it.

    A worker does not settle on a database detected as restored: recovery does, and says so
    with ``recovering`` (the restore stays detected until recovery ends). A person may."""
    from reconciliation.selectors import current_autonomy

    actor = actor or Worker.current("reconcile")
    if isinstance(actor, Worker) and not recovering and restore_detected():
        return "skipped: recovery after restore required"
    case = Case.objects.select_related("team").get(pk=case_id)
    if not isinstance(actor, Worker):
        require(actor, "cases.lead_case", case, "reconcile the case")
    if case.status != Status.HELD:
        return "skipped"
    if isinstance(actor, Worker) and not current_autonomy(kind=case.kind).is_autonomous:
        return _note_manual_needed(case.pk, case.version, actor)
    operation = held_operation(case)
    if operation is None:
        return "skipped"
    own_client = client is None
    client = client or OrderSystemClient.from_settings()
    try:
        finding = investigate(case, operation, client)
    finally:
        if own_client:
            client.close()
    return _record_finding(case.pk, case.version, operation.pk, finding, actor)


def _note_manual_needed(case_id: int, version: int, actor: Actor) -> str:
    with case_step(case_id, actor=actor) as case:
        if case.version != version or case.status != Status.HELD:
            return "skipped"
        case.next_check_at = None
        case.waiting_on = WaitingOn.OWNER
        case.waiting_reason = (
            "The order system is not autonomous for this kind of change: the owner records "
            "the settlement from evidence"
        )
        bump_and_save(case, ["next_check_at", "waiting_on", "waiting_reason"])
        record_event(
            case=case,
            action=Action.MANUAL_SETTLEMENT_NEEDED,
            actor=actor,
            reason=case.waiting_reason,
        )
    return "manual settlement needed"


def _record_finding(
    case_id: int, version: int, operation_id: int, finding: Finding, actor: Actor
) -> str:
    with case_step(case_id, actor=actor) as case:
        if case.status != Status.HELD:
            return "skipped: the case moved on"
        newer_attempt = (
            finding.fence_token is not None
            and case.attempts.filter(fencing_token__gt=finding.fence_token).exists()
        )
        # Only a status change since the read makes the finding stale (another reconciler
        # settled it, the case left the hold and came back): facts recorded meanwhile -- an
        # order event for this operation, a cancellation request, a lapsed approval -- leave
        # the same hold, and the settlement reads them under this lock.
        moved = (
            case.version != version
            and case.events.filter(version__gt=version).exclude(to_status="").exists()
        )
        if moved or newer_attempt:
            # The case changed while this investigation ran (another reconciler settled it, a
            # new attempt was made): the finding describes the past. Look again.
            case.next_check_at = timezone.now()
            bump_and_save(case, ["next_check_at"])
            record_event(
                case=case,
                action=Action.FINDING_DISCARDED,
                actor=actor,
                reason=f"The case changed during the investigation ({finding.verdict}: "
                f"{finding.reason}); it is looked at again",
            )
            return "skipped: changed during the investigation"
        operation = Operation.objects.select_for_update().get(pk=operation_id)
        detail = {
            "operation_key": operation.key,
            "fence_token": finding.fence_token,
            "verdict": finding.verdict,
        }
        match finding:
            case Unknown():
                return _stay_held(case, actor, finding.reason, detail)
            case Applied():
                return _settle_applied(
                    case, operation, finding.record, actor, finding.reason, detail
                )
            case Absent():
                return _settle_absent(case, operation, actor, finding.reason, detail)


def _stay_held(case: Case, actor: Actor, reason: str, detail: dict) -> str:
    """No proof either way: the case stays held. One more failure of the ``reconcile`` policy
    (its own counter): looked at again on the backoff or, at the limit, flagged for a person
    while it stays held (``transient_failure_record``): never settled on a guess."""
    outcome = transient_failure_record(
        case=case,
        kind="reconcile",
        error=reason,
        actor=actor,
        detail=detail,
        retry=Words(reason="{error}; next check {next_check}", waiting="Still unknown: {error}"),
        give_up=Words(
            reason="Still unknown after {checks}: {error}. Nothing is settled on a "
            "guess; a person settles it from evidence",
            waiting="Still unknown after {checks}: settle it from evidence",
        ),
        retry_event=Action.STILL_UNKNOWN,
        retry_waiting_on=WaitingOn.OWNER,
    )
    return "still held: a person settles it" if outcome.gave_up else "still held"


def _pending_cancellations(case: Case):
    return case.cancellations.filter(outcome=CancellationRequest.Outcome.PENDING)


def operation_confirm(
    *,
    case: Case,
    operation: Operation,
    order_version: int | None,
    actor: Actor,
    kind: str,
    summary: str,
) -> None:
    """Record that the order system proved ``operation`` applied: the confirmation (the first
    one stands) and its evidence. The one place this is written: the apply's answer, the
    apply's look before writing and settlement all come here. The caller holds the case lock
    and the operation's row lock."""
    if operation.confirmed_at is None:
        operation.confirmed_at = timezone.now()
        operation.result_order_version = order_version
        save_fields(operation, ["confirmed_at", "result_order_version"])
    evidence_add(
        case=case,
        actor=actor,
        source_system=EvidenceReference.Source.ORDER_SYSTEM,
        external_reference=f"operation:{operation.key}",
        kind=kind,
        permitted_basis=EvidenceReference.Basis.CONTRACT,
        summary=summary,
        order_version=order_version,
    )


def _settle_applied(
    case: Case,
    operation: Operation,
    record: OperationRecord,
    actor: Actor,
    reason: str,
    detail: dict,
) -> str:
    now = timezone.now()
    operation_confirm(
        case=case,
        operation=operation,
        order_version=record.order_version,
        actor=actor,
        kind="operation_lookup",
        summary=f"Consistent lookup: {operation.key} applied, order version {record.order_version}",
    )
    late = [c.pk for c in _pending_cancellations(case)]
    version_seen = record.order_version or case.last_checked_order_version
    if case.revoked_at is not None:
        # Authority is revoked: record the change as done; no further steps run.
        case_complete(
            case,
            actor=actor,
            reason=f"Proven applied: {reason}. It landed before the revocation took effect; "
            "no further steps run.",
            detail={**detail, "order_version": record.order_version, "late_cancellations": late},
            last_checked_order_version=version_seen,
            last_error="",
        )
        return "applied"
    case_complete(
        case,
        actor=actor,
        transition="resume_steps",
        reason=f"Proven applied: {reason}.",
        detail={**detail, "order_version": record.order_version, "late_cancellations": late},
        waiting=(WaitingOn.WORKER, "Proven applied; the steps after apply resume"),
        next_check_at=now,
        last_checked_order_version=version_seen,
        **retries_reset(case, "reconcile", "apply"),
        last_error="",
    )
    return "applied"


def _settle_absent(
    case: Case, operation: Operation, actor: Actor, reason: str, detail: dict
) -> str:
    from approvals.services import (
        live_approval,
        open_proposal,
        proposal_return_to_review,
        proposal_withdraw,
    )

    now = timezone.now()
    if _pending_cancellations(case).exists():
        _pending_cancellations(case).update(
            outcome=CancellationRequest.Outcome.CANCELLED, settled_at=now
        )
        proposal = open_proposal(case)
        if proposal is not None:
            proposal_withdraw(proposal, "Cancelled by the customer")
        target = "settle_stopped" if case.revoked_at else "settle_cancelled"
        apply_transition(
            case,
            target,
            actor=actor,
            detail=detail,
            reason=f"Proven absent: {reason}. The cancellation is honoured; nothing was applied",
        )
        return "cancelled"
    if case.revoked_at is not None:
        apply_transition(
            case,
            "settle_stopped",
            actor=actor,
            detail=detail,
            reason=f"Proven absent: {reason}. Authority was revoked; the work "
            "is stopped with nothing applied",
        )
        return "stopped"
    if live_approval(case) is None:
        proposal = open_proposal(case)
        # Held before anyone approved it (a restore's recovery holds a case awaiting review
        # too): nothing expired, and the case says so.
        never = (
            proposal is not None
            and not proposal.approvals.filter(decision=Approval.Decision.APPROVED).exists()
        )
        proposal_return_to_review(
            proposal, "Back to review after the hold" if never else "Expired during the hold"
        )
        apply_transition(
            case,
            "approval_expired",
            actor=actor,
            detail={**detail, "never_approved": True} if never else detail,
            reason=f"Proven absent: {reason}. "
            + (
                f"It had not been approved yet: {operation.key} goes back to its approvers"
                if never
                else f"The approval expired during the hold: {operation.key} needs a fresh "
                "decision before any apply"
            ),
            waiting=(
                (WaitingOn.APPROVERS, "Back from a hold: the proposal awaits a decision")
                if never
                else None
            ),
            **review_deadline(case),
        )
        return "back to review"
    apply_transition(
        case,
        "settle_absent",
        actor=actor,
        detail=detail,
        reason=f"Proven absent: {reason}. A new attempt may apply the same "
        f"operation {operation.key}",
        next_check_at=now,
        last_error="",
        **retries_reset(case, "reconcile", "apply"),
    )
    return "absent"


# --- manual settlement (supervised / review-only) ------------------------------------------


def case_settle_manually(
    *,
    case: Case,
    actor: Actor,
    outcome: str,
    expected_version: int,
    external_reference: str,
    summary: str,
    order_version: int | None = None,
    client: OrderSystemClient | None = None,
) -> str:
    """The owner records what the evidence shows. Refused when it contradicts the consistent
    lookup: a person cannot declare absent what the order system shows applied."""
    if outcome not in {"applied", "absent"}:
        raise InvalidCaseInput(
            "Choose applied or absent.", fields={"outcome": ["Choose applied or absent."]}
        )
    if not external_reference.strip() or not summary.strip():
        raise InvalidCaseInput(
            "Cite the evidence.",
            fields={
                "external_reference": ["Where the evidence is (a ticket, a screen, a call log)."],
            },
        )
    fresh = Case.objects.get(pk=case.pk)
    require(actor, "cases.lead_case", fresh, "record a settlement")
    check_version(fresh, expected_version)
    if fresh.status != Status.HELD:
        raise TransitionRejected(f"{fresh.reference} is not held.", allowed=[])
    operation = held_operation(fresh)
    if operation is None:
        raise TransitionRejected("No operation to settle.", allowed=[])
    from reconciliation.selectors import current_profile

    profile = current_profile()
    own_client = client is None
    client = client or OrderSystemClient.from_settings()
    try:
        lookup, fence_token = _manual_look(fresh, operation, client, outcome, profile)
    finally:
        if own_client:
            client.close()
    with case_step(case.pk, actor=actor) as case:
        check_version(case, expected_version)
        if fence_token is not None and case.attempts.filter(fencing_token__gt=fence_token).exists():
            raise SettlementUnproven("A newer attempt started meanwhile: look again.")
        evidence_add(
            case=case,
            actor=actor,
            source_system=EvidenceReference.Source.OTHER,
            external_reference=external_reference,
            kind="manual_settlement",
            permitted_basis=EvidenceReference.Basis.CONTRACT,
            summary=summary,
            order_version=order_version,
        )
        detail = {"operation_key": operation.key, "manual": True, "verdict": outcome}
        reason = f"Settled by {getattr(actor, 'username', actor)} from evidence: {summary}"
        if outcome == "applied":
            record = lookup or OperationRecord(
                operation_key=operation.key,
                order_id=operation.order_id,
                status="applied",
                order_version=order_version,
                change=operation.change,
            )
            return _settle_applied(
                case, Operation.objects.get(pk=operation.pk), record, actor, reason, detail
            )
        return _settle_absent(case, operation, actor, reason, detail)


def _manual_look(
    case: Case, operation: Operation, client: OrderSystemClient, outcome: str, profile: Any
) -> tuple[OperationRecord | None, int | None]:
    """What the order system says against a person's settlement: for "absent", the door is
    closed first and the look may not show it applied (nor, where fencing is proven, fail);
    for "applied", the consistent lookup may not deny it (where it is proven) nor hold another
    change. Returns the lookup's record and the fence's token; refuses with
    ``SettlementContradicted`` / ``SettlementUnproven``."""
    # What the order system was verified to offer decides what a person's word must match.
    fences = bool(profile and profile.fencing_enforced)
    looks_up = bool(profile and profile.consistent_lookup)
    if outcome == "absent":
        # Close the door first: a paused worker must not apply what is declared absent.
        finding = investigate(case, operation, client)
        if isinstance(finding, Applied):
            raise SettlementContradicted(
                f"The consistent lookup shows {operation.key} applied at order version "
                f"{finding.record.order_version}: it cannot be settled as absent."
            )
        if isinstance(finding, Unknown) and fences:
            raise SettlementUnproven(
                f"Not settled: {finding.reason}. Absent can be recorded only once the "
                "door is closed; try again when the order system answers."
            )
        return None, finding.fence_token
    try:
        lookup = client.get_operation(operation.key)
    except UnknownOperation:
        if looks_up:
            raise SettlementContradicted(
                f"The consistent lookup does not know {operation.key}: it cannot be "
                "settled as applied (a matching order alone is not proof)."
            ) from None
        return None, None
    except OrderSystemError:
        return None, None  # unreachable: the person's evidence stands on its own
    if not found_as_intended(operation, lookup):
        raise SettlementContradicted(
            f"The order system holds {operation.key} with another change "
            f"({lookup.order_id}: {kinds.audit_words(lookup.change)})."
        )
    return lookup, None


class SettlementContradicted(CaseError):
    code = "settlement_contradicts_evidence"
    http_status = 409


class SettlementUnproven(CaseError):
    code = "settlement_unproven"
    http_status = 409


def case_propose_reversal(*, case: Case, actor: Actor, expected_version: int) -> Proposal:
    """A cancellation arrived after the change was applied: propose putting the order back.

    Reversal is a new intent — a new proposal (the kind's ``reversal`` of the value seen
    before the change), a new operation key and its own approval; the old "yes" never
    authorizes it. An irreversible kind has none: refused.
    """
    from approvals.services import proposal_prepare

    with case_step(
        case,
        actor=actor,
        permission="cases.work_case",
        what="propose a reversal",
        expected_version=expected_version,
    ) as case:
        kind = case.change_kind
        back = kind.reversal(case.order_seen)
        if back is None:
            raise TransitionRejected(
                f"{kind.label}: this change cannot be undone."
                if kind.irreversible
                else f"{kind.label}: the order's value before the change is not on record.",
                allowed=[],
            )
        from approvals.services import open_proposal, proposal_withdraw

        applied = open_proposal(case)
        if applied is not None:
            proposal_withdraw(
                applied,
                "Applied; a reversal is proposed",
                status=Proposal.Status.SUPERSEDED,
                revoke_approvals=False,
            )
        apply_transition(
            case,
            "reopen_for_reversal",
            actor=actor,
            reason="Cancellation arrived after the change: propose putting it back, "
            f"{kinds.audit_words(back)}",
            closed_at=None,
            retention_until=None,
        )
        return proposal_prepare(case=case, actor=actor, change=back)


def case_record_customer_told(
    *, case: Case, actor: Actor, expected_version: int, reason: str
) -> Case:
    """A person told the customer about a change that landed without the notify step (e.g. it
    was applied before a withdrawal took effect): the notify step is confirmed by hand."""
    if not reason.strip():
        raise InvalidCaseInput("Say how the customer was told.", fields={"reason": ["Required."]})
    with case_step(
        case,
        actor=actor,
        permission="cases.work_case",
        what="record that the customer was told",
        expected_version=expected_version,
    ) as case:
        untold = Operation.objects.filter(
            case=case, confirmed_at__isnull=False, notified_at__isnull=True
        )
        keys = list(untold.values_list("key", flat=True))
        if case.status != Status.DONE or not keys:
            raise TransitionRejected(
                f"{case.reference}: there is no applied change the customer has not been told "
                "about.",
                allowed=[],
            )
        untold.update(notified_at=timezone.now())
        bump_and_save(case, [])
        record_event(
            case=case,
            action=Action.STEP_NOTIFIED,
            actor=actor,
            reason=f"Customer told by hand: {reason.strip()}",
            detail={"operations": keys, "by_hand": True},
        )
    return case
