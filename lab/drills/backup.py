"""A drill-only "backup" of one drill case's rows, and its "restore" over a running deployment.

DRILL-ONLY. Nothing else may call this: ``case_rows_restore`` deletes audit events, which the
product never does. It exists so ``restore_older_backup`` can put one drill case back to an
older state without rolling back the whole database the deployment is using.

The backup holds every row of the case: the case, its events, evidence, cancellations, attempts,
operations, proposals (and their authors) and approvals (Django's JSON serializer), plus the
source-check marker (``reconciliation.restore_detection.SOURCE_MARKER``) as it stood, because a
real backup carries that marker too. The restore deletes the case's rows that are newer than the
backup and writes the older ones back. Events are append-only: the rows the backup holds are the
same rows still there (never rewritten), and the newer ones are cut from the end of the case's
chain. On PostgreSQL the audit trigger allows that only to a role that can act as the table's
owner, with ``SET LOCAL holdfast.maintenance = 'on'`` in the same transaction (see
``cases/migrations/0010_caseevent_hash_chain.py``); on SQLite the deletes simply run.

What the restore does not put back: the fencing sequence, the counters and the database epoch
(they are the deployment's, shared by every case). So the fencing-token comparison cannot see
this restore; the operation key can (an applied operation these records show as never sent).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.core import serializers
from django.db import DatabaseError, connection, models, transaction
from django.db.models import QuerySet
from django.utils import timezone

from approvals.models import Approval, Operation, Proposal, ProposalAuthor
from cases.models import (
    Attempt,
    CancellationRequest,
    Case,
    CaseEvent,
    EvidenceReference,
    SystemMarker,
)

# Children before parents: the order rows are deleted in (all foreign keys are PROTECT).
MODELS = (
    CaseEvent,
    EvidenceReference,
    CancellationRequest,
    Approval,
    ProposalAuthor,
    Attempt,
    Proposal,
    Operation,
)


class RestoreRefused(RuntimeError):
    """The database refused the drill's restore (on PostgreSQL: not the audit table's owner)."""


@dataclass(frozen=True)
class CaseBackup:
    case_id: int
    taken_at: dt.datetime
    rows: str  # Django's JSON serialization of the case and every row that belongs to it
    pks: dict[str, list]  # model label -> primary keys in the backup
    source_marker: dict | None  # {"identity", "epoch", "updated_at"} or None

    @property
    def row_count(self) -> int:
        return sum(len(v) for v in self.pks.values()) + 1


def _querysets(case_id: int) -> dict[type[models.Model], QuerySet[Any]]:
    operations = Operation.objects.filter(case_id=case_id)
    proposals = Proposal.objects.filter(case_id=case_id)
    return {
        CaseEvent: CaseEvent.objects.filter(case_id=case_id),
        EvidenceReference: EvidenceReference.objects.filter(case_id=case_id),
        CancellationRequest: CancellationRequest.objects.filter(case_id=case_id),
        Approval: Approval.objects.filter(proposal__in=proposals),
        ProposalAuthor: ProposalAuthor.objects.filter(proposal__in=proposals),
        Attempt: Attempt.objects.filter(case_id=case_id),
        Proposal: proposals,
        Operation: operations,
    }


def case_rows_backup(case: Case) -> CaseBackup:
    """Every row of ``case`` as it stands now (one read transaction)."""
    from reconciliation.restore_detection import SOURCE_MARKER

    with transaction.atomic():
        querysets = _querysets(case.pk)
        objects: list = [Case.objects.get(pk=case.pk)]
        pks: dict[str, list] = {}
        for model in reversed(MODELS):  # parents first: the order they are written back in
            rows = list(querysets[model].order_by("pk"))
            objects.extend(rows)
            pks[model._meta.label] = [row.pk for row in rows]
        marker = SystemMarker.objects.filter(name=SOURCE_MARKER).first()
    return CaseBackup(
        case_id=case.pk,
        taken_at=timezone.now(),
        rows=serializers.serialize("json", objects),
        pks=pks,
        source_marker=None
        if marker is None
        else {"identity": marker.identity, "epoch": marker.epoch, "updated_at": marker.updated_at},
    )


def _maintenance_on() -> None:
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('holdfast.maintenance', 'on', true)")


def case_rows_restore(backup: CaseBackup, *, marker_age: dt.timedelta) -> dict[str, int]:
    """DRILL-ONLY: put the case's rows back as ``backup`` holds them; returns what was cut.

    One transaction: the rows newer than the backup are deleted (children first), the backed-up
    rows are written back as they were (events are left alone: they never changed), and the
    source-check marker is put back as the backup held it, ``marker_age`` old (the backup stands
    for one taken that long ago).
    """
    from reconciliation.restore_detection import SOURCE_MARKER

    cut: dict[str, int] = {}
    try:
        with transaction.atomic():
            _maintenance_on()
            querysets = _querysets(backup.case_id)
            for model in MODELS:
                newer = querysets[model].exclude(pk__in=backup.pks[model._meta.label])
                pks = list(newer.values_list("pk", flat=True))
                if pks:
                    # A raw delete: the foreign keys are PROTECT, and every row that points at
                    # these is deleted in the same transaction (constraints are checked at
                    # commit).
                    model.objects.filter(pk__in=pks)._raw_delete(connection.alias)
                cut[model._meta.label] = len(pks)
            for item in serializers.deserialize("json", backup.rows):
                if isinstance(item.object, CaseEvent):
                    continue
                item.save()
            SystemMarker.objects.filter(name=SOURCE_MARKER).delete()
            if backup.source_marker is not None:
                SystemMarker.objects.create(
                    name=SOURCE_MARKER,
                    identity=backup.source_marker["identity"],
                    epoch=backup.source_marker["epoch"],
                )
                SystemMarker.objects.filter(name=SOURCE_MARKER).update(
                    updated_at=min(backup.source_marker["updated_at"], timezone.now() - marker_age)
                )
    except DatabaseError as exc:
        raise RestoreRefused(
            f"the database refused the drill's restore ({exc}); on PostgreSQL it needs a role "
            "that can act as the owner of cases_caseevent"
        ) from exc
    return cut
