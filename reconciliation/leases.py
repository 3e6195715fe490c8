"""An attempt's lease: the one writer of its renewal (``lease_expires_at``, ``heartbeat_at``).

A lease starts with the claim (``claims._claim_won`` writes the new attempt with
:func:`lease_expiry`) and is renewed here only, each time in one conditional statement that
also proves the attempt is still the case's current one:

- the heartbeat (:func:`lease_extend`): while the attempt is active, holds its fencing token
  and its lease has not run out;
- the mark that the write may leave (:func:`lease_renew_submitting`): while the attempt runs,
  holds its token, its lease has not run out and the approval it sends under is still live;
- the confirmed apply step (:func:`lease_renew_applied`): while the attempt runs, for the
  steps after it.

On PostgreSQL the submit mark is one statement written out (:func:`_submitting_sql`: the ORM's,
compiled afresh on every apply, cost a millisecond of the worker's time); elsewhere the ORM's.
``tests/reconciliation/test_hot_path.py`` checks both decide and write the same.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Exists, QuerySet

from approvals.models import Approval, Proposal
from cases.models import Attempt
from cases.rows import prepared_cursor, update


def lease_seconds(kind: str) -> float:
    return float(settings.LEASES[kind]["lease_seconds"])


def lease_expiry(kind: str, now: dt.datetime) -> dt.datetime:
    """When a lease of an attempt of ``kind`` taken or renewed at ``now`` runs out."""
    return now + dt.timedelta(seconds=lease_seconds(kind))


def approval_live(approval_id: int, now: dt.datetime) -> QuerySet[Approval]:
    """The approval an attempt sends under, if it still authorizes the change at ``now`` (as
    ``approvals.services.live_approval``)."""
    return Approval.objects.filter(
        pk=approval_id,
        proposal__status=Proposal.Status.APPROVED,
        decision=Approval.Decision.APPROVED,
        revoked_at__isnull=True,
        expires_at__gt=now,
    )


def lease_extend(
    *, attempt_id: int, fencing_token: int, expires: dt.datetime, now: dt.datetime
) -> bool:
    """The heartbeat's renewal: whether the attempt was still active, with this token and an
    unexpired lease (then it runs until ``expires``)."""
    return bool(
        Attempt.objects.filter(
            pk=attempt_id,
            fencing_token=fencing_token,
            state__in=Attempt.ACTIVE,
            lease_expires_at__gt=now,
        ).update(lease_expires_at=expires, heartbeat_at=now)
    )


def lease_renew_applied(attempt: Attempt, now: dt.datetime) -> bool:
    """The apply step is confirmed: while the attempt still runs, the step is recorded and the
    lease renewed for the steps after it. Whether it still ran."""
    return bool(
        update(
            Attempt,
            {"pk": attempt.pk, "state": Attempt.State.RUNNING},
            {
                "last_confirmed_step": Attempt.Step.APPLIED,
                "heartbeat_at": now,
                "lease_expires_at": lease_expiry(attempt.kind, now),
            },
        )
    )


def lease_renew_submitting(
    attempt: Attempt, approval_id: int | None, *, now: dt.datetime, lease: dt.datetime
) -> bool:
    """Durably note that the write may leave now, renewing the lease until ``lease``: only while
    the attempt is current, its lease unexpired and the approval it sends under
    (``approval_id``; None: no approval is checked) still live."""
    if connection.vendor == "postgresql":
        return _submitting_sql(attempt, approval_id, now=now, lease=lease)
    return _submitting_orm(attempt, approval_id, now=now, lease=lease)


def _submitting_orm(
    attempt: Attempt, approval_id: int | None, *, now: dt.datetime, lease: dt.datetime
) -> bool:
    live = [] if approval_id is None else [Exists(approval_live(approval_id, now))]
    return bool(
        Attempt.objects.filter(
            *live,
            pk=attempt.pk,
            state=Attempt.State.RUNNING,
            fencing_token=attempt.fencing_token,
            lease_expires_at__gt=now,
        ).update(submitted_at=now, heartbeat_at=now, lease_expires_at=lease)
    )


@functools.cache
def _pg_submitting_sql(*, live: bool) -> str:
    """:func:`_submitting_orm`'s statement; ``live``: with the approval's check
    (:func:`approval_live`)."""
    approval = (
        f"AND EXISTS (SELECT 1 FROM {Approval._meta.db_table} ap "  # noqa: S608 - metadata
        f"JOIN {Proposal._meta.db_table} pp ON pp.id = ap.proposal_id "
        "WHERE ap.id = %(approval)s AND pp.status = %(approved)s AND ap.decision = %(decided)s "
        "AND ap.revoked_at IS NULL AND ap.expires_at > %(now)s)"
        if live
        else ""
    )
    return (
        f"UPDATE {Attempt._meta.db_table} "  # noqa: S608 - identifiers from the models' metadata
        "SET submitted_at = %(now)s, heartbeat_at = %(now)s, lease_expires_at = %(lease)s "
        "WHERE id = %(id)s AND state = %(running)s AND fencing_token = %(token)s "
        f"AND lease_expires_at > %(now)s {approval}"
    )


def _submitting_sql(
    attempt: Attempt, approval_id: int | None, *, now: dt.datetime, lease: dt.datetime
) -> bool:
    params: dict[str, Any] = {
        "now": now,
        "lease": lease,
        "id": attempt.pk,
        "running": Attempt.State.RUNNING.value,
        "token": attempt.fencing_token,
    }
    if approval_id is not None:
        params |= {
            "approval": approval_id,
            "approved": Proposal.Status.APPROVED.value,
            "decided": Approval.Decision.APPROVED.value,
        }
    with prepared_cursor() as cursor:
        cursor.execute(_pg_submitting_sql(live=approval_id is not None), params)
        return cursor.rowcount == 1
