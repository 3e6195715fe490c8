"""Recovery after a backup of Holdfast's database is restored.

Restored records may be older than the order system: an operation they show unconfirmed may have
been applied after the backup. Before any worker resumes, every open case with an unconfirmed
operation that may have been sent or approved, and every non-terminal attempt, is held and
reconciled against the source (fence, then the consistent lookup) — nothing is re-applied because
the restored records lack a confirmation.

Detection (is this database restored?) is the leaf ``reconciliation.restore_detection``; recovery
builds on settlement (``reconciliation.settle``): each suspect case is reconciled as any held case
is.

Recovery advances the fencing sequence past every token the order system has seen, and the
reference counters (case and approval numbers) past the highest rows and every reference the
order system has seen, plus a gap for references handed out after the backup that nobody can
list (``REFERENCE_GAP``).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from approvals.models import Approval, Operation, Proposal
from cases.attempts import attempt_set_state
from cases.codes import Action
from cases.fencing import counter_raise_to, fencing_current, fencing_raise_to
from cases.kernel import Worker, apply_transition, case_step, record_fact
from cases.models import OPEN_STATUSES, Attempt, Case, Status, Team, WaitingOn
from cases.references import counter_raise_past, highest_number
from reconciliation.client import OrderSystemClient
from reconciliation.exceptions import OrderSystemError
from reconciliation.restore_detection import (
    marker_advance,
    operation_key_match,
    restore_detected_at_source,
    source_verified,
)
from reconciliation.settle import case_reconcile, held_operation

logger = logging.getLogger(__name__)

# After a restore the token sequence is behind tokens already used at the order system.
FENCING_JUMP = 1_000_000
# Case and approval numbers handed out after the backup that the order system never saw.
REFERENCE_GAP = 1000
_APPROVAL_REFERENCE = re.compile(r"AP-(\d+)")


def suspects() -> list[int]:
    """Open cases with an unconfirmed operation that may have been approved or sent, or with a
    non-terminal attempt."""
    unconfirmed = Operation.objects.filter(confirmed_at__isnull=True).filter(
        Q(attempts__isnull=False)
        | Q(proposals__status__in=[Proposal.Status.AWAITING_REVIEW, Proposal.Status.APPROVED])
    )
    active = Attempt.objects.filter(state__in=Attempt.ACTIVE)
    # A rejected case has nothing that may have gone: its last proposal was decided "no", and
    # it could reach review only once every earlier attempt of its operation had settled with
    # nothing applied (proven absent after a fence, or a definite refusal). It stays with its
    # person; holding it would send it back to a review with no proposal.
    return list(
        Case.objects.filter(status__in=OPEN_STATUSES)
        .exclude(status=Status.PROPOSAL_REJECTED)
        .filter(Q(pk__in=unconfirmed.values("case")) | Q(pk__in=active.values("case")))
        .order_by("number")
        .values_list("pk", flat=True)
        .distinct()
    )


def _references_seen(
    client: OrderSystemClient | None,
) -> tuple[int, dict[str, int], int]:
    """(highest token, highest case number per case prefix, highest approval number) the
    order system shows; zeros when it cannot answer. The prefix '' is the deployment's original
    one (``cases.references.operation_key_part``)."""
    own_client = client is None
    client = client or OrderSystemClient.from_settings()
    cases: dict[str, int] = {}
    approvals = 0
    try:
        seen = client.fences_seen(above=0)
    except OrderSystemError as exc:
        logger.warning("The order system could not list what it has seen: %s", exc)
        return 0, {}, 0
    finally:
        if own_client:
            client.close()
    for item in seen.operations:
        if match := operation_key_match(item.operation_key):
            prefix = match.group("prefix") or settings.CASE_REFERENCE_PREFIX
            cases[prefix] = max(cases.get(prefix, 0), int(match.group("number")))
        if match := _APPROVAL_REFERENCE.fullmatch(item.approval_id):
            approvals = max(approvals, int(match.group(1)))
    return seen.max_token, cases, approvals


def advance_counters(*, client: OrderSystemClient | None = None) -> dict[str, Any]:
    """Move the fencing sequence and the case and approval counters past everything already
    used: these rows, and what the order system has seen. Returns the new floors (each team's
    under ``case_numbers``, by prefix)."""
    token, case_seen, approval_seen = _references_seen(client)
    fencing_floor = max(fencing_current(), token) + FENCING_JUMP
    fencing_raise_to(fencing_floor)
    case_floors: dict[str, int] = {}
    for team in Team.objects.all():
        # Past its own rows (``highest_number``) and what the order system saw of its prefix.
        floor = max(highest_number(team), case_seen.get(team.case_prefix, 0)) + REFERENCE_GAP
        counter_raise_past(team, floor)
        case_floors[team.case_prefix] = floor
    approval_rows = max(
        (
            int(m.group(1))
            for ref in Approval.objects.values_list("reference", flat=True)
            if (m := _APPROVAL_REFERENCE.fullmatch(ref))
        ),
        default=0,
    )
    floors: dict[str, Any] = {
        "fencing_token": fencing_floor,
        "case_number": max(case_floors.values(), default=0),
        "approval_number": max(approval_rows, approval_seen) + REFERENCE_GAP,
    }
    counter_raise_to("approval_number", floors["approval_number"])
    return {**floors, "case_numbers": case_floors}


def recover_after_restore(
    *, progress: Callable[[str], None] = print, client: OrderSystemClient | None = None
) -> dict:
    """Hold every suspect case, then reconcile each against the source. Returns a summary.

    The reconciliation runs as recovery (``recovering=True``): the restore it repairs is still
    detected until the epoch advances at the end, and must not stop its own settlement."""
    worker = Worker("restore-recovery")
    floors = advance_counters(client=client)  # first: the fences below use fresh tokens
    pending = suspects()
    progress(f"{len(pending)} case(s) with unconfirmed operations or unfinished attempts")
    first_check = timezone.now() + dt.timedelta(seconds=settings.HOLD_FIRST_CHECK_SECONDS)
    held = 0
    for pk in pending:
        with case_step(pk, actor=worker) as case:
            # Whatever ran before the restore is over; when it ended is not known.
            for attempt in case.attempts.filter(state__in=Attempt.ACTIVE):
                attempt_set_state(
                    attempt,
                    Attempt.State.LEASE_EXPIRED,
                    case=case,
                    actor=worker,
                    event=Action.RESTORE_ATTEMPT_ENDED,  # a lost worker
                    reason=f"{attempt.reference} was running in the restored records: it is "
                    "treated as a lost worker, and the case is reconciled before anything resumes",
                )
            if case.status != Status.HELD:
                apply_transition(
                    case,
                    "hold_for_recovery",
                    actor=worker,
                    reason="Restored records may be older than the order system: reconcile "
                    "before any worker resumes",
                    waiting=(WaitingOn.OWNER, "Restored from backup: reconcile first"),
                    # Settled below; should this recovery stop before it gets there, the
                    # dispatcher reconciles the case like any held one (a ready case waiting
                    # on a person had no next check, and would have stayed held unseen).
                    next_check_at=first_check,
                )
                held += 1
    outcomes: dict[str, int] = {}
    for index, pk in enumerate(pending, start=1):
        operation = held_operation(Case.objects.get(pk=pk))
        outcome = case_reconcile(case_id=pk, actor=worker, recovering=True)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if outcome == "applied" and operation is not None:
            _note_applied_before_restore(pk, operation.key, worker)
        reference = Case.objects.values_list("reference", flat=True).get(pk=pk)
        progress(f"[{index}/{len(pending)}] {reference}: {outcome}")
    progress(
        f"Counters advanced past everything already used: fencing tokens above "
        f"{floors['fencing_token']}, cases above "
        + ", ".join(f"{prefix}-{n}" for prefix, n in sorted(floors["case_numbers"].items()))
        + ", approvals above "
        f"AP-{floors['approval_number']}"
    )
    source_verified()
    epoch = marker_advance()
    progress(f"Recovery complete (database epoch now {epoch}).")
    return {"suspects": len(pending), "held": held, "outcomes": outcomes}


def _note_applied_before_restore(case_id: int, key: str, worker: Worker) -> None:
    """The operation was applied after the backup was taken: the steps that followed it there
    (the customer's notification) are missing from these records, not undone."""
    with case_step(case_id, actor=worker) as case:
        record_fact(
            case=case,
            action=Action.RESTORE_APPLIED_BEFORE_RESTORE,
            actor=worker,
            reason=f"{key} was applied after the restored backup was taken: the customer may "
            "already have been told, so the notification is not sent again automatically",
            detail={"operation_key": key, "notify_key": f"{key}:notify"},
        )


def restore_check_before_unsent_decision(case: Case) -> None:
    """Registered in ``cases.services.UNSENT_DECISION_CHECKS``: before a ready case is cancelled
    or sent back to review as if nothing was sent, compare these records with the order system;
    if they are older, recover first (the case is then held and settled from evidence).

    Always asks (``force``): such decisions are rare, and a restore minutes after a clean
    comparison would otherwise pass unseen."""
    why = restore_detected_at_source(force=True)
    if why:
        logger.warning("Database restore detected (%s): recovering before deciding", why)
        recover_after_restore(progress=logger.info)
