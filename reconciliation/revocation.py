"""Revoking a work context: deleting or withdrawing a case, or a customer losing access.

Revocation is an authority event, not a hidden row. It takes the case row lock — the same lock
every admission of child work takes (a proposal, an approval, a claim) — so the two are strictly
ordered: a child admitted first is found and reconciled here; one arriving after sees
``revoked_at`` and is refused. In one transaction: record the revocation, discover the unsettled
set by lifecycle meaning, close queued and awaiting-approval work, and record a cancellation
intent on running attempts. After the commit, the fence at the order system is raised so that a
running attempt cannot apply anything late; running work then settles by the worker's
acknowledgement (it sees the intent on its next heartbeat) or by its lease expiring.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from django_fsm import can_proceed

from cases import validation
from cases.account_events import account_event_record, account_lock
from cases.attempts import attempts_request_stop
from cases.codes import AccountAction, Action
from cases.kernel import (
    Actor,
    Worker,
    apply_transition,
    bump_and_save,
    case_step,
    lock_case,
    record_event,
    record_fact,
    require,
)
from cases.models import Attempt, Case, CustomerAccount, Status, WaitingOn
from cases.services import require_account_lead
from reconciliation.complete import case_complete


@dataclass
class Revocation:
    case: Case
    already: bool = False
    closed_proposals: list[int] = field(default_factory=list)
    revoked_approvals: list[str] = field(default_factory=list)
    cancel_requested: list[str] = field(default_factory=list)
    uncertain: list[str] = field(default_factory=list)
    fenced: list[str] = field(default_factory=list)
    fence_failed: list[str] = field(default_factory=list)

    @property
    def settled(self) -> bool:
        return self.case.status in {Status.STOPPED, Status.CANCELLED, Status.DONE}


def case_revoke(
    *, case: Case, actor: Actor, reason: str, kind: str = "withdrawn", fence=True
) -> Revocation:
    """Revoke authority over a case and reconcile everything unsettled under it."""
    result = _revoke_in_transaction(case, actor, reason, kind)
    if fence and (result.cancel_requested or result.uncertain):
        # After the revocation commits (at once when no transaction is open; the admin's
        # delete view runs inside one): never HTTP while holding the case lock.
        transaction.on_commit(lambda: _raise_fence(result, actor))
    return result


def revocation_possible(case: Case) -> bool:
    """A case has authority left to revoke until it is finished or already revoked; revoking
    one that has none does nothing (``Revocation.already``)."""
    return case.revoked_at is None and not case.is_terminal


def revocation_offered(case: Case | None, actor: User) -> bool:
    """Whether to offer revoking (the admin's "Delete"): to a person with the lead permission,
    on a case with authority left to revoke (``case`` None: the bulk action on a list). No
    button that does nothing; ``case_revoke`` checks the lead permission in the case's team
    again, under the row lock."""
    if case is not None and not revocation_possible(case):
        return False
    return bool(actor.has_perm("cases.lead_case"))


def describe_revocation(result: Revocation) -> str:
    """What a revocation did, in the words an operator reads after pressing the button."""
    case = result.case
    if result.already:
        return f"{case.reference}: already revoked or closed; nothing to do."
    if result.settled:
        return f"{case.reference}: authority revoked; nothing was in flight, stopped."
    if result.fenced:
        fence = "fence raised: older attempts are refused by the order system"
    elif result.fence_failed:
        fence = "the fence could not be raised yet (reconciliation fences again)"
    elif result.cancel_requested or result.uncertain:
        fence = "the order system is fenced as soon as this is saved"
    else:
        fence = "no fence was needed"
    parts = [f"{case.reference}: authority revoked"]
    if result.cancel_requested:
        parts.append(f"cancellation requested for {', '.join(result.cancel_requested)}")
    if result.uncertain:
        parts.append("the outcome is unknown, so it stays held for reconciliation")
    parts.append(fence)
    return "; ".join(parts) + ". The case stays until its work is settled."


def _revoke_in_transaction(case: Case, actor: Actor, reason: str, kind: str) -> Revocation:
    from approvals.models import Proposal
    from approvals.services import proposal_withdraw

    now = timezone.now()
    with case_step(case, actor=actor) as case:
        if not isinstance(actor, Worker):
            require(actor, "cases.lead_case", case, "revoke the case")
        result = Revocation(case=case)
        if not revocation_possible(case):
            result.already = True
            return result
        case.revoked_at, case.revocation_kind = now, kind
        bump_and_save(case, ["revoked_at", "revocation_kind"])
        record_event(
            case=case,
            action=Action.REVOCATION_REQUESTED,
            actor=actor,
            reason=f"Context revoked ({kind}): {reason}",
            detail={"kind": kind},
        )

        # The unsettled set, by lifecycle meaning rather than a convenient column.
        open_proposals = list(case.proposals.filter(status__in=Proposal.OPEN))
        active = list(case.attempts.filter(state__in=Attempt.ACTIVE))
        uncertain = case.status == Status.HELD
        record_fact(
            case=case,
            action=Action.REVOCATION_UNSETTLED_DISCOVERED,
            actor=actor,
            reason=f"{len(open_proposals)} queued or awaiting-approval proposal(s), "
            f"{len(active)} running attempt(s)" + (", an unknown outcome" if uncertain else ""),
            detail={
                "proposals": [p.pk for p in open_proposals],
                "attempts": [a.reference for a in active],
                "held": uncertain,
            },
        )
        # Queued and awaiting-approval work closes synchronously: no worker holds it.
        for proposal in open_proposals:
            if proposal.status == Proposal.Status.APPROVED and active:
                continue  # its attempt is running: settled by the attempt, below
            result.revoked_approvals += proposal_withdraw(
                proposal, f"Context revoked: {reason}", approval_reason=f"Revoked: {reason}"
            )
            result.closed_proposals.append(proposal.pk)
        if result.closed_proposals:
            record_fact(
                case=case,
                action=Action.REVOCATION_CLOSED_QUEUED,
                actor=actor,
                reason="Queued and awaiting-approval work closed",
                detail={
                    "proposals": result.closed_proposals,
                    "approvals": result.revoked_approvals,
                },
            )
        # Running work can only be asked to stop: the intent is durable, the stop is not yet.
        asked = attempts_request_stop(
            case,
            actor=actor,
            reason="Cancellation requested for {attempt}; it stops at its next heartbeat or "
            "when its lease expires",
            restate=True,
        )
        result.cancel_requested += [attempt.reference for attempt in asked]
        if uncertain:
            result.uncertain.append(case.reference)
        if not active and not uncertain:
            apply_transition(
                case,
                "stop" if can_proceed(case.stop) else "settle_stopped",
                actor=actor,
                reason=f"Authority revoked ({kind}) and nothing was in flight: stopped. {reason}",
                waiting=(WaitingOn.NOBODY, ""),
            )
        elif active:
            case.waiting_on = WaitingOn.WORKER
            case.waiting_reason = "Revoked: waiting for the worker to stop or its lease to end"
            bump_and_save(case, ["waiting_on", "waiting_reason"])
        else:
            case.waiting_on = WaitingOn.OWNER
            case.waiting_reason = "Revoked while the outcome is unknown: reconcile to settle"
            case.next_check_at = now
            bump_and_save(case, ["waiting_on", "waiting_reason", "next_check_at"])
    return result


def _raise_fence(result: Revocation, actor: Actor) -> None:
    """Close the door at the order system (outside any transaction)."""
    from cases.fencing import next_fencing_token
    from reconciliation.client import OrderSystemClient
    from reconciliation.exceptions import OrderSystemError

    case = result.case
    token = next_fencing_token()
    try:
        with OrderSystemClient.from_settings() as client:
            client.fence(case.order_id, token)
    except OrderSystemError as exc:
        result.fence_failed.append(case.order_id)
        outcome = (
            Action.REVOCATION_FENCE_FAILED,
            f"The fence for {case.order_id} could not be raised ({exc.error}); the "
            "lease still bounds the running work and reconciliation fences again",
        )
    else:
        result.fenced.append(case.order_id)
        outcome = (
            Action.REVOCATION_FENCED,
            f"Fence raised for {case.order_id} at token {token}: older attempts are "
            "refused by the order system",
        )
    with transaction.atomic():
        locked = lock_case(case.pk)
        bump_and_save(locked, [])
        record_event(
            case=locked,
            action=outcome[0],
            actor=actor,
            reason=outcome[1],
            detail={"order_id": case.order_id, "fence_token": token},
        )


def settle_after_stop(case: Case, actor: Actor, why: str) -> None:
    """Called with the case locked once an attempt that was asked to stop has ended with
    nothing applied: honour the revocation or the pending cancellation."""
    from cases.models import CancellationRequest

    if case.status != Status.APPLYING:
        return
    if case.attempts.filter(state__in=Attempt.ACTIVE).exists():
        return
    if not case.nothing_applied():
        case_complete(
            case,
            actor=actor,
            reason=f"{why}; the change was already applied, so no further steps run.",
        )
        return
    pending = case.cancellations.filter(outcome=CancellationRequest.Outcome.PENDING)
    if case.revoked_at is not None:
        pending.update(outcome=CancellationRequest.Outcome.CANCELLED, settled_at=timezone.now())
        apply_transition(
            case,
            "settle_stopped",
            actor=actor,
            reason=f"{why}; authority was revoked, so the work is stopped with nothing applied",
            waiting=(WaitingOn.NOBODY, ""),
        )
    elif pending.exists():
        pending.update(outcome=CancellationRequest.Outcome.CANCELLED, settled_at=timezone.now())
        apply_transition(
            case,
            "settle_cancelled",
            actor=actor,
            reason=f"{why}; nothing was applied, so the cancellation is honoured",
        )


def account_revoke_access(*, account: CustomerAccount, actor: Actor, reason: str) -> list:
    """The customer lost access: the account's access ends and every open case of it is
    revoked, each recording the account change first — in one transaction, all or nothing.

    A person needs the lead permission in the account's team and in the team of every open
    case; that is checked before anything is written. The fences for running work are raised
    after the commit (``case_revoke``).
    """
    validation.ensure_valid(
        reason=validation.text_errors(
            reason, max_length=validation.REASON_MAX_LENGTH, required=True
        )
    )
    require_account_lead(actor, account, "revoke access of")
    results = []
    with transaction.atomic():
        locked = account_lock(account)
        require_account_lead(actor, locked, "revoke access of")
        cases = list(Case.objects.filter(account=locked).open().order_by("pk"))
        if not isinstance(actor, Worker):
            for case in cases:
                require(actor, "cases.lead_case", case, "revoke the case")
        was_active = locked.access_active
        if was_active:
            locked.access_active = False
            locked.access_revoked_at = timezone.now()
            locked.save(update_fields=["access_active", "access_revoked_at"])
        if was_active or cases:
            account_event_record(
                account=locked,
                action=AccountAction.ACCESS_REVOKED,
                actor=actor,
                reason=reason.strip(),
                detail={"access_was_active": was_active, "cases": [c.reference for c in cases]},
            )
        for case in cases:
            record_fact(
                case=lock_case(case),
                action=Action.ACCOUNT_ACCESS_REVOKED,
                actor=actor,
                reason=f"Access of {locked.reference} revoked: {reason.strip()}",
                detail={
                    "account": locked.reference,
                    "access_was_active": was_active,
                    "cases": [c.reference for c in cases],
                },
            )
            results.append(
                case_revoke(case=case, actor=actor, reason=reason, kind="access_revoked")
            )
    return results
