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
import functools
import logging
import math
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, close_old_connections, connection, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from django.db.models.expressions import RawSQL
from django.utils import timezone

from approvals.models import Operation, Proposal
from cases.attempts import attempt_finish
from cases.codes import Action
from cases.exceptions import CaseError
from cases.fencing import next_fencing_token, next_fencing_token_sql
from cases.kernel import (
    Actor,
    Worker,
    actor_label,
    apply_transition,
    bump_and_save,
    case_step,
    claim_event_words,
    claim_transition,
    claim_write,
    event_row,
    lock_case,
    pg_claim_params,
    pg_claim_statement,
    record_event,
    record_fact,
    user_or_none,
)
from cases.logcontext import log_context
from cases.models import (
    Attempt,
    CancellationRequest,
    Case,
    CaseEvent,
    Status,
    SystemMarker,
    WaitingOn,
)
from cases.rows import (
    columns,
    current,
    fetchone_named,
    load,
    prepared_cursor,
    width,
)
from reconciliation import metrics
from reconciliation.complete import case_complete
from reconciliation.leases import lease_expiry, lease_extend
from reconciliation.models import Autonomy

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


def record_claim_released(case: Case, attempt: Attempt, actor: Actor) -> None:
    """The attempt no longer holds the case's one claim (an operator-visible fact distinct
    from 'worker stopped' and 'lease expired')."""
    record_fact(
        case=case,
        action=Action.ATTEMPT_CLAIM_RELEASED,
        actor=actor,
        reason=f"{attempt.reference} released its claim on {case.reference}",
        detail={"attempt": attempt.reference},
    )


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
        autonomy = current_autonomy(kind=case.kind)
        if not autonomy.is_autonomous and case.apply_authorized_by_id is None:
            raise ClaimRefused(
                f"The order system is {autonomy.autonomy.label.lower()} for "
                f"{autonomy.kind_label.lower()} changes: a person must start this apply.",
                reason="not_autonomous",
            )
    return operation, approval


class SourceCheckDue(Exception):  # noqa: N818 - a signal to the caller, not an error
    """The claim would allow a write while no clean comparison with the order system is recent:
    the caller compares (``restore_detected_at_source``) outside any transaction, then claims
    again with ``source_checked=True``."""


@dataclass
class Claimed:
    """A won claim with what the claim read under the case lock, so the steps that follow do not
    read it again: the case (with its account), the operation, the approval's grant, and whether
    the operation may already be at the order system."""

    attempt: Attempt
    case: Case
    operation: Operation
    approval_id: int | None
    approval_reference: str | None
    approval_grant: str
    evidence_order_version: int
    earlier_submitted: bool
    restored: bool
    # When the live approval was decided: the start of the approve → applied latency.
    approval_decided_at: dt.datetime | None = None
    # PostgreSQL's ``synchronous_commit`` for the claim's commit: ``off`` when the claim was
    # its own transaction (``cases.kernel.pg_claim_statement``), else the caller's (None: the
    # ORM's claim, on other databases).
    synchronous_commit: str | None = None


def _claim_query(now: dt.datetime) -> QuerySet[Proposal]:
    """One read of everything a claim decides on, joined from the case's open proposal (a case
    has at most one, ``proposal_one_open_per_case``): the case and its account, the operation,
    the live approval, a pending cancellation, the autonomy of the order system for the case's
    kind of change, the chain's
    head and the attempt count, the restore markers and, on PostgreSQL, the next fencing token.
    Each guard here mirrors its service (``approvals.services.live_approval``, ``open_proposal``,
    ``reconciliation.selectors.current_autonomy``, ``reconciliation.restore_detection``); a claim
    these refuse is refused again by the services, which say why."""
    from approvals.models import Approval
    from reconciliation.models import OrderSystemProfile
    from reconciliation.restore_detection import MARKER, SOURCE_MARKER
    from reconciliation.selectors import normalised_url

    live = Approval.objects.filter(
        proposal__case_id=OuterRef("case_id"),
        proposal__status=Proposal.Status.APPROVED,
        decision=Approval.Decision.APPROVED,
        revoked_at__isnull=True,
        expires_at__gt=now,
    ).order_by("-decided_at")
    marker = SystemMarker.objects.filter(name=MARKER)
    annotations: dict[str, Any] = {
        "pending_cancel": Exists(
            CancellationRequest.objects.filter(case_id=OuterRef("case_id"), outcome="pending")
        ),
        "approval_id": Subquery(live.values("pk")[:1]),
        "approval_reference": Subquery(live.values("reference")[:1]),
        "approval_grant": Subquery(live.values("grant")[:1]),
        "approval_decided_at": Subquery(live.values("decided_at")[:1]),
        # Every kind's autonomy; the row keeps its case's kind's (``_ClaimRow.from_orm``).
        "kind_autonomy": Subquery(
            OrderSystemProfile.objects.filter(base_url=normalised_url(settings.ORDER_SYSTEM_URL))
            .order_by("-probed_at", "-id")
            .values("kind_autonomy")[:1]
        ),
        "earlier_submitted": Exists(
            Attempt.objects.filter(
                operation_id=OuterRef("operation_id"), submitted_at__isnull=False
            )
        ),
        "restored": Exists(
            CaseEvent.objects.filter(case_id=OuterRef("case_id")).filter(
                Q(detail__transition="hold_for_recovery")
                | Q(action=Action.RESTORE_UNEXPECTED_REPLAY)
            )
        ),
        "head": Subquery(
            CaseEvent.objects.filter(case_id=OuterRef("case_id")).order_by("-id").values("hash")[:1]
        ),
        "last_sequence": Subquery(
            Attempt.objects.filter(case_id=OuterRef("case_id"))
            .order_by("-sequence")
            .values("sequence")[:1]
        ),
        "marker_identity": Subquery(marker.values("identity")[:1]),
        "marker_epoch": Subquery(marker.values("epoch")[:1]),
        "source_checked_at": Subquery(
            SystemMarker.objects.filter(name=SOURCE_MARKER).values("updated_at")[:1]
        ),
    }
    if connection.vendor == "postgresql":
        annotations["token"] = RawSQL(next_fencing_token_sql(), [])  # noqa: S611 - fixed
    return (
        Proposal.objects.filter(status__in=Proposal.OPEN)
        .select_related("operation", "case", "case__account")
        .annotate(**annotations)
    )


@dataclass
class _ClaimRow:
    """What the claim read, the same from either reader: the open proposal's case (with the
    case's account) and operation, and every guard's value (the proposal's own is its evidence's
    order version)."""

    case: Case
    operation: Operation | None
    case_id: int
    evidence_order_version: int
    pending_cancel: bool
    approval_id: int | None
    approval_reference: str | None
    approval_grant: str | None
    approval_decided_at: dt.datetime | None
    autonomy: str | None
    earlier_submitted: bool
    restored: bool
    head: str | None
    last_sequence: int | None
    marker_identity: str | None
    marker_epoch: int | None
    source_checked_at: dt.datetime | None
    token: int | None = None

    @classmethod
    def from_orm(cls, row: Any) -> _ClaimRow:
        # The autonomy the probe proved for the case's kind of change (none: not proven).
        row.autonomy = (row.kind_autonomy or {}).get(row.case.kind)
        return cls(
            case=row.case,
            operation=row.operation,
            **{name: getattr(row, name) for name in _GUARD_COLUMNS},
            token=getattr(row, "token", None),
        )


_GUARD_COLUMNS = (
    "case_id",
    "evidence_order_version",
    "pending_cancel",
    "approval_id",
    "approval_reference",
    "approval_grant",
    "approval_decided_at",
    "autonomy",
    "earlier_submitted",
    "restored",
    "head",
    "last_sequence",
    "marker_identity",
    "marker_epoch",
    "source_checked_at",
)


def _claim_read(
    now: dt.datetime, *, case_id: int | None = None, skip: set[int] | None = None
) -> _ClaimRow | None:
    """The claim's one locked read, on databases other than PostgreSQL (which reads and
    writes in one statement, :func:`_claim_one`): of ``case_id``'s open proposal, or
    (``case_id`` None) of the ready case due longest, not in ``skip`` and not on a sandbox
    order. The ORM's ``_claim_query``; ``tests/reconciliation/test_hot_path.py`` checks that
    PostgreSQL's written-out read (``_claim_read_sql``) reads the same."""
    return _claim_read_orm(now, case_id=case_id, skip=skip or set())


def _claim_read_orm(now: dt.datetime, *, case_id: int | None, skip: set[int]) -> _ClaimRow | None:
    query = _claim_query(now)
    if case_id is not None:
        query = query.filter(case_id=case_id).order_by("created_at")
        if connection.vendor == "postgresql":
            query = query.select_for_update(of=("case",))
    else:
        query = (
            query.filter(case__status=Status.READY, case__next_check_at__lte=now)
            .exclude(case__order_id__in=settings.ORDER_SYSTEM_SANDBOX_ORDERS)
            .exclude(case_id__in=skip)
            .order_by("case__next_check_at")
        )
        if connection.vendor == "postgresql":
            query = query.select_for_update(of=("case",), skip_locked=True)
    row = query.first()
    return None if row is None else _ClaimRow.from_orm(row)


# Written into the statements, not bound: a prepared statement's generic plan can use a partial
# index (the open proposal per case, the ready cases by due time) only when its query names the
# index's own condition.
_OPEN_STATUSES = ", ".join(f"'{status}'" for status in Proposal.OPEN)


@functools.cache
def _pg_pick_sql() -> str:
    """Only the pick: the ready case due longest that nobody holds, locked. The next-due read
    runs it first, as a CTE whose one id the read by id then takes: the whole read ordered by
    due time measured slower (3.1–3.2 ms a claim against 1.9–2.0 ms with 300 due)."""
    return f"""
        SELECT c.id FROM {Case._meta.db_table} c
        WHERE c.status = '{Status.READY.value}' AND c.next_check_at <= %(now)s
          AND NOT (c.order_id = ANY(%(sandbox)s)) AND NOT (c.id = ANY(%(skip)s))
          AND EXISTS (SELECT 1 FROM {Proposal._meta.db_table} p
                      WHERE p.case_id = c.id AND p.status IN ({_OPEN_STATUSES}))
        ORDER BY c.next_check_at LIMIT 1 FOR UPDATE OF c SKIP LOCKED"""  # noqa: S608 - metadata


@functools.cache
def _pg_claim_sql() -> str:
    """The claim's read of one case by id, locking its row."""
    from approvals.models import Approval
    from reconciliation.models import OrderSystemProfile

    account = Case._meta.get_field("account").related_model
    t = {
        "proposal": Proposal._meta.db_table,
        "operation": Operation._meta.db_table,
        "case": Case._meta.db_table,
        "account": account._meta.db_table,
        "approval": Approval._meta.db_table,
        "cancellation": CancellationRequest._meta.db_table,
        "profile": OrderSystemProfile._meta.db_table,
        "attempt": Attempt._meta.db_table,
        "event": CaseEvent._meta.db_table,
        "marker": SystemMarker._meta.db_table,
    }
    # The live approval of the case, read once for its four columns (as four subqueries it was
    # the same index walk four times).
    live = (
        'SELECT ap.id, ap.reference, ap."grant", ap.decided_at '  # noqa: S608 - metadata
        f"FROM {t['approval']} ap JOIN {t['proposal']} pp ON pp.id = ap.proposal_id "
        "WHERE pp.case_id = c.id AND pp.status = %(approved)s AND ap.decision = %(approved)s "
        "AND ap.revoked_at IS NULL AND ap.expires_at > %(now)s ORDER BY ap.decided_at DESC LIMIT 1"
    )
    # The guards by name too (``hf_…``): the one-statement claim's own guards read them
    # (``_PG_GUARDS``), and the kernel's write the columns it names
    # (``cases.kernel.CLAIM_READ_COLUMNS``). The reader takes them by position.
    select = f"""
        SELECT p."evidence_order_version", {columns(Operation, "o")},
               {columns(Case, "c")}, {columns(account, "a")},
               EXISTS (SELECT 1 FROM {t["cancellation"]} x
                       WHERE x.case_id = c.id AND x.outcome = 'pending') AS hf_pending_cancel,
               live.id AS hf_approval_id, live.reference AS hf_approval,
               live."grant" AS hf_grant, live.decided_at AS hf_decided,
               (SELECT f.kind_autonomy ->> c.kind FROM {t["profile"]} f
                WHERE f.base_url = %(url)s ORDER BY f.probed_at DESC, f.id DESC LIMIT 1)
                 AS hf_autonomy,
               EXISTS (SELECT 1 FROM {t["attempt"]} s
                       WHERE s.operation_id = o.id AND s.submitted_at IS NOT NULL)
                 AS hf_earlier_submitted,
               EXISTS (SELECT 1 FROM {t["event"]} e WHERE e.case_id = c.id
                       AND (e.detail ->> 'transition' = 'hold_for_recovery'
                            OR e.action = %(replay)s)) AS hf_restored,
               (SELECT e.hash FROM {t["event"]} e WHERE e.case_id = c.id
                ORDER BY e.id DESC LIMIT 1) AS hf_head,
               (SELECT max(s.sequence) FROM {t["attempt"]} s WHERE s.case_id = c.id)
                 AS hf_last_sequence,
               m.identity AS hf_marker_identity, m.epoch AS hf_marker_epoch,
               sm.updated_at AS hf_source_checked_at,
               {next_fencing_token_sql()} AS hf_token,
               c.id AS hf_case, c.version AS hf_version, c.reference AS hf_reference,
               c.status AS hf_status, c.revoked_at AS hf_revoked_at,
               c.last_checked_order_version AS hf_last_checked,
               c.apply_authorized_by_id AS hf_started_by, a.access_active AS hf_access_active,
               o.id AS hf_operation, o.key AS hf_key, o.confirmed_at AS hf_confirmed_at,
               p.evidence_order_version AS hf_evidence_version
        FROM {t["proposal"]} p
        JOIN {t["case"]} c ON c.id = p.case_id
        JOIN {t["account"]} a ON a.id = c.account_id
        LEFT JOIN {t["operation"]} o ON o.id = p.operation_id
        LEFT JOIN LATERAL ({live}) live ON TRUE
        LEFT JOIN {t["marker"]} m ON m.name = %(marker)s
        LEFT JOIN {t["marker"]} sm ON sm.name = %(source)s
        WHERE p.status IN ({_OPEN_STATUSES})"""  # noqa: S608 - identifiers from the models' metadata
    return select + " AND p.case_id = %(case)s ORDER BY p.created_at LIMIT 1 FOR UPDATE OF c"


@functools.cache
def _pg_read_ctes(next_due: bool) -> str:
    """The claim's read as CTEs (``WITH`` left out), ending with ``claim_read``: of the case
    ``%(case)s`` (locked), or of the ready case due longest (the pick, ``_pg_pick_sql``, locking
    and skipping what others hold; then the read by id of the case it picked)."""
    by_id = _pg_claim_sql()
    if not next_due:
        return f"claim_read AS ({by_id})"
    assert by_id.count("%(case)s") == 1  # noqa: S101 - the one place the pick's id goes
    picked = by_id.replace("%(case)s", "(SELECT pick.id FROM pick)")
    return f"pick AS ({_pg_pick_sql()}), claim_read AS ({picked})"


# The guards of ``_claim_refusal`` and ``_claim_won`` (the comparison with the order system is
# due) as one condition on the read row: only a row that passes them is written. A row that
# does not comes back unwritten, and those functions say which guard stopped it, as on every
# other database (``tests/reconciliation/test_hot_path.py`` holds both to the same
# answer). The restore check compares the database's epoch with the one this host last saw for
# the identity it knows (``%(identity)s``): a database it does not know yet writes nothing, and
# the claim learns its identity and asks again (``_known_identity``). The last condition: the
# audit chain's head is the locked row's version. A claim that waited for another step's lock
# reads the row as that step left it, but every subquery (the head, the pending cancellations,
# the live approval) from before it (READ COMMITTED): each step records the event of the
# version it makes, so a head of another version means the read was from before a step that
# committed meanwhile, and nothing is written (``_claim_one`` claims again, in a new statement).
_PG_GUARDS = f"""
    hf_status = '{Status.READY.value}'
    AND (%(expected_version)s::bigint IS NULL OR hf_version = %(expected_version)s::bigint)
    AND hf_revoked_at IS NULL AND hf_access_active AND NOT hf_pending_cancel
    AND hf_operation IS NOT NULL
    AND (hf_confirmed_at IS NOT NULL
         OR (hf_approval_id IS NOT NULL AND hf_evidence_version = hf_last_checked
             AND (hf_autonomy = '{Autonomy.AUTONOMOUS.value}' OR hf_started_by IS NOT NULL)))
    AND (%(source_checked)s OR hf_confirmed_at IS NOT NULL
         OR hf_source_checked_at >= %(source_cutoff)s)
    AND (hf_marker_identity IS NULL OR hf_marker_epoch IS NULL
         OR (hf_marker_identity = %(identity)s
             AND hf_marker_epoch >= COALESCE(%(seen_epoch)s::bigint, hf_marker_epoch)))
    AND COALESCE((SELECT e.version FROM {CaseEvent._meta.db_table} e
                  WHERE e.case_id = hf_case ORDER BY e.id DESC LIMIT 1), hf_version) = hf_version"""  # noqa: S608, E501 - identifiers from the models' metadata


@functools.cache
def _pg_claim_statement(next_due: bool, *, own_commit: bool = True) -> str:
    """The whole claim as one statement (``cases.kernel.pg_claim_statement``): the read, the
    guards, and the kernel's write of a row that passes them; ``own_commit``: the statement is
    its own transaction."""
    reads = (
        f"{_pg_read_ctes(next_due)}, claim_ok AS (SELECT *, "  # noqa: S608 - fixed text
        f"COALESCE(hf_last_sequence, 0) + 1 AS hf_sequence FROM claim_read WHERE {_PG_GUARDS})"
    )
    return pg_claim_statement(reads, own_commit=own_commit)


def _claim_read_sql(now: dt.datetime, *, case_id: int | None, skip: set[int]) -> _ClaimRow | None:
    """The claim's read alone (the one-statement claim reads the same, ``_claim_one``)."""
    params = _read_params(now, case_id=case_id, skip=skip)
    with prepared_cursor() as cursor:
        read = _pg_read_ctes(case_id is None)
        cursor.execute(f"WITH {read} SELECT * FROM claim_read", params)  # noqa: S608 - fixed
        values = cursor.fetchone()
    if values is None:
        return None
    return _row_from(values)


def _read_params(now: dt.datetime, *, case_id: int | None, skip: set[int]) -> dict[str, Any]:
    """The parameters of the claim's read (``_pg_claim_sql``, ``_pg_read_ctes``)."""
    from reconciliation.restore_detection import MARKER, SOURCE_MARKER
    from reconciliation.selectors import normalised_url

    params: dict[str, Any] = {
        "approved": Proposal.Status.APPROVED.value,
        "now": now,
        "url": normalised_url(settings.ORDER_SYSTEM_URL),
        "replay": Action.RESTORE_UNEXPECTED_REPLAY.value,
        "marker": MARKER,
        "source": SOURCE_MARKER,
        "sandbox": list(settings.ORDER_SYSTEM_SANDBOX_ORDERS),
        "skip": sorted(skip),
    }
    if case_id is not None:
        params["case"] = case_id
    return params


def _row_from(values: Any) -> _ClaimRow:
    """The claim's row from the read's columns (``_pg_claim_sql``), by position."""
    account = Case._meta.get_field("account").related_model
    parts, at = [], 1  # after the proposal's evidence_order_version
    for model in (Operation, Case, account):
        parts.append(tuple(values[at : at + width(model)]))
        at += width(model)
    db = current()
    operation = None if parts[0][0] is None else load(Operation, parts[0], db)
    case = load(Case, parts[1], db)
    case.account = load(account, parts[2], db)
    # The guards in the statement's order: _GUARD_COLUMNS after the case's id and the version,
    # then the token (the named columns after it are the one-statement claim's).
    *read, token = values[at : at + len(_GUARD_COLUMNS) - 1]
    return _ClaimRow(
        case=case,
        operation=operation,
        case_id=case.pk,
        evidence_order_version=values[0],
        **dict(zip(_GUARD_COLUMNS[2:], read, strict=True)),
        token=token,
    )


def _claim_refusal(row: _ClaimRow, *, now: dt.datetime, version: int | None) -> ClaimRefused | None:
    """The guard the row read by :func:`_claim_query` fails, or None when the claim may go."""
    from reconciliation.models import Autonomy
    from reconciliation.restore_detection import RecoveryRequired, restore_detected_from

    case: Case = row.case
    why = restore_detected_from(row.marker_identity, row.marker_epoch)
    if why:
        raise RecoveryRequired(
            f"Recovery after restore is required: {why}. Run `manage.py recover_after_restore`."
        )
    if case.status != Status.READY or (version is not None and case.version != version):
        return ClaimRefused("lost", reason="lost")
    if (
        case.revoked_at is not None
        or not case.account.access_active
        or row.pending_cancel
        or row.operation is None
    ):
        return ClaimRefused("guard", reason="guard")
    if row.operation.confirmed_at is None and (
        row.approval_id is None
        or row.evidence_order_version != case.last_checked_order_version
        or (row.autonomy != Autonomy.AUTONOMOUS and case.apply_authorized_by_id is None)
    ):
        return ClaimRefused("guard", reason="guard")
    return None


def _claim_won(
    row: _ClaimRow, *, worker: Worker, kind: str, now: dt.datetime, source_checked: bool
) -> Claimed:
    """Write the won claim under the lock the read took: the case, its attempt, its event."""
    case: Case = row.case
    operation = row.operation
    assert operation is not None  # _claim_refusal refuses a proposal without one
    _source_check_due(row, now=now, source_checked=source_checked)
    lease = lease_expiry(kind, now)
    # The watchdog's look: when the attempt's lease runs out without a heartbeat.
    version = claim_transition(case, next_check_at=lease, now=now)
    token = row.token if row.token is not None else next_fencing_token()
    attempt = _new_attempt(row, token=token, worker=worker, kind=kind, now=now, lease=lease)
    reason, detail = claim_event_words(
        attempt_reference=attempt.reference,
        operation_key=operation.key,
        token=attempt.fencing_token,
        worker=worker.label,
        approval=row.approval_reference,
        lease_expires_at=lease,
    )
    event = event_row(
        case=case,
        action=Action.CASE_CLAIMED,
        actor=worker,
        reason=reason,
        from_status=Status.READY,
        to_status=Status.APPLYING,
        detail=detail,
        head=row.head or "",  # read with the case, under its lock ("": no event yet)
    )
    try:
        # No savepoint: a refused insert ends the whole claim, which rolls back with it.
        moved = claim_write(case, version, attempt, event)
    except IntegrityError:
        raise ClaimRefused("Another attempt is already active.", reason="claimed") from None
    if not moved:  # the read locked the row: only a broken lock could get here
        raise ClaimRefused(f"{case.reference} changed while it was claimed.", reason="claimed")
    attempt.case, attempt.operation = case, operation
    return _claim_result(row, attempt)


def _claim_result(row: _ClaimRow, attempt: Attempt) -> Claimed:
    """The won claim, with what its read saw (a takeover counted once it commits)."""
    case, operation = row.case, row.operation
    assert operation is not None  # written only with one
    if attempt.sequence > 1:
        _count_takeover(case.pk, attempt.sequence)
    return Claimed(
        attempt=attempt,
        case=case,
        operation=operation,
        approval_id=row.approval_id,
        approval_reference=row.approval_reference,
        approval_grant=row.approval_grant or "",
        evidence_order_version=row.evidence_order_version,
        earlier_submitted=row.earlier_submitted,
        restored=row.restored,
        approval_decided_at=row.approval_decided_at,
    )


# How a previous attempt ends when its worker's fate was uncertain: a claim after one of these
# takes the case over (a reconciliation proved the operation absent in between, or the missing
# worker had confirmed the change and the steps after it resume).
_UNCERTAIN_ENDINGS = (
    Attempt.State.LEASE_EXPIRED,
    Attempt.State.EFFECT_UNKNOWN,
    Attempt.State.FENCED,
)


def _count_takeover(case_id: int, sequence: int) -> None:
    """Count the claim as a takeover once it commits, when the case's previous attempt ended
    uncertain (one indexed read, never for a case's first attempt: not on the hot path)."""
    previous = (
        Attempt.objects.filter(case_id=case_id, sequence=sequence - 1)
        .values_list("state", flat=True)
        .first()
    )
    if previous in _UNCERTAIN_ENDINGS:
        transaction.on_commit(lambda: metrics.takeover(str(previous)))


def case_claim(
    *, case_id: int, worker: Worker, expected_version: int | None = None, kind: str = "apply"
) -> Attempt:
    """Start one attempt on a ready case, or refuse with the reason.

    ``expected_version`` defaults to the version read here. Raises ``SourceCheckDue`` never:
    this entry point claims without the comparison with the order system (``apply_case`` and
    ``claim_next_due`` make it first)."""
    return claim_case(
        case_id=case_id,
        worker=worker,
        expected_version=expected_version,
        kind=kind,
        source_checked=True,
    ).attempt


def claim_case(
    *,
    case_id: int,
    worker: Worker,
    expected_version: int | None = None,
    kind: str = "apply",
    source_checked: bool = False,
) -> Claimed:
    """:func:`case_claim` returning what the claim read (``Claimed``). On PostgreSQL one
    statement committed on its own (:func:`_claim_one`): the guarded read that locks the case
    row and, when the guards hold, the write of the case, the attempt and the event. Elsewhere
    one transaction: the read, then the kernel's write (``cases.kernel.claim_write``). Any
    guard that fails is reported by :func:`_claim_refused`, which reads the services' own view
    of it and moves the case where it belongs."""
    now = timezone.now()
    if connection.vendor == "postgresql":
        claimed = _claim_one(
            now,
            case_id=case_id,
            skip=set(),
            worker=worker,
            kind=kind,
            version=expected_version,
            source_checked=source_checked,
        )
        if isinstance(claimed, Claimed):
            return claimed
        raise _claim_refused(case_id, worker=worker, expected_version=expected_version, now=now)
    with transaction.atomic():
        row = _claim_read(now, case_id=case_id)
        refusal = (
            ClaimRefused("No approved proposal to apply.", reason="no_proposal")
            if row is None
            else _claim_refusal(row, now=now, version=expected_version)
        )
        if row is not None and refusal is None:
            return _claim_won(row, worker=worker, kind=kind, now=now, source_checked=source_checked)
    raise _claim_refused(case_id, worker=worker, expected_version=expected_version, now=now)


def claim_next_due(
    *,
    worker: Worker,
    kind: str = "apply",
    skip: set[int] | None = None,
    source_checked: bool = False,
) -> Claimed | None:
    """Claim the ready case that has been due longest, skipping cases another worker holds
    (``SKIP LOCKED`` on PostgreSQL) and those in ``skip``; None when nothing is due. A case whose
    guard refuses is moved where it belongs (:func:`_claim_refused`), added to ``skip`` and the
    next one is tried. Cases on the sandbox orders are the drills' own and are never taken."""
    skip = set() if skip is None else skip
    while True:
        now = timezone.now()
        if connection.vendor == "postgresql":
            claimed = _claim_one(
                now,
                case_id=None,
                skip=skip,
                worker=worker,
                kind=kind,
                version=None,
                source_checked=source_checked,
            )
            if claimed is None or isinstance(claimed, Claimed):
                return claimed
            refused_id = claimed
        else:
            with transaction.atomic():
                row = _claim_read(now, skip=skip)
                if row is None:
                    return None
                refusal = _claim_refusal(row, now=now, version=None)
                if refusal is None:
                    return _claim_won(
                        row, worker=worker, kind=kind, now=now, source_checked=source_checked
                    )
            refused_id = row.case_id
        skip.add(refused_id)
        _claim_refused(refused_id, worker=worker, expected_version=None, now=now)


# The identity of each database whose restore marker the one-statement claim compared with
# this host's file (by connection alias): a claim on a database not known yet writes nothing,
# learns it, and asks again.
_known_identity: dict[str, str] = {}


def _claim_one(
    now: dt.datetime,
    *,
    case_id: int | None,
    skip: set[int],
    worker: Worker,
    kind: str,
    version: int | None,
    source_checked: bool,
) -> Claimed | int | None:
    """PostgreSQL: the claim as one statement (``_pg_claim_statement``): the claimed case, or
    the id of the case whose guard refused (the caller reports it), or None when nothing was
    read. What stopped an unwritten row is read from the row itself, by the same functions as
    on other databases: ``_claim_refusal`` (a restore raises ``RecoveryRequired``), then the
    comparison with the order system (``SourceCheckDue``)."""
    from reconciliation.restore_detection import SOURCE_CHECK_MAX_AGE, read_epoch

    lease = lease_expiry(kind, now)
    alias = connection.alias
    again = False  # claimed once more after a read from before a step that committed
    # The second time after learning the database's identity, or after such a read.
    for _ in range(3):
        identity = _known_identity.get(alias)
        params = {
            **_read_params(now, case_id=case_id, skip=skip),
            **pg_claim_params(worker=worker, kind=kind, now=now, lease=lease),
            "expected_version": version,
            "source_checked": source_checked,
            "source_cutoff": now - SOURCE_CHECK_MAX_AGE,
            "identity": identity,
            "seen_epoch": read_epoch(identity) if identity else None,
        }
        statement = _pg_claim_statement(case_id is None, own_commit=not connection.in_atomic_block)
        values = fetchone_named(statement, params)
        if values is None:
            return None
        row = _row_from(values)
        commit, attempt_id, event_id = values[-3:]
        if attempt_id is not None:
            claimed = _claimed(row, attempt_id, worker=worker, kind=kind, now=now, lease=lease)
            claimed.synchronous_commit = commit
            return claimed
        if _claim_refusal(row, now=now, version=version) is not None:
            return row.case_id
        _source_check_due(row, now=now, source_checked=source_checked)
        if row.marker_identity is None or row.marker_identity == identity:
            # Every guard holds as read, and yet nothing was written: the claim waited for a
            # step that committed meanwhile and read what it checks from before it (the
            # head's condition in ``_PG_GUARDS``): once more, in a new statement. Twice, only
            # a broken lock could.
            if again:
                raise ClaimRefused(
                    f"{row.case.reference} changed while it was claimed.", reason="claimed"
                )
            again = True
            continue
        _known_identity[alias] = row.marker_identity
    raise ClaimRefused(f"{row.case.reference} changed while it was claimed.", reason="claimed")


def _source_check_due(row: _ClaimRow, *, now: dt.datetime, source_checked: bool) -> None:
    """No claim on records older than the order system: without a recent clean comparison
    with it, the caller asks it first (``SourceCheckDue``)."""
    from reconciliation.restore_detection import source_check_due_from

    operation = row.operation
    assert operation is not None  # _claim_refusal refuses a proposal without one
    if (
        not source_checked
        and operation.confirmed_at is None
        and source_check_due_from(row.source_checked_at, now)
    ):
        raise SourceCheckDue


def _claimed(
    row: _ClaimRow,
    attempt_id: int,
    *,
    worker: Worker,
    kind: str,
    now: dt.datetime,
    lease: dt.datetime,
) -> Claimed:
    """The claim the one statement wrote, as the objects ``_claim_won`` makes: the case moved
    in memory as it was in the database, and its new attempt."""
    case: Case = row.case
    operation = row.operation
    assert operation is not None  # written only with an operation
    assert row.token is not None  # and with the token the read took
    claim_transition(case, next_check_at=lease, now=now)
    attempt = _new_attempt(row, token=row.token, worker=worker, kind=kind, now=now, lease=lease)
    attempt.pk = attempt_id
    attempt._state.adding, attempt._state.db = False, connection.alias
    return _claim_result(row, attempt)


def _new_attempt(
    row: _ClaimRow,
    *,
    token: int,
    worker: Worker,
    kind: str,
    now: dt.datetime,
    lease: dt.datetime,
) -> Attempt:
    """The claim's attempt on the case it read: the next sequence, its reference, the token."""
    case: Case = row.case
    sequence = (row.last_sequence or 0) + 1
    return Attempt(
        case=case,
        operation=row.operation,
        reference=f"{case.reference}-a{sequence}",
        sequence=sequence,
        kind=kind,
        worker=worker.label,
        started_by_id=case.apply_authorized_by_id,
        fencing_token=token,
        claimed_at=now,
        lease_expires_at=lease,
        heartbeat_at=now,
    )


def _claim_refused(
    case_id: int, *, worker: Worker, expected_version: int | None, now: dt.datetime
) -> ClaimRefused:
    """Why the claim did not go, as the services see it (read outside the claim's lock), after
    moving the case where that guard puts it."""
    case = Case.objects.select_related("account").get(pk=case_id)
    version = case.version if expected_version is None else expected_version
    if case.status != Status.READY or case.version != version:
        return _lost(case, version)
    try:
        _claim_guards(case, worker=worker, now=now)
    except ClaimRefused as refusal:
        # The guards read rows one by one: a revocation (or any change) that committed
        # meanwhile closes the approval too, and must be reported as what it is, not as the
        # guard it happened to trip ("approval expired").
        fresh = Case.objects.get(pk=case.pk)
        if fresh.revoked_at is not None and refusal.extra.get("reason") != "revoked":
            return ClaimRefused(f"Authority over {case.reference} was revoked.", reason="revoked")
        if fresh.status != Status.READY or fresh.version != version:
            return _lost(fresh, version)
        with transaction.atomic():
            _act_on_refusal(case.pk, version, refusal)
        return refusal
    # The guards hold now: what the claim saw changed in between (a person answered): lost.
    return ClaimRefused(
        f"{case.reference} changed while it was claimed; try again.", reason="version_changed"
    )


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
    expires = lease_expiry(attempt.kind, now)
    if not lease_extend(
        attempt_id=attempt_id, fencing_token=fencing_token, expires=expires, now=now
    ):
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


@dataclass(eq=False)
class _Waiting:
    """An attempt whose worker waits on a long call: renewed every ``interval`` seconds."""

    attempt_id: int
    fencing_token: int
    reference: str
    interval: float
    due: float
    lost: threading.Event


class _Heartbeats:
    """One thread per process renews the leases of the attempts waiting under
    :func:`keep_alive`, each every heartbeat interval. A thread of their own for each call
    cost a thread's start and join on every apply. The thread holds a database connection
    only while someone waits (it closes it when it wakes to find nobody does), and a forked
    child starts its own (``os.register_at_fork``).

    The thread is woken only when it must renew sooner than it planned to wake: a call that
    ends is not a reason to wake it (it finds the call gone when it wakes), and a call that
    begins is one only when the thread sleeps past the new call's first renewal. A worker
    applying one case after another so wakes it about once an interval, not twice a case: each
    wake was a switch of threads, on a busy machine a wait for a core."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._waiting: set[_Waiting] = set()
        self._thread: threading.Thread | None = None
        self._wakes_at = math.inf  # when the thread's wait ends by itself (monotonic)
        self._linger = 0.0  # how long it waits on once nobody does: the last call's interval
        self.wakes = 0  # how often the thread's wait ended (read by the tests)

    def wait_on(self, attempt: Attempt, interval: float) -> _Waiting:
        waiting = _Waiting(
            attempt_id=attempt.pk,
            fencing_token=attempt.fencing_token,
            reference=attempt.reference,
            interval=interval,
            due=time.monotonic() + interval,
            lost=threading.Event(),
        )
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="holdfast-heartbeats", daemon=True
                )
                self._thread.start()
            self._waiting.add(waiting)
            self._linger = interval
            if waiting.due < self._wakes_at:
                self._cond.notify()
        return waiting

    def done(self, waiting: _Waiting) -> None:
        """The call is over: no renewal of it from now on (the thread is not woken for it)."""
        with self._cond:
            self._waiting.discard(waiting)

    def _due(self) -> list[_Waiting]:
        """Block until some attempt is due. When nobody waits, the thread waits one more
        interval (the next call most likely begins meanwhile, and it need not be woken for
        it); nobody waiting then either, it closes its connection and sleeps until a call."""
        with self._cond:
            idle = False
            while True:
                now = time.monotonic()
                due = [w for w in self._waiting if w.due <= now]
                if due:
                    for waiting in due:
                        waiting.due = now + waiting.interval
                    return due
                if self._waiting:
                    idle = False
                    self._wakes_at = min(w.due for w in self._waiting)
                elif not idle:
                    idle = True
                    self._wakes_at = now + self._linger
                else:
                    connection.close()  # nobody waits: hold no connection while idle
                    self._wakes_at = math.inf
                self._cond.wait(None if self._wakes_at == math.inf else self._wakes_at - now)
                self._wakes_at = -math.inf  # awake: it looks at every call before it waits again
                self.wakes += 1

    def _run(self) -> None:
        while True:
            due = self._due()
            close_old_connections()  # one broken or too old is replaced, as per request
            for waiting in due:
                try:
                    attempt_heartbeat(
                        attempt_id=waiting.attempt_id, fencing_token=waiting.fencing_token
                    )
                except StaleAttempt:
                    waiting.lost.set()
                    self.done(waiting)
                except Exception:  # a boundary: a failed heartbeat is logged, never kills
                    logger.exception("Heartbeat of %s failed", waiting.reference)


_HEARTBEATS = _Heartbeats()
os.register_at_fork(after_in_child=_HEARTBEATS._reset)  # noqa: SLF001 - its own state


@contextlib.contextmanager
def keep_alive(attempt: Attempt) -> Iterator[threading.Event]:
    """Renew the attempt's lease every heartbeat interval while this thread waits on a long call.

    Yields an event that is set if a heartbeat was refused (the lease was lost meanwhile): the
    caller's result is then recorded as late evidence, never acted on as the current owner. A
    paused or killed process stops heartbeating with it, so the lease still bounds it.
    """
    interval = float(settings.LEASES[attempt.kind]["heartbeat_seconds"])
    waiting = _HEARTBEATS.wait_on(attempt, interval)
    try:
        yield waiting.lost
    finally:
        _HEARTBEATS.done(waiting)


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

            record_claim_released(case, attempt, worker)
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
        transaction.on_commit(metrics.lease_expired)
        with log_context(
            case=case.reference,
            operation=attempt.operation.key,
            attempt=attempt.reference,
            fencing_token=attempt.fencing_token,
            worker=watchdog.label,
        ):
            logger.warning("%s (worker %s)", text, attempt.worker)
        record_claim_released(case, attempt, watchdog)
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
