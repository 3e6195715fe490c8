"""Proposals, operations and four-eyes approvals. The only code that writes them.

Each service locks the case row first: that row lock is the admission boundary every piece of
child work (proposal, operation, approval, attempt) passes, so a revocation that takes the same
lock is strictly ordered against it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from approvals.exceptions import ExpiryOutOfBounds, OwnProposal, ProposalNotCurrent
from approvals.models import Approval, Operation, Proposal, ProposalAuthor
from approvals.selectors import (
    author_roles_of,
    awaits_decision,
    not_up_for_decision,
    own_proposal_reason,
)
from cases import kinds
from cases.codes import Action
from cases.exceptions import ActionNotPermitted, InvalidCaseInput, TransitionRejected
from cases.fencing import counter_next
from cases.followups import FollowUp, follow_up_for
from cases.kernel import (
    KEEP,
    Actor,
    Worker,
    actor_label,
    actor_may,
    apply_transition,
    bump_and_save,
    case_step,
    lock_case,
    record_event,
    record_fact,
    user_or_none,
)
from cases.models import Case, CaseEvent, Status, WaitingOn, WaitReason
from cases.references import operation_key_part
from cases.retries import retries_reset
from cases.scheduling import enqueue_on_commit


def _content_hash(
    *, case: Case, order_id: str, change: dict, version: int, evidence_ids: list[int]
) -> str:
    body = {
        "case": case.reference,
        "order_id": order_id,
        "change": change,
        "evidence_order_version": version,
        "evidence_ids": sorted(evidence_ids),
    }
    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(raw).hexdigest()


def _refuse_if_revoked(case: Case) -> None:
    """Admission of child work under the case lock: refused once authority is revoked."""
    if case.revoked_at is not None:
        raise TransitionRejected(
            f"Authority over {case.reference} was revoked ({case.revocation_kind}); no new "
            "work is admitted.",
            allowed=[],
        )


def open_proposal(case: Case) -> Proposal | None:
    return case.proposals.filter(status__in=Proposal.OPEN).select_related("operation").first()


def live_approval(case: Case, now: dt.datetime | None = None) -> Approval | None:
    """The approval that currently authorizes the case's open proposal, if any and unexpired."""
    now = now or timezone.now()
    return (
        Approval.objects.filter(
            proposal__case=case,
            proposal__status=Proposal.Status.APPROVED,
            decision=Approval.Decision.APPROVED,
            revoked_at__isnull=True,
            expires_at__gt=now,
        )
        .select_related("proposal", "operation")
        .first()
    )


def _close_proposal(proposal: Proposal, status: str, reason: str) -> None:
    proposal.status = status
    proposal.status_reason = reason[:300]
    proposal.closed_at = timezone.now()
    proposal.save(update_fields=["status", "status_reason", "closed_at"])


def _revoke_approvals(proposal: Proposal, reason: str) -> list[str]:
    live = Approval.objects.filter(
        proposal=proposal, decision=Approval.Decision.APPROVED, revoked_at__isnull=True
    )
    references = list(live.values_list("reference", flat=True))
    live.update(revoked_at=timezone.now(), revoked_reason=reason[:200])
    return references


def proposal_return_to_review(proposal: Proposal | None, reason: str) -> list[str]:
    """The approval lapsed: close it for good; the same proposal (and operation key) waits for
    a fresh decision. Returns the closed approval references."""
    if proposal is None:
        return []
    closed = _revoke_approvals(proposal, reason)
    proposal.status = Proposal.Status.AWAITING_REVIEW
    proposal.save(update_fields=["status"])
    return closed


def proposal_withdraw(
    proposal: Proposal,
    reason: str,
    *,
    status: str = Proposal.Status.WITHDRAWN,
    revoke_approvals: bool = True,
    approval_reason: str | None = None,
) -> list[str]:
    """Close ``proposal`` for good (``status``: withdrawn, or superseded/rejected) and revoke
    its live approvals, with ``reason`` on both; returns the revoked approval references. The
    public writer of a proposal's closing: code outside ``approvals`` closes proposals only
    here (the case locked by the caller).

    ``revoke_approvals=False`` only for a proposal whose operation is already applied (a
    reversal supersedes it): its approval authorized a write that happened and stays the
    record of that authority. ``approval_reason`` words the approvals' revocation when it
    differs from the proposal's."""
    revoked = _revoke_approvals(proposal, approval_reason or reason) if revoke_approvals else []
    _close_proposal(proposal, status, reason)
    return revoked


def proposals_withdraw_open(case: Case, reason: str) -> list[str]:
    """Withdraw the case's open proposal, if any (:func:`proposal_withdraw`; the case locked by
    the caller). Returns the revoked approval references."""
    proposal = open_proposal(case)
    if proposal is None:
        return []
    return proposal_withdraw(proposal, reason)


def _operation_for(case: Case, order_id: str, change: dict) -> Operation:
    """The operation for this exact intended change (the whole change): the existing live one,
    or the next key, named by the change's kind (``{key prefix}-{case}-{sequence}``: the case's
    number, with its team's prefix unless it is the deployment's original one:
    ``cases.references.operation_key_part``)."""
    change_hash = kinds.change_hash(change)
    existing = Operation.objects.filter(
        case=case, order_id=order_id, change_hash=change_hash, retired_at__isnull=True
    ).first()
    if existing is not None:
        return existing
    sequence = (case.operations.aggregate(n=Max("sequence"))["n"] or 0) + 1
    return Operation.objects.create(
        case=case,
        key=f"{kinds.kind_of(change).key_prefix}-{operation_key_part(case)}-{sequence}",
        sequence=sequence,
        order_id=order_id,
        change=kinds.canonical(change),
        change_hash=change_hash,
    )


# --- authors of the intent (four eyes bound to people) ------------------------------------------

# The audit events that make a person an author of the intent a case's proposal carries. A
# source check requested from "new" is the case starting its work (intake or the account's
# verification), not a request to prepare the proposal again.
_AUTHORING_EVENTS = (
    Q(action=Action.CASE_CREATED)
    | Q(action=Action.CASE_REQUEST_JOINED)
    | Q(action=Action.CASE_INTENT_CHANGED)
    | Q(action=Action.CASE_TRANSITIONED, detail__transition="revise")
    | (
        Q(action=Action.CASE_TRANSITIONED, detail__transition="request_source_check")
        & ~Q(from_status=Status.NEW)
    )
)


def _author_role(event: CaseEvent) -> str:
    if event.action == Action.CASE_CREATED:
        return ProposalAuthor.Role.OPENED_CASE
    if event.action == Action.CASE_REQUEST_JOINED:
        return ProposalAuthor.Role.JOINED_REQUEST
    if event.action == Action.CASE_INTENT_CHANGED or event.detail.get("transition") == "revise":
        return ProposalAuthor.Role.CHANGED_INTENT
    return ProposalAuthor.Role.ASKED_REPREPARE


def _authors_of_intent(case: Case, proposal: Proposal) -> list[ProposalAuthor]:
    """Every person who authored the intent ``proposal`` carries, one row per person and role:
    from the case's own audit events, plus the person who prepared it."""
    rows: dict[tuple[int, str], ProposalAuthor] = {}
    events = CaseEvent.objects.filter(_AUTHORING_EVENTS, case=case, actor__isnull=False)
    for event in events.order_by("pk"):
        if event.actor_id is None:  # excluded by the query; narrows the type
            continue
        role = _author_role(event)
        rows.setdefault(
            (event.actor_id, role),
            ProposalAuthor(proposal=proposal, user_id=event.actor_id, role=role, event=event),
        )
    if proposal.prepared_by_id is not None:
        rows.setdefault(
            (proposal.prepared_by_id, ProposalAuthor.Role.PREPARED),
            ProposalAuthor(
                proposal=proposal,
                user_id=proposal.prepared_by_id,
                role=ProposalAuthor.Role.PREPARED,
            ),
        )
    return list(rows.values())


def proposal_record_authors(*, case: Case, proposal: Proposal) -> list[ProposalAuthor]:
    """Record (idempotently) who authored ``proposal``'s intent; the case locked by the caller.

    Called when the proposal is prepared, when the case's intent changes while the proposal
    stays open, and again before every decision, so no path leaves an author unrecorded.
    """
    rows = _authors_of_intent(case, proposal)
    ProposalAuthor.objects.bulk_create(rows, ignore_conflicts=True)
    return rows


# --- preparing and submitting -------------------------------------------------------------------


def _refuse_if_evidence_is_behind(case: Case) -> None:
    """A person prepares only on the newest order the desk knows of: when the order system
    reported a newer version since the order was read (an order event, recorded as evidence),
    the proposal would rest on an order that is gone, an approver would decide it, and the
    apply would invalidate it."""
    from django.db.models import Max

    newest = case.evidence.aggregate(newest=Max("order_version"))["newest"]
    read = case.last_checked_order_version
    if newest is not None and read is not None and newest > read:
        raise InvalidCaseInput(
            f"The order system reported order {case.order_id} at version {newest} since it was "
            f"read at version {read}: check the source again, then prepare the proposal.",
            fields={"case": [f"The order changed to version {newest}; read it again first."]},
        )


def proposal_prepare(
    *,
    case: Case,
    actor: Actor,
    change: dict | None = None,
    advisory_note: str = "",
    submit: bool = True,
    again_because: str = "",
) -> Proposal:
    """Prepare one exact proposal from the case's current evidence and (normally) submit it.

    ``change`` is the whole change, of the case's kind (default: the case's own; a reversal
    passes the one back). The evidence is the last checked order version and the evidence
    references recorded for it; a case whose evidence is missing goes back for a source check
    instead.

    A person may submit again a proposal an approver rejected, exactly as it was (the same
    change on the same order evidence), only saying why (``again_because``, e.g. "the customer
    confirmed by phone"): the approver reads it as the proposal's advisory note beside the
    rejection. Without it the same question would reach an approver again with nothing new.
    """
    with case_step(
        case, actor=actor, permission="cases.work_case", what="prepare proposals"
    ) as case:
        _refuse_if_revoked(case)
        if case.status == Status.PROPOSAL_REJECTED and not isinstance(actor, Worker):
            # The last proposal was rejected: a person prepares the next one (never a worker).
            apply_transition(
                case,
                "prepare_again",
                actor=actor,
                reason="Preparing another proposal after the rejection",
            )
        if case.status != Status.PREPARING_PROPOSAL:
            raise TransitionRejected(
                f"{case.reference} is {case.get_status_display().lower()}: proposals are "
                "prepared only while the case is preparing one.",
                allowed=[],
            )
        if case.last_checked_order_version is None:
            raise InvalidCaseInput(
                "No current order evidence: check the source first.",
                fields={"case": ["The order has not been read yet."]},
            )
        if not isinstance(actor, Worker):
            _refuse_if_evidence_is_behind(case)
        for draft in case.proposals.filter(status=Proposal.Status.DRAFT):
            _close_proposal(draft, Proposal.Status.WITHDRAWN, "Replaced by a newer draft")
        change = kinds.canonical(change or case.change)
        if change["kind"] != case.kind:
            raise InvalidCaseInput(
                f"{case.reference} asks for a {kinds.label_of(case.kind).lower()} change.",
                fields={"change.kind": [f"Must be {case.kind}."]},
            )
        evidence_ids = list(
            case.evidence.filter(order_version=case.last_checked_order_version).values_list(
                "pk", flat=True
            )
        )
        content_hash = _content_hash(
            case=case,
            order_id=case.order_id,
            change=change,
            version=case.last_checked_order_version,
            evidence_ids=evidence_ids,
        )
        if not isinstance(actor, Worker):
            advisory_note = _again_after_rejection(case, content_hash, again_because) or (
                advisory_note
            )
        proposal = Proposal.objects.create(
            case=case,
            order_id=case.order_id,
            change=change,
            evidence_order_version=case.last_checked_order_version,
            evidence_ids=evidence_ids,
            advisory_note=advisory_note[:300],
            content_hash=content_hash,
            prepared_by=user_or_none(actor),
            prepared_by_label=actor_label(actor),
        )
        fields: list[str] = []
        if not submit:
            # A draft waits for its author, not a worker (which would replace it).
            case.next_check_at = None
            case.waiting_on = WaitingOn.OWNER
            case.waiting_reason = "A draft proposal waits for its author to submit it"
            fields = ["next_check_at", "waiting_on", "waiting_reason"]
        bump_and_save(case, fields)
        authors = _authors_of_intent(case, proposal)
        prepared_event = record_event(
            case=case,
            action=Action.PROPOSAL_PREPARED,
            actor=actor,
            reason=f"Proposal for {case.order_id}: {kinds.audit_words(change)} "
            f"(order version {case.last_checked_order_version})",
            detail={
                "proposal_id": proposal.pk,
                "content_hash": proposal.content_hash,
                "change": kinds.audit_detail(change),
                "advisory": advisory_note,
                # Four eyes: none of these people may approve it.
                "authors": [{"user_id": a.user_id, "role": a.role} for a in authors],
            },
        )
        for author in authors:
            if author.role == ProposalAuthor.Role.PREPARED:
                author.event = prepared_event
        ProposalAuthor.objects.bulk_create(authors)
        if submit:
            _submit(case, proposal, actor)
    return proposal


def review_follow_up(case: Case, start: dt.datetime | None = None) -> FollowUp:
    """The review's clock for ``case`` from ``start`` (now): when its approvers are late, by
    the follow-up policy for a review wait (``cases.followups``; by default
    ``APPROVAL_REVIEW_SLA_MINUTES``). The case's next check is the same time."""
    return follow_up_for(case, WaitReason.AWAITING_REVIEW, start)


def review_deadline(case: Case) -> dict[str, Any]:
    """``apply_transition``'s arguments for a case that goes back to review now: its next
    check and its follow-up are the review deadline."""
    clock = review_follow_up(case)
    return {"next_check_at": clock.due_at, "follow_up": clock}


def _submit(case: Case, proposal: Proposal, actor: Actor) -> None:
    """Submit for review. The case's follow-up and next check become the review deadline, so
    an overdue case awaiting review means its approvers are late (no worker acts on
    awaiting-review cases)."""
    operation = _operation_for(case, proposal.order_id, proposal.change)
    proposal.operation = operation
    proposal.status = Proposal.Status.AWAITING_REVIEW
    proposal.submitted_at = timezone.now()
    proposal.save(update_fields=["operation", "status", "submitted_at"])
    clock = review_follow_up(case, proposal.submitted_at)
    due = clock.due_at
    apply_transition(
        case,
        "submit_for_review",
        actor=actor,
        reason=f"Submitted proposal #{proposal.pk} as operation {operation.key}",
        detail={
            "proposal_id": proposal.pk,
            "operation_key": operation.key,
            "review_due_at": due.isoformat(),
        },
        next_check_at=due,
        follow_up=clock,
    )


def _again_after_rejection(case: Case, content_hash: str, because: str) -> str:
    """The advisory note of a proposal a person submits again exactly as an approver rejected
    it (the same content hash: change, order version, evidence), or "" when none was rejected;
    refused without ``because``."""
    rejected = (
        case.proposals.filter(status=Proposal.Status.REJECTED, content_hash=content_hash)
        .order_by("-pk")
        .first()
    )
    if rejected is None:
        return ""
    decision = (
        rejected.approvals.filter(decision=Approval.Decision.REJECTED).order_by("-pk").first()
    )
    who = decision.reference if decision else f"proposal #{rejected.pk}"
    said = f"{who}: {decision.reason}" if decision else who
    if not because.strip():
        raise InvalidCaseInput(
            f"This exact proposal was rejected ({said}). To submit it again unchanged, say in "
            "the reason what changed since, for the approver; or change the change, or read "
            "the order again.",
            fields={"reason": ["Say what changed since the rejection."]},
        )
    return f"Submitted again after rejection {who}: {because.strip()}"


def proposal_prepare_by_hand(
    *, case: Case, actor: Actor, change: dict, reason: str, expected_version: int
) -> Proposal:
    """A person prepares the proposal themselves, e.g. with a change the customer confirmed.

    ``change`` is the whole change, of the case's kind. A change other than the one requested
    supersedes the current proposal and approval first; the person who prepares it can never be
    the one who approves it.
    """
    from cases import validation

    fresh = Case.objects.get(pk=case.pk)
    validation.ensure_valid(
        **kinds.validate(fresh.kind, change),
        reason=validation.text_errors(reason, max_length=validation.SHORT_REASON_MAX_LENGTH),
    )
    with transaction.atomic():
        case = case_change_intent(
            case=case,
            actor=actor,
            change=change,
            reason=reason or "The customer confirmed another change",
            expected_version=expected_version,
        )
        return proposal_prepare(case=case, actor=actor, change=change, again_because=reason)


def proposal_submit(*, proposal: Proposal, actor: Actor) -> Proposal:
    with case_step(proposal.case_id, actor=actor) as case:
        proposal = Proposal.objects.select_for_update().get(pk=proposal.pk)
        if proposal.status != Proposal.Status.DRAFT or case.status != Status.PREPARING_PROPOSAL:
            raise ProposalNotCurrent(f"Proposal #{proposal.pk} cannot be submitted now.")
        _submit(case, proposal, actor)
    return proposal


def case_change_intent(
    *,
    case: Case,
    actor: Actor,
    change: dict,
    reason: str,
    expected_version: int | None = None,
) -> Case:
    """The customer wants another change of the same kind (another date, another address):
    supersede the proposal and any approval. ``change`` is the whole change; the caller
    validated it (``cases.kinds.validate``).

    The old "yes" is never reused: the next proposal gets a new operation key and needs its
    own approval.
    """
    with case_step(
        case,
        actor=actor,
        permission="cases.work_case",
        what="change the request",
        expected_version=expected_version,
    ) as case:
        if errors := kinds.validate(case.kind, change):
            raise InvalidCaseInput("The change is not valid for this case.", fields=errors)
        change = kinds.canonical(change)
        if kinds.same_change(case.change, change):
            return case  # the same intent: nothing to supersede
        if case.is_terminal or case.status in {Status.APPLYING, Status.HELD}:
            raise TransitionRejected(
                f"{case.reference} is {case.get_status_display().lower()}: the request "
                "cannot change now. A change after it was applied is a new proposal.",
                allowed=[],
            )
        previous = case.change
        case.change = change
        proposal = open_proposal(case)
        revoked: list[str] = []
        if proposal is not None and not kinds.same_change(change, proposal.change):
            revoked = _revoke_approvals(proposal, "Superseded: the intended change changed")
            _close_proposal(proposal, Proposal.Status.SUPERSEDED, reason)
            if proposal.operation_id is not None:
                # A changed intent never reuses the old key, even if the change comes back.
                Operation.objects.filter(
                    pk=proposal.operation_id, confirmed_at__isnull=True, retired_at__isnull=True
                ).update(retired_at=timezone.now())
        if case.status in {Status.AWAITING_REVIEW, Status.READY}:
            # The review deadline ends with the review; left set, the dispatcher would prepare
            # a proposal on its own when it passed.
            apply_transition(
                case,
                "revise",
                next_check_at=None if case.status == Status.AWAITING_REVIEW else KEEP,
                actor=actor,
                reason=reason,
                detail={
                    "from_change": kinds.audit_detail(previous),
                    "to_change": kinds.audit_detail(change),
                    "superseded_proposal": proposal.pk if proposal else None,
                    "revoked_approvals": revoked,
                },
                change=change,
            )
        else:
            bump_and_save(case, ["change"])
            record_event(
                case=case,
                action=Action.CASE_INTENT_CHANGED,
                actor=actor,
                reason=reason,
                detail={
                    "from_change": kinds.audit_detail(previous),
                    "to_change": kinds.audit_detail(change),
                },
            )
        if proposal is not None and proposal.status in Proposal.OPEN:
            # The proposal already carries the new change and stays open: whoever changed the
            # intent to it is one of its authors now.
            proposal_record_authors(case=case, proposal=proposal)
        if case.status == Status.PREPARING_PROPOSAL and isinstance(actor, Worker):
            # Due now, like every enqueued stage (a scheduling field, as the dispatcher moves
            # it): the dispatcher re-drives the preparation if this task is lost.
            case.next_check_at = timezone.now()
            Case.objects.filter(pk=case.pk).update(next_check_at=case.next_check_at)
            enqueue_on_commit("reconciliation.tasks.prepare_proposal", case.pk)
    return case


# --- deciding ------------------------------------------------------------------------------------


def _decidable(proposal_id: int, actor: Actor) -> tuple[Case, Proposal, User]:
    """The locked case and proposal and the person deciding (a worker never decides); refused
    unless ``actor`` may decide the proposal now."""
    proposal = Proposal.objects.select_related("case").get(pk=proposal_id)
    case = lock_case(proposal.case_id)
    proposal = (
        Proposal.objects.select_for_update(of=("self",))
        .select_related("operation")
        .get(pk=proposal_id)
    )
    _refuse_if_revoked(case)
    if isinstance(actor, Worker) or not actor_may(actor, "approvals.approve_proposal", case):
        raise ActionNotPermitted(f"{actor_label(actor)} may not decide proposals of {case.team}.")
    proposal_record_authors(case=case, proposal=proposal)
    roles = author_roles_of(proposal, actor)
    if roles:
        raise OwnProposal(
            own_proposal_reason(
                roles, case_label=case.reference, proposal_label=f"proposal #{proposal.pk}"
            )
            + "; another approver must decide it.",
            roles=roles,
        )
    if not awaits_decision(proposal, case.status):
        raise ProposalNotCurrent(
            f"Proposal #{proposal.pk}: {not_up_for_decision(proposal, case.status)}",
            proposal_status=proposal.status,
        )
    return case, proposal, actor


def approval_expiry_bounds(now: dt.datetime | None = None) -> tuple[dt.datetime, dt.datetime]:
    now = now or timezone.now()
    return (
        now + dt.timedelta(minutes=settings.APPROVAL_DEFAULT_MINUTES),
        now + dt.timedelta(minutes=settings.APPROVAL_MAX_MINUTES),
    )


def proposal_approve(
    *, proposal: Proposal, actor: Actor, expires_at: dt.datetime | None = None, reason: str = ""
) -> Approval:
    """Record an approval of this exact proposal, sign its grant and queue the case."""
    from approvals.grants import grant_issue

    now = timezone.now()
    default_expiry, max_expiry = approval_expiry_bounds(now)
    if expires_at is not None:
        expires_at = expires_at.replace(microsecond=0)
    expires_at_or_default = (expires_at or default_expiry).replace(microsecond=0)
    with transaction.atomic():
        # Who may decide first: someone who may not is told that, not that the time is wrong.
        case, proposal, decider = _decidable(proposal.pk, actor)
        if expires_at is not None and not (now < expires_at <= max_expiry):
            latest = f"{timezone.localtime(max_expiry, dt.UTC):%Y-%m-%d %H:%M} UTC"
            raise ExpiryOutOfBounds(
                f"The approval must expire after now and no later than {latest}.",
                fields={"expires_at": [f"Choose a time after now and up to {latest}."]},
            )
        expires_at = expires_at_or_default
        operation = proposal.operation
        if operation is None:  # preparing a proposal always names its operation
            raise RuntimeError(f"Proposal #{proposal.pk} awaits review without an operation.")
        reference = f"AP-{counter_next('approval_number')}"
        approval = Approval.objects.create(
            reference=reference,
            proposal=proposal,
            proposal_hash=proposal.content_hash,
            operation=operation,
            prepared_by_id=proposal.prepared_by_id,
            decided_by=decider,
            decision=Approval.Decision.APPROVED,
            reason=reason,
            expires_at=expires_at,
            grant=grant_issue(
                operation_key=operation.key,
                order_id=proposal.order_id,
                change=operation.change,
                approval_id=reference,
                expires_at=expires_at,
            ),
        )
        proposal.status = Proposal.Status.APPROVED
        proposal.save(update_fields=["status"])
        apply_transition(
            case,
            "approve",
            actor=actor,
            reason=reason or f"{reference} approves proposal #{proposal.pk} ({operation.key})",
            detail={
                "approval": reference,
                "proposal_id": proposal.pk,
                "operation_key": operation.key,
                "expires_at": expires_at.isoformat(),
            },
            next_check_at=now,
        )
        enqueue_on_commit("reconciliation.tasks.apply_case", case.pk)
    return approval


def proposal_reject(*, proposal: Proposal, actor: Actor, reason: str) -> Approval:
    if not reason.strip():
        raise InvalidCaseInput("Give a reason.", fields={"reason": ["A reason is required."]})
    with transaction.atomic():
        case, proposal, decider = _decidable(proposal.pk, actor)
        reference = f"AP-{counter_next('approval_number')}"
        decision = Approval.objects.create(
            reference=reference,
            proposal=proposal,
            proposal_hash=proposal.content_hash,
            operation=proposal.operation,
            prepared_by_id=proposal.prepared_by_id,
            decided_by=decider,
            decision=Approval.Decision.REJECTED,
            reason=reason.strip(),
        )
        _close_proposal(proposal, Proposal.Status.REJECTED, reason)
        apply_transition(
            case,
            "reject",
            actor=actor,
            reason=reason.strip(),
            detail={"decision": reference, "proposal_id": proposal.pk},
            next_check_at=None,  # the review deadline ends; the owner prepares another
        )
    return decision


# --- expiry and source changes -----------------------------------------------------------------


def approval_expire(
    *, case: Case, actor: Actor | None = None, now: dt.datetime | None = None
) -> bool:
    """If the case's approval lapsed while it was queued, return it to review.

    The same proposal (and its operation key) waits for a fresh decision; the expired approval
    is closed and can never authorize anything again. Returns whether anything changed.
    """
    now = now or timezone.now()
    actor = actor or Worker("system:approval-expiry")
    with case_step(case, actor=actor) as case:
        if case.status != Status.READY:
            return False
        proposal = case.proposals.filter(status=Proposal.Status.APPROVED).first()
        if proposal is None:
            return False
        if proposal.operation is not None and proposal.operation.confirmed_at is not None:
            return False  # already applied: only notify and close remain, no approval needed
        if live_approval(case, now) is not None:
            return False
        expired = proposal_return_to_review(proposal, "Expired before it was applied")
        apply_transition(
            case,
            "approval_expired",
            actor=actor,
            reason=f"{', '.join(expired) or 'The approval'} expired while the case was queued; "
            "the same proposal needs a fresh decision",
            detail={
                "expired": expired,
                "proposal_id": proposal.pk,
                "operation_key": proposal.operation.key if proposal.operation else None,
            },
            # Back in review: the approvers are late again after the review deadline.
            **review_deadline(case),
        )
    return True


def _lapsed(status: str, now: dt.datetime) -> list[int]:
    return list(
        Case.objects.filter(
            status=status,
            proposals__status=Proposal.Status.APPROVED,
            proposals__approvals__decision=Approval.Decision.APPROVED,
            proposals__approvals__revoked_at__isnull=True,
            proposals__approvals__expires_at__lte=now,
            proposals__operation__confirmed_at__isnull=True,
        )
        .values_list("pk", flat=True)
        .distinct()
    )


def approvals_expire_due(now: dt.datetime | None = None) -> int:
    """Periodic: return every queued case whose approval lapsed to review, and record on every
    held case that its approval lapsed during the hold. Returns how many went back to review."""
    now = now or timezone.now()
    for pk in _lapsed(Status.HELD, now):
        approval_note_expired_during_hold(case=Case(pk=pk), now=now)
    lapsed = list(_lapsed(Status.READY, now))
    if lapsed:
        from cases.services import unsent_decision_check

        # Restored records may show a ready case whose change the order system holds.
        unsent_decision_check(Case.objects.get(pk=lapsed[0]))
    return sum(approval_expire(case=Case(pk=pk), now=now) for pk in lapsed)


def approval_note_expired_during_hold(*, case: Case, now: dt.datetime | None = None) -> bool:
    """A held case's approval lapsed: record it once, as soon as the sweep sees it.

    The hold still settles from the order system's evidence (found applied: done); but nothing
    new is ever sent under this approval, so proven absent means back to review. Returns
    whether the fact was recorded now."""
    now = now or timezone.now()
    with transaction.atomic():
        case = lock_case(case)
        proposal = case.proposals.filter(status=Proposal.Status.APPROVED).first()
        if case.status != Status.HELD or proposal is None or live_approval(case, now):
            return False
        if proposal.operation is not None and proposal.operation.confirmed_at is not None:
            return False
        lapsed = (
            proposal.approvals.filter(
                decision=Approval.Decision.APPROVED, revoked_at__isnull=True, expires_at__lte=now
            )
            .order_by("-expires_at")
            .first()
        )
        if lapsed is None or lapsed.expires_at is None:  # expires_at__lte excludes no expiry
            return False
        noted = CaseEvent.objects.filter(
            case=case, action=Action.APPROVAL_EXPIRED_DURING_HOLD, detail__approval=lapsed.reference
        )
        if noted.exists():
            return False
        record_fact(
            case=case,
            action=Action.APPROVAL_EXPIRED_DURING_HOLD,
            actor=Worker("system:approval-expiry"),
            reason=f"{lapsed.reference} expired during the hold: no new application under it. "
            "The hold still settles from the order system's evidence; if nothing was applied, "
            "the same proposal needs a fresh decision",
            detail={
                "approval": lapsed.reference,
                "expired_at": lapsed.expires_at.isoformat(),
                "operation_key": proposal.operation.key if proposal.operation else None,
            },
        )
    return True


def proposals_purge_changes(case: Case) -> int:
    """After the case's retention, its proposals and operations lose a personal change as the
    case does (``cases.kinds.purged``), keeping its kind; the case locked by the caller (its
    purge). Returns how many rows changed."""
    changed = 0
    for model in (Proposal, Operation):
        for pk, change in model.objects.filter(case=case).values_list("pk", "change"):
            if (kept := kinds.purged(change)) != change:
                changed += model.objects.filter(pk=pk).update(change=kept)
    return changed


def _what_was_void(proposal: Proposal | None, revoked: list[str]) -> str:
    """What a change of the order voided, as it was: an approval only where there was one."""
    if proposal is None:
        return "no proposal was open"
    if revoked:
        return f"proposal #{proposal.pk} and its approval {', '.join(revoked)} invalidated"
    return f"proposal #{proposal.pk} invalidated (it had not been approved)"


def proposal_invalidate_for_source_change(
    *, case: Case, order_version: int | None, actor: Actor, via: str
) -> bool:
    """Called with the case locked: the order moved past the evidence of the open proposal.

    ``order_version`` is the version seen, or ``None`` when the receiver refused the expected
    version without saying which it has. The proposal and any approval are void; the case goes
    back for current evidence -- unless its operation is proven applied (confirmed): such a case
    only finishes. Returns whether anything was invalidated.
    """
    proposal = open_proposal(case)
    evidence_version = (
        proposal.evidence_order_version if proposal else case.last_checked_order_version
    )
    if order_version is not None and (
        evidence_version is None or order_version <= evidence_version
    ):
        return False
    if case.status not in {
        Status.PREPARING_PROPOSAL,
        Status.AWAITING_REVIEW,
        Status.READY,
        Status.APPLYING,
    }:
        return False
    if case.operations.filter(confirmed_at__isnull=False).exists():
        # Proven applied: the change is at the order system, and a newer version is another
        # change after it. Nothing is left to decide; the steps after the apply finish the case.
        return False
    seen = "a newer version" if order_version is None else f"version {order_version}"
    revoked: list[str] = []
    if proposal is not None:
        revoked = _revoke_approvals(proposal, f"The order changed (version {order_version})")
        _close_proposal(
            proposal,
            Proposal.Status.INVALIDATED,
            f"The order moved from version {evidence_version} to {order_version} ({via})",
        )
    apply_transition(
        case,
        "source_changed",
        actor=actor,
        reason=f"The order changed to {seen} (evidence was version {evidence_version}); "
        + _what_was_void(proposal, revoked),
        detail={
            "via": via,
            "order_version": order_version,
            "proposal_id": proposal.pk if proposal else None,
            "revoked": revoked,
        },
        waiting=(WaitingOn.ORDER_SYSTEM, "The order changed; reading current evidence"),
        next_check_at=timezone.now(),
        # A fresh read: the bounded count of failed source checks restarts.
        **retries_reset(case, "source_check"),
    )
    enqueue_on_commit("reconciliation.tasks.source_check", case.pk)
    return True
