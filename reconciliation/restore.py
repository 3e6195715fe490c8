"""Recovery after a backup of Holdfast's database is restored.

Restored records may be older than the order system: an operation they show unconfirmed may have
been applied after the backup. Before any worker resumes, every open case with an unconfirmed
operation that may have been sent or approved, and every non-terminal attempt, is held and
reconciled against the source (fence, then the consistent lookup) — nothing is re-applied because
the restored records lack a confirmation.

Detection, two ways:

- From the host: the database carries an identity and an epoch (``SystemMarker``); each worker
  host keeps the highest epoch it saw in a file outside the database. A database whose epoch is
  behind that file went back in time. The dispatcher advances the epoch on every tick.
- From the source, with no host file at all (a fresh host, a dump older than the marker): the
  order system has seen a fencing token above this database's sequence, or applied an operation
  whose key these records lack (or show as never sent). Every token comes from this database's
  sequence, so neither can happen unless the records went back in time. The dispatcher asks
  before it hands out claims, and a claim asks itself when nobody asked recently
  (``SOURCE_CHECK_MAX_AGE``); the answer of the last clean check is kept in the database, so a
  restored copy carries an old one and is asked again.

Recovery advances the fencing sequence past every token the order system has seen, and the
reference counters (case and approval numbers) past the highest rows and every reference the
order system has seen, plus a gap for references handed out after the backup that nobody can
list (``REFERENCE_GAP``).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import uuid
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max, Q
from django.utils import timezone

from approvals.models import Approval, Operation, Proposal
from cases.exceptions import CaseError
from cases.fencing import counter_raise_to, fencing_current, fencing_raise_to
from cases.models import OPEN_STATUSES, Attempt, Case, Status, SystemMarker, WaitingOn
from cases.services import Worker, apply_transition, lock_case, record_fact

logger = logging.getLogger(__name__)

MARKER = "database"
# The last clean comparison with the order system: ``epoch`` holds this database's fencing
# sequence at that moment (every token up to it was accounted for), ``updated_at`` its time.
SOURCE_MARKER = "source"
SOURCE_CHECK_MAX_AGE = dt.timedelta(seconds=60)
# After a restore the token sequence is behind tokens already used at the order system.
FENCING_JUMP = 1_000_000
# Case and approval numbers handed out after the backup that the order system never saw.
REFERENCE_GAP = 1000
# The event recovery writes on a case whose operation it found applied: whatever followed the
# apply (the customer's notification) is not in these records.
APPLIED_BEFORE_RESTORE = "reconciliation.restore.applied_before_restore"
_OPERATION_KEY = re.compile(r"DATE-(\d+)-\d+")
_APPROVAL_REFERENCE = re.compile(r"AP-(\d+)")


class RecoveryRequired(CaseError):
    code = "recovery_required"
    http_status = 503


def _marker_file(identity: str) -> Path:
    # One file per database identity: hosts that talk to several databases (development,
    # tests) never mistake one database for a restored copy of another.
    return Path(settings.HOLDFAST_STATE_DIR) / f"database-{identity}.json"


def _read_epoch(identity: str) -> int | None:
    try:
        return int(json.loads(_marker_file(identity).read_text())["epoch"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def _write_epoch(identity: str, epoch: int) -> None:
    path = _marker_file(identity)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"identity": identity, "epoch": epoch}))
    tmp.replace(path)


def restore_detected() -> str:
    """Why this database looks restored, or '' if it does not."""
    marker = SystemMarker.objects.filter(name=MARKER).first()
    if marker is None:
        return ""
    seen = _read_epoch(marker.identity)
    if seen is not None and marker.epoch < seen:
        return (
            f"the database epoch {marker.epoch} is behind {seen}, the last this host saw: "
            "it was restored from an older backup"
        )
    return ""


def restore_guard() -> None:
    """Refuse to start work on a database that went back in time until recovery ran."""
    why = restore_detected()
    if why:
        raise RecoveryRequired(
            f"Recovery after restore is required: {why}. Run `manage.py recover_after_restore`."
        )


def marker_advance() -> int:
    """Advance the database epoch and remember it outside the database. Returns the epoch."""
    marker, _ = SystemMarker.objects.get_or_create(
        name=MARKER, defaults={"identity": uuid.uuid4().hex, "epoch": 0}
    )
    SystemMarker.objects.filter(name=MARKER).update(epoch=F("epoch") + 1)
    marker.refresh_from_db()
    _write_epoch(marker.identity, marker.epoch)
    return marker.epoch


def suspects() -> list[int]:
    """Open cases with an unconfirmed operation that may have been approved or sent, or with a
    non-terminal attempt."""
    unconfirmed = Operation.objects.filter(confirmed_at__isnull=True).filter(
        Q(attempts__isnull=False)
        | Q(proposals__status__in=[Proposal.Status.AWAITING_REVIEW, Proposal.Status.APPROVED])
    )
    active = Attempt.objects.filter(state__in=Attempt.ACTIVE)
    return list(
        Case.objects.filter(status__in=OPEN_STATUSES)
        .filter(Q(pk__in=unconfirmed.values("case")) | Q(pk__in=active.values("case")))
        .order_by("number")
        .values_list("pk", flat=True)
        .distinct()
    )


# --- detection from the source ------------------------------------------------------------


def source_verified(*, through: int | None = None) -> None:
    """Record a clean comparison with the order system: every token up to ``through`` (default:
    the sequence now) is accounted for."""
    through = fencing_current() if through is None else through
    SystemMarker.objects.update_or_create(
        name=SOURCE_MARKER, defaults={"identity": "order-system", "epoch": through}
    )


def source_check_forget() -> None:
    """The next claim or dispatch asks the order system again (something looked wrong)."""
    SystemMarker.objects.filter(name=SOURCE_MARKER).delete()


def source_check_due(now: dt.datetime | None = None) -> bool:
    marker = SystemMarker.objects.filter(name=SOURCE_MARKER).first()
    now = now or timezone.now()
    return marker is None or marker.updated_at < now - SOURCE_CHECK_MAX_AGE


def _holdfast_operation(seen, sandbox: set[str]) -> bool:
    # Only a case's operation keys (DATE-41-1) count, on any order. The capability probe writes
    # its sandbox order under keys of its own (PROBE-…), never a case's, so those never count;
    # drill cases on sandbox orders are cases like any other (the restore drill relies on it).
    return bool(_OPERATION_KEY.fullmatch(seen.operation_key))


def restore_detected_at_source(*, client=None, force: bool = False) -> str:
    """Why the order system shows these records to be older than itself, or ''.

    Asks (one ``GET /fences/max``) only when no clean check is recent, unless ``force``. An
    order system that cannot answer proves nothing either way: '' is returned, the check stays
    due, and the write itself still carries the operation key and the fencing token.
    """
    from reconciliation.client import OrderSystemClient
    from reconciliation.exceptions import OrderSystemError

    if not force and not source_check_due():
        return ""
    local = fencing_current()
    marker = SystemMarker.objects.filter(name=SOURCE_MARKER).first()
    accounted = min(marker.epoch, local) if marker else 0
    own_client = client is None
    client = client or OrderSystemClient.from_settings()
    try:
        seen = client.fences_seen(above=accounted)
    except OrderSystemError as exc:
        logger.warning("Could not compare these records with the order system: %s", exc)
        return ""
    finally:
        if own_client:
            client.close()
    if seen.max_token > local:
        return (
            f"the order system has seen fencing token {seen.max_token}, above this database's "
            f"sequence ({local}): these records are older than the order system"
        )
    sandbox = set(settings.ORDER_SYSTEM_SANDBOX_ORDERS)
    for item in seen.operations:
        if not _holdfast_operation(item, sandbox):
            continue
        operation = Operation.objects.filter(key=item.operation_key).first()
        if operation is None:
            return (
                f"the order system applied {item.operation_key} (token {item.fencing_token}), "
                "an operation these records do not know"
            )
        sent = operation.attempts.filter(submitted_at__isnull=False).exists()
        if operation.confirmed_at is None and not sent:
            return (
                f"the order system applied {item.operation_key} (token {item.fencing_token}) "
                "while these records show no attempt that sent it"
            )
    through = seen.operations[-1].fencing_token if seen.truncated else local
    source_verified(through=through)
    return ""


def _references_seen(client) -> tuple[int, int, int]:
    """(highest token, highest case number, highest approval number) the order system shows;
    zeros when it cannot answer."""
    from reconciliation.client import OrderSystemClient
    from reconciliation.exceptions import OrderSystemError

    own_client = client is None
    client = client or OrderSystemClient.from_settings()
    cases = approvals = 0
    try:
        seen = client.fences_seen(above=0)
    except OrderSystemError as exc:
        logger.warning("The order system could not list what it has seen: %s", exc)
        return 0, 0, 0
    finally:
        if own_client:
            client.close()
    for item in seen.operations:
        if match := _OPERATION_KEY.fullmatch(item.operation_key):
            cases = max(cases, int(match.group(1)))
        if match := _APPROVAL_REFERENCE.fullmatch(item.approval_id):
            approvals = max(approvals, int(match.group(1)))
    return seen.max_token, cases, approvals


def advance_counters(*, client=None) -> dict:
    """Move the fencing sequence and the case and approval counters past everything already
    used: these rows, and what the order system has seen. Returns the new floors."""
    token, case_seen, approval_seen = _references_seen(client)
    fencing_floor = max(fencing_current(), token) + FENCING_JUMP
    fencing_raise_to(fencing_floor)
    case_rows = Case.objects.aggregate(n=Max("number"))["n"] or 0
    approval_rows = max(
        (
            int(m.group(1))
            for ref in Approval.objects.values_list("reference", flat=True)
            if (m := _APPROVAL_REFERENCE.fullmatch(ref))
        ),
        default=0,
    )
    floors = {
        "fencing_token": fencing_floor,
        "case_number": max(case_rows, case_seen) + REFERENCE_GAP,
        "approval_number": max(approval_rows, approval_seen) + REFERENCE_GAP,
    }
    counter_raise_to("case_number", floors["case_number"])
    counter_raise_to("approval_number", floors["approval_number"])
    return floors


def recover_after_restore(*, progress: Callable[[str], None] = print, client=None) -> dict:
    """Hold every suspect case, then reconcile each against the source. Returns a summary."""
    from reconciliation.settle import case_reconcile, held_operation

    worker = Worker("restore-recovery")
    floors = advance_counters(client=client)  # first: the fences below use fresh tokens
    pending = suspects()
    progress(f"{len(pending)} case(s) with unconfirmed operations or unfinished attempts")
    held = 0
    for pk in pending:
        with transaction.atomic():
            case = lock_case(pk)
            Attempt.objects.filter(case=case, state__in=Attempt.ACTIVE).update(
                state=Attempt.State.LEASE_EXPIRED
            )
            if case.status != Status.HELD:
                apply_transition(
                    case,
                    "hold_for_recovery",
                    actor=worker,
                    reason="Restored records may be older than the order system: reconcile "
                    "before any worker resumes",
                    waiting=(WaitingOn.OWNER, "Restored from backup: reconcile first"),
                )
                held += 1
    outcomes: dict[str, int] = {}
    for index, pk in enumerate(pending, start=1):
        operation = held_operation(Case.objects.get(pk=pk))
        outcome = case_reconcile(case_id=pk, actor=worker)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if outcome == "applied" and operation is not None:
            _note_applied_before_restore(pk, operation.key, worker)
        reference = Case.objects.values_list("reference", flat=True).get(pk=pk)
        progress(f"[{index}/{len(pending)}] {reference}: {outcome}")
    progress(
        f"Counters advanced past everything already used: fencing tokens above "
        f"{floors['fencing_token']}, cases above D-{floors['case_number']}, approvals above "
        f"AP-{floors['approval_number']}"
    )
    source_verified()
    epoch = marker_advance()
    progress(f"Recovery complete (database epoch now {epoch}).")
    return {"suspects": len(pending), "held": held, "outcomes": outcomes}


def _note_applied_before_restore(case_id: int, key: str, worker: Worker) -> None:
    """The operation was applied after the backup was taken: the steps that followed it there
    (the customer's notification) are missing from these records, not undone."""
    with transaction.atomic():
        case = lock_case(case_id)
        record_fact(
            case=case,
            action=APPLIED_BEFORE_RESTORE,
            actor=worker,
            reason=f"{key} was applied after the restored backup was taken: the customer may "
            "already have been told, so the notification is not sent again automatically",
            detail={"operation_key": key, "notify_key": f"{key}:notify"},
        )


def restore_check_before_unsent_decision(case) -> None:
    """Registered in ``cases.services.UNSENT_DECISION_CHECKS``: before a ready case is cancelled
    or sent back to review as if nothing was sent, compare these records with the order system;
    if they are older, recover first (the case is then held and settled from evidence).

    Always asks (``force``): such decisions are rare, and a restore minutes after a clean
    comparison would otherwise pass unseen."""
    why = restore_detected_at_source(force=True)
    if why:
        logger.warning("Database restore detected (%s): recovering before deciding", why)
        recover_after_restore(progress=logger.info)
