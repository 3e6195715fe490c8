"""Recovery after a backup of Holdfast's database is restored.

Restored records may be older than the order system: an operation they show unconfirmed may have
been applied after the backup. Before any worker resumes, every open case with an unconfirmed
operation that may have been sent or approved, and every non-terminal attempt, is held and
reconciled against the source (fence, then the consistent lookup) — nothing is re-applied because
the restored records lack a confirmation.

Detection: the database carries an identity and an epoch (``SystemMarker``); each worker host
keeps the highest epoch it saw in a file outside the database. A database whose epoch is behind
that file (or whose identity differs) went back in time. The dispatcher advances the epoch on
every tick, so a backup taken at any time is caught.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q

from approvals.models import Operation, Proposal
from cases.exceptions import CaseError
from cases.fencing import FENCING_SEQUENCE, counter_raise_to
from cases.models import OPEN_STATUSES, Attempt, Case, Status, SystemMarker, WaitingOn
from cases.services import Worker, apply_transition, lock_case

MARKER = "database"
# After a restore the token sequence is behind tokens already used at the order system.
FENCING_JUMP = 1_000_000


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


def _advance_fencing() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT setval(%s, nextval(%s) + %s)",
                [FENCING_SEQUENCE, FENCING_SEQUENCE, FENCING_JUMP],
            )
    else:
        from cases.models import CounterRow

        current = (
            CounterRow.objects.filter(name="fencing_token").values_list("value", flat=True).first()
            or 0
        )
        counter_raise_to("fencing_token", current + FENCING_JUMP)


def recover_after_restore(*, progress: Callable[[str], None] = print) -> dict:
    """Hold every suspect case, then reconcile each against the source. Returns a summary."""
    from reconciliation.settle import case_reconcile

    worker = Worker("restore-recovery")
    _advance_fencing()
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
        outcome = case_reconcile(case_id=pk, actor=worker)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        reference = Case.objects.values_list("reference", flat=True).get(pk=pk)
        progress(f"[{index}/{len(pending)}] {reference}: {outcome}")
    epoch = marker_advance()
    progress(f"Recovery complete (database epoch now {epoch}).")
    return {"suspects": len(pending), "held": held, "outcomes": outcomes}
