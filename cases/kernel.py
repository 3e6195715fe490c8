"""The case kernel's one write path: lock -> check -> transition -> bump -> audit.

Every change to a case, in any app, is one *step* built from the pieces here:

1. ``transaction.atomic()`` is opened and the case row is re-read under ``SELECT ... FOR
   UPDATE`` (:func:`lock_case`); :func:`case_step` does both.
2. The actor's permission on the case's team (:func:`require`) and the version the caller saw
   (:func:`check_version`) are checked under that lock; django-fsm-2 does not enforce a
   transition's ``permission=``, so it is checked here explicitly.
3. The state change is made: a transition (:func:`apply_transition`) or plain fields.
4. ``version`` is bumped and the changed fields are saved (:func:`bump_and_save`).
5. Exactly one ``CaseEvent`` is written for the new version (:func:`record_event`;
   :func:`record_fact` does 4 and 5 for a fact that changes no field).

The invariants every step keeps:

- *One event per version bump.* Each ``bump_and_save`` is followed, in the same transaction,
  by exactly one ``record_event``; every event names the version it produced, so the timeline
  and the version counter never disagree.
- *The row lock is held while the hash chain's head is read.* ``record_event`` reads the last
  event's hash and inserts the next link; only the case row lock (taken by ``lock_case``)
  makes those two one step (``cases/audit.py``).
- *Follow-up work is scheduled on commit.* Tasks are queued with
  ``cases.scheduling.enqueue_on_commit`` (``transaction.on_commit``), never run inside the
  step, so a rolled-back step leaves no work behind.

This module imports only the kernel's lower modules (models, exceptions, fencing, scheduling,
rows, validation, audit, followups, notify) and Django: services, actions and the apps above
build on it. What the kernel cannot know itself (which transitions an actor may take now, for
a 409's ``allowed``) is plugged in from above through :func:`set_allowed_now`.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import os
import socket
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from django_fsm import can_proceed

from cases import extensions
from cases.audit import canonical_timestamp, event_hash
from cases.codes import Action
from cases.exceptions import ActionNotPermitted, TransitionRejected, VersionConflict
from cases.followups import FollowUp, follow_up_refresh
from cases.models import (
    TERMINAL_STATUSES,
    Attempt,
    Case,
    CaseEvent,
    Notification,
    Status,
    Team,
    WaitingOn,
)
from cases.notify import notifications_for
from cases.rows import (
    Exists,
    chain_head,
    current,
    insert,
    insert_fields,
    insert_values,
    locked,
    locked_with_head,
    save_fields,
)

# --- actors -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Worker:
    """A non-human actor: a background worker or the system itself. Workers act for the
    system: they pass every permission check, and their label is what the audit records."""

    label: str

    @classmethod
    def current(cls, kind: str = "worker") -> Worker:
        return cls(f"{kind}:{socket.gethostname()}:{os.getpid()}")


SYSTEM: Final = Worker("system")

# A person (``auth.User``: the project keeps Django's user model, no AUTH_USER_MODEL) or a
# worker.
Actor = User | Worker


def actor_label(actor: Actor) -> str:
    """The name the audit records for ``actor``."""
    return actor.label if isinstance(actor, Worker) else actor.get_username()


def user_or_none(actor: Actor) -> User | None:
    """The person behind ``actor`` (for foreign keys to the user), or None for a worker."""
    return None if isinstance(actor, Worker) else actor


def actor_may(
    actor: Actor, perm: str | None, case: Case, *, team_ids: Collection[int] | None = None
) -> bool:
    """Workers act for the system; people need to be active, hold ``perm`` (if given) and be
    members of the case's team (superusers pass).

    ``team_ids`` is the person's teams as :func:`actor_team_ids` read them: a caller deciding
    for many cases at once (a page of rows) reads them once and passes them, and membership is
    then checked against them instead of by one query per case. The answer is the same.
    """
    if isinstance(actor, Worker):
        return True
    if not asks_membership(actor):
        return actor.is_active  # an active superuser passes, an inactive person never
    if perm and not actor.has_perm(perm):
        return False
    if team_ids is not None:
        return case.team_id in team_ids
    return case.team.members.filter(pk=actor.pk).exists()


def asks_membership(actor: Actor) -> bool:
    """Whether :func:`actor_may` asks about ``actor``'s teams: an active person who is not a
    superuser. A worker passes, an inactive person is refused, a superuser passes, without."""
    return not isinstance(actor, Worker) and actor.is_active and not actor.is_superuser


def actor_team_ids(actor: Actor) -> frozenset[int]:
    """The ids of the teams ``actor`` is a member of (one query; none for a worker), for
    :func:`actor_may`'s ``team_ids``."""
    if isinstance(actor, Worker) or actor.pk is None:
        return frozenset()
    return frozenset(Team.objects.filter(members=actor).values_list("pk", flat=True))


def require(actor: Actor, perm: str | None, case: Case, what: str) -> None:
    """Refuse with ``ActionNotPermitted`` unless :func:`actor_may`; ``what`` completes the
    sentence "<actor> may not <what> on <case>"."""
    if not actor_may(actor, perm, case):
        raise ActionNotPermitted(f"{actor_label(actor)} may not {what} on {case.reference}.")


def check_version(case: Case, expected_version: int | None) -> None:
    """Refuse with ``VersionConflict`` when the caller saw another version than the case has
    now (``None``: the caller did not see one, e.g. a worker; nothing is checked)."""
    if expected_version is not None and case.version != expected_version:
        raise VersionConflict(expected=expected_version, current=case.version)


# --- the step ---------------------------------------------------------------------------------


# What a locked case is read with: what permission checks and the case page's rules look at.
CASE_RELATED = ("account", "team", "owner__staff_profile", "backup")


def lock_case(case_or_pk: Case | int, related: tuple[str, ...] = CASE_RELATED) -> Case:
    """Re-read the case under a row lock (PostgreSQL); call inside ``transaction.atomic``.
    ``related``: the rows read with it (a worker's step needs only the account)."""
    pk = case_or_pk.pk if isinstance(case_or_pk, Case) else case_or_pk
    # Written out on PostgreSQL (``cases.rows``): a worker locks a case at every step.
    return locked(Case, pk, related)


def lock_case_at_head(
    case_id: int, related: tuple[str, ...] = CASE_RELATED, *, exists: Exists | None = None
) -> tuple[Case, str | None]:
    """:func:`lock_case`, with the audit chain's head read in the same statement on PostgreSQL
    ("" before the case's first event; None elsewhere: not read): for a step that records its
    events in a :func:`writes_batched` block begun before any other event of its transaction
    (``head=``), so that no event of the step reads the head again. ``exists``: a yes or no
    read under the same lock, set on the case (``cases.rows.Exists``)."""
    case, head, _ = locked_with_head(Case, case_id, related, exists=exists)
    return case, head


def lock_case_at_head_with(
    case_id: int,
    related: tuple[str, ...],
    model: Any,
    pk: Any,
    *,
    exists: Exists | None = None,
) -> tuple[Case, str | None, Any]:
    """:func:`lock_case_at_head`, and ``model``'s row ``pk`` locked after the case's, read in
    the same statement on PostgreSQL (a step's own row under the case, e.g. its operation)."""
    return locked_with_head(Case, case_id, related, also=(model, pk), exists=exists)


@contextmanager
def case_step(
    case_or_pk: Case | int,
    *,
    actor: Actor,
    permission: str | None = None,
    what: str = "",
    expected_version: int | None = None,
    related: tuple[str, ...] = CASE_RELATED,
) -> Iterator[Case]:
    """Open a transaction, lock the case row, check ``permission`` (if given; ``what`` names
    the action in the refusal) and ``expected_version``, and yield the locked case.

    The body makes its change with :func:`apply_transition` / :func:`bump_and_save` +
    :func:`record_event`; it commits when the block ends, and an exception rolls all of it
    back. A check that must come after a look at the locked case (an idempotent no-op that
    ignores the version seen) is left out here and made in the body.
    """
    with transaction.atomic():
        case = lock_case(case_or_pk, related)
        if permission is not None:
            require(actor, permission, case, what)
        check_version(case, expected_version)
        yield case


@dataclass
class _Batch:
    """What :func:`writes_batched` holds back until its block ends."""

    fields: set[str] = field(default_factory=set)
    events: list[CaseEvent] = field(default_factory=list)
    notifications: list[Notification] = field(default_factory=list)
    head: str | None = None  # the chain's head when the block began (None: read it if needed)


_BATCH = "_holdfast_writes_batched"  # the attribute of the locked case that holds its batch


@contextmanager
def writes_batched(case: Case, *, head: str | None = None) -> Iterator[None]:
    """Inside, under the case lock the caller holds: each new version of ``case`` stays in
    memory (:func:`bump_and_save`) and each event is chained in memory (:func:`record_event`);
    when the block ends the case is saved once, with every field any of them changed, and the
    events are inserted in one statement, in order. Only for steps that read neither the
    case's row nor its events back before the block ends (the apply's answer, notification
    and close): what they would read is not written yet. An exception discards the batch with
    the caller's transaction.

    ``head``: the chain's head as read under the caller's lock with no event recorded since
    (:func:`lock_case_at_head`); the block's first event links to it instead of reading it.
    Inside ``cases.rows.writes_held`` the save and the insert wait for the next statement
    (the events' ids come with it), unless notifications need the events' ids at once."""
    if _BATCH in case.__dict__:
        yield  # already batched by an outer block: it writes
        return
    batch = _Batch(head=head)
    setattr(case, _BATCH, batch)
    try:
        yield
    finally:
        delattr(case, _BATCH)
    if batch.fields:
        save_fields(case, sorted(batch.fields))
    insert(batch.events, hold=not batch.notifications)
    _insert_notifications(batch.notifications)


def bump_and_save(case: Case, fields: list[str], *, follow_up: FollowUp | None = None) -> None:
    """Move the case to its next version and save ``fields`` with it (inside
    :func:`writes_batched`: when that block ends). The caller holds the row lock and writes
    exactly one event for the new version next (:func:`record_event`).

    The person's follow-up clock is brought in line with the wait the case is in now
    (``cases.followups.follow_up_refresh``; ``follow_up``: the clock the caller worked out for
    a new wait) and saved with it: whichever service moves a case, a wait on a person has its
    clock and nothing else has one."""
    case.version += 1
    names = {*fields, "version", "updated_at", *follow_up_refresh(case, preset=follow_up)}
    batch: _Batch | None = case.__dict__.get(_BATCH)
    if batch is not None:
        batch.fields.update(names)
        return
    case.save(update_fields=sorted(names))


def event_row(
    *,
    case: Case,
    action: Action,
    actor: Actor,
    reason: str = "",
    from_status: str = "",
    to_status: str = "",
    detail: dict[str, Any] | None = None,
    head: str | None = None,
) -> CaseEvent:
    """The next audit event of ``case``, not saved yet (:func:`record_event` saves it; the claim
    writes it in one statement with the case and the attempt): for the version the case has
    now, linked into the case's hash chain (``cases/audit.py``). The caller holds the case's row
    lock: that lock is what makes reading the chain's head and inserting the next link one step.
    ``head`` is the chain's head when the caller already read it under that same lock (the
    claim reads it with the case); otherwise it is read here.

    ``action`` must be a registered code (``cases.codes.Action``): ``Action(action)`` raises
    ``ValueError`` for any other string before anything is written. The plain stored string
    is what gets saved and hashed, so the chain is the same as before the registry existed."""
    code = Action(action).value
    user = user_or_none(actor)
    fields: dict[str, Any] = {
        "action": code,
        "from_status": from_status,
        "to_status": to_status,
        "reason": reason,
        "actor_label": actor_label(actor),
        "version": case.version,
        "detail": detail or {},
        "created_at": timezone.now(),
    }
    if head is None:
        head = chain_head(case.pk)
    prev_hash = head or ""
    return CaseEvent(
        case=case,
        actor=user,
        prev_hash=prev_hash,
        hash=event_hash(
            case_id=case.pk, actor_id=getattr(user, "pk", None), prev_hash=prev_hash, **fields
        ),
        **fields,
    )


def record_event(
    *,
    case: Case,
    action: Action,
    actor: Actor,
    reason: str = "",
    from_status: str = "",
    to_status: str = "",
    detail: dict[str, Any] | None = None,
    head: str | None = None,
) -> CaseEvent:
    """Append one audit event for the version the case has now, linked into the case's hash
    chain (:func:`event_row`, which says what the caller must hold); inside
    :func:`writes_batched` it is inserted when that block ends."""
    batch: _Batch | None = case.__dict__.get(_BATCH)
    if batch is not None and head is None:
        # The chain's head is the last event held back, or the one the block began at.
        head = batch.events[-1].hash if batch.events else batch.head
    event = event_row(
        case=case,
        action=action,
        actor=actor,
        reason=reason,
        from_status=from_status,
        to_status=to_status,
        detail=detail,
        head=head,
    )
    # Who is told of it, written with it (``cases.notify``): nothing is read when nobody is.
    notifications = notifications_for(case, event)
    if batch is not None:
        batch.events.append(event)
        batch.notifications += notifications
        return event
    event.save(force_insert=True)
    _insert_notifications(notifications)
    return event


def _insert_notifications(notifications: list[Notification]) -> None:
    """Insert the notifications of events that now have their ids."""
    for notification in notifications:
        notification.event_id = notification.event.pk
    insert(notifications)


def record_fact(*, case: Case, action: Action, **event: Any) -> CaseEvent:
    """A fact about the case that is not a status change: it still produces a new version, so
    every event names the version it produced. An unregistered ``action`` is refused before the
    version moves."""
    Action(action)  # raises for an unregistered code
    bump_and_save(case, [])
    return record_event(case=case, action=action, **event)


# --- transitions ------------------------------------------------------------------------------


class Keep(enum.Enum):
    """The type of :data:`KEEP`: "leave this field as it is" where ``None`` means "clear it"."""

    KEEP = "keep"


KEEP: Final = Keep.KEEP

# What each transition means for who must answer next. Services may override per call.
WAITING_AFTER: dict[str, tuple[str, str]] = {
    "request_source_check": (WaitingOn.ORDER_SYSTEM, "Reading the order from the order system"),
    "source_checked": (WaitingOn.WORKER, "Preparing a proposal from current evidence"),
    "source_changed": (WaitingOn.ORDER_SYSTEM, "The order changed; reading it again"),
    "submit_for_review": (WaitingOn.APPROVERS, "A proposal waits for an approver's decision"),
    "approve": (WaitingOn.WORKER, "Approved; queued for an authorized worker"),
    "reject": (WaitingOn.OWNER, "The proposal was rejected: prepare another proposal"),
    "prepare_again": (WaitingOn.OWNER, "Another proposal is being prepared by hand"),
    "revise": (WaitingOn.OWNER, "The intended change changed; a new proposal is needed"),
    "approval_expired": (WaitingOn.APPROVERS, "The approval expired; a fresh decision is needed"),
    "claim": (WaitingOn.WORKER, "A worker is applying the change"),
    "retry_later": (WaitingOn.ORDER_SYSTEM, "The order system was unavailable; retrying later"),
    "hold": (WaitingOn.OWNER, "The outcome is unknown; reconcile from evidence"),
    "hold_for_recovery": (WaitingOn.OWNER, "Restored from backup: reconcile first"),
    "complete": (WaitingOn.NOBODY, ""),
    "settle_absent": (WaitingOn.WORKER, "Proven not applied; queued to apply again"),
    "resume_steps": (WaitingOn.WORKER, "Proven applied; the steps after apply resume"),
    "reopen_for_reversal": (WaitingOn.OWNER, "Reversal proposed: it needs its own approval"),
    "settle_cancelled": (WaitingOn.NOBODY, ""),
    "settle_stopped": (WaitingOn.NOBODY, ""),
    "escalate": (WaitingOn.OWNER, "Needs a person's decision"),
    "requeue": (WaitingOn.WORKER, "Back in the apply queue; every guard is checked again"),
    "cancel": (WaitingOn.NOBODY, ""),
    "stop": (WaitingOn.NOBODY, ""),
}

AllowedNow = Callable[[Case, Actor | None], list[str]]

# Installed by ``cases.actions`` (at import, from ``CasesConfig.ready``): the manual
# transitions an actor may take now. The kernel only uses it to fill a 409's ``allowed``.
_allowed_now: AllowedNow | None = None


def set_allowed_now(hook: AllowedNow) -> None:
    """Install the function that lists the manual transitions permitted now (for an actor)."""
    global _allowed_now
    _allowed_now = hook


def allowed_now(case: Case, actor: Actor | None = None) -> list[str]:
    """The manual transitions permitted on ``case`` now (for ``actor`` if given), as the
    installed hook lists them; none before a hook is installed."""
    return _allowed_now(case, actor) if _allowed_now is not None else []


def apply_transition(
    case: Case,
    name: str,
    *,
    actor: Actor,
    reason: str,
    detail: dict[str, Any] | None = None,
    waiting: tuple[str, str] | None = None,
    next_check_at: dt.datetime | None | Keep = KEEP,
    head: str | None = None,
    follow_up: FollowUp | None = None,
    **changes: Any,
) -> CaseEvent:
    """Run transition ``name`` on a case locked by the caller, bump its version, save it and
    write its one event; refuse with ``TransitionRejected`` (listing what is allowed now) when
    the transition's guards do not hold.

    ``changes`` are extra field values saved with the transition; ``next_check_at=KEEP`` (the
    default) leaves the next check alone, ``None`` clears it; ``head`` as for
    :func:`record_event`; ``follow_up`` as for :func:`bump_and_save`. A terminal status closes the
    case: its closing time and retention date are set and its follow-up is cleared.
    """
    method = getattr(case, name)
    if not can_proceed(method):
        raise TransitionRejected(
            f"{case.reference} is {case.get_status_display().lower()}: "
            f"'{name}' is not allowed now.",
            allowed=allowed_now(case, actor),
        )
    from_status = case.status
    method()
    waiting_on, waiting_reason = waiting or WAITING_AFTER.get(name, (WaitingOn.NOBODY, ""))
    case.waiting_on, case.waiting_reason = waiting_on, waiting_reason[:200]
    fields = ["status", "waiting_on", "waiting_reason", *changes]
    for attribute, value in changes.items():
        setattr(case, attribute, value)
    if not isinstance(next_check_at, Keep):
        case.next_check_at = next_check_at
        fields.append("next_check_at")
    if case.status in TERMINAL_STATUSES:
        case.closed_at = timezone.now()
        case.retention_until = timezone.localdate() + dt.timedelta(
            days=settings.CASE_RETENTION_DAYS
        )
        case.next_check_at = None
        fields += ["closed_at", "retention_until", "next_check_at"]
    bump_and_save(case, fields, follow_up=follow_up)
    event = record_event(
        case=case,
        action=Action.CASE_TRANSITIONED,
        actor=actor,
        reason=reason,
        from_status=from_status,
        to_status=case.status,
        detail={"transition": name, **(detail or {})},
        head=head,
    )
    if case.status in extensions.CLOSED_UNAPPLIED:
        extensions.on_closed_unapplied(
            case, f"{case.reference} was {case.get_status_display().lower()}: {reason}"
        )
    return event


# --- the claim's compare-and-set ------------------------------------------------------------

# What a won claim changes on the case: the ``claim`` transition its caller made in memory.
CLAIMED_FIELDS = (
    "status",
    "version",
    "waiting_on",
    "waiting_reason",
    "next_check_at",
    "updated_at",
)


def claim_transition(case: Case, *, next_check_at: dt.datetime, now: dt.datetime) -> int:
    """The claim's transition ready → applying on the case the claim read under its lock, made
    in memory (the next version, a worker's wait, the next check) for :func:`claim_write` to
    write as one compare-and-set. Returns the version the claim read."""
    version = case.version
    case.claim()
    case.version = version + 1
    case.waiting_on, case.waiting_reason = WAITING_AFTER["claim"]
    case.next_check_at, case.updated_at = next_check_at, now
    return version


def claim_write(case: Case, version: int, attempt: Attempt, event: CaseEvent) -> bool:
    """Write a won claim (``reconciliation.claims``): the case's move ready → applying, made in
    memory by the caller (``case.claim()``, the next version, its wait and next check), as a
    compare-and-set on ``ready`` and the ``version`` the claim read; with it the new attempt and
    the claim's event (:func:`event_row`, chained under the lock the claim's read took). Whether
    the case moved; a refused insert raises ``IntegrityError`` and ends the caller's transaction.

    The kernel is the one writer of a case's status and of its events: this is that write for
    the claim, the hot path's one step, as the ORM's three statements. PostgreSQL claims in one
    statement instead, read and write together (:func:`pg_claim_statement`);
    ``tests/reconciliation/test_hot_path.py`` checks both write the same."""
    moved = Case.objects.filter(pk=case.pk, status=Status.READY, version=version).update(
        **{name: getattr(case, name) for name in CLAIMED_FIELDS}
    )
    if not moved:
        return False
    attempt.save(force_insert=True)
    event.save(force_insert=True)
    return True


def _case_field(name: str) -> Any:
    return Case._meta.get_field(name)


def claim_event_words(
    *,
    attempt_reference: str,
    operation_key: str,
    token: int,
    worker: str,
    approval: str | None,
    lease_expires_at: dt.datetime,
) -> tuple[str, dict[str, Any]]:
    """The claim's event's reason and detail (:func:`event_row` takes them); the one-statement
    claim writes the same, as SQL (:func:`pg_claim_statement`)."""
    reason = f"{attempt_reference} claimed {operation_key} (token {token})"
    return reason, {
        "attempt": attempt_reference,
        "operation_key": operation_key,
        "fencing_token": token,
        "worker": worker,
        "approval": approval,
        "lease_expires_at": lease_expires_at.isoformat(),
    }


# The columns of the attempt and the claim's event that the one-statement claim writes from what
# it read (``pg_claim_statement``); the others are parameters (``pg_claim_params``).
_CLAIM_FROM_READ: dict[Any, frozenset[str]] = {
    Attempt: frozenset(
        {"case_id", "operation_id", "reference", "sequence", "started_by_id", "fencing_token"}
    ),
    CaseEvent: frozenset({"case_id", "version", "reason", "detail", "prev_hash", "hash"}),
}

# The columns the caller's ``claim_ok`` gives the one-statement claim (``pg_claim_statement``).
CLAIM_READ_COLUMNS = (
    "hf_case",  # the case's id
    "hf_version",  # the version the claim read
    "hf_reference",  # the case's reference (D-41)
    "hf_operation",  # the operation's id
    "hf_key",  # the operation's key
    "hf_started_by",  # who started a supervised apply (``apply_authorized_by``), or NULL
    "hf_token",  # the fencing token the read took from the sequence
    "hf_sequence",  # the new attempt's sequence
    "hf_head",  # the audit chain's head hash, NULL before the first event
    "hf_approval",  # the live approval's reference, or NULL
)


# How the one-statement claim's commit waits for the disk (``pg_claim_statement``): a claim that
# is its own transaction does not (``off`` for that transaction alone); inside a caller's
# transaction the claim leaves the caller's commit as it is, and says which it is.
_CLAIM_OWN_COMMIT: Final = "set_config('synchronous_commit', 'off', true)"
_CLAIM_CALLERS_COMMIT: Final = "current_setting('synchronous_commit')"


@functools.cache
def pg_claim_statement(reads: str, *, own_commit: bool) -> str:
    """PostgreSQL: the whole claim as one statement: the caller's read and guards, then, only
    for a row they let through, the claim's write as :func:`claim_write` makes it (the case's
    compare-and-set ready → applying, the attempt, the claim's event, its hash computed by the
    server, ``cases.audit.hash_sql``). One round trip and, outside a transaction, one commit
    (``make bench``'s goal 4: 0.30–0.34× the raw claim, against 0.26–0.29× as two statements in
    a transaction of their own; run with numbered placeholders, ``cases.rows.fetchone_named``,
    and :func:`pg_claim_params`'s values kept per worker, 0.43–0.54×).

    ``reads`` are the caller's CTEs (``WITH`` left out), ending with ``claim_read``, the row
    read (its columns in the caller's order), and ``claim_ok``, that row when every guard holds,
    else none, with :data:`CLAIM_READ_COLUMNS` among its columns by name. The statement returns
    ``claim_read``'s columns, then ``synchronous_commit`` as its commit will have it, then the
    attempt's id and the event's (NULL: nothing written). Its parameters are named;
    :func:`pg_claim_params` gives the write's.

    ``own_commit``: the statement is its own transaction (autocommit), and its commit does not
    wait for the write-ahead log to reach the disk (``synchronous_commit`` off for that
    transaction alone: 0.3 ms of a 1.4 ms claim on this machine). Nothing outside the database
    follows a claim before the worker's next commit, which waits (``apply._mark_submitting``
    before the order system's write; the notification's start before a mail): that flush
    carries every earlier record of the log, the claim's with it. A claim lost with the
    database's last moments before that commit is a claim never made: the case is ready again,
    its token never used (``tests/reconciliation/test_hot_path.py`` holds the order)."""
    from cases.audit import Sql, hash_sql

    ok = "claim_ok"
    reference = f"({ok}.hf_reference || '-a' || {ok}.hf_sequence)"
    reason = f"({reference} || ' claimed ' || {ok}.hf_key || ' (token ' || {ok}.hf_token || ')')"
    detail = {
        "attempt": Sql("text", reference),
        "operation_key": Sql("text", f"{ok}.hf_key"),
        "fencing_token": Sql("int", f"{ok}.hf_token"),
        "worker": Sql("text", "%(h_actor_label)s"),
        "approval": Sql("text", f"{ok}.hf_approval"),
        "lease_expires_at": Sql("text", "%(h_lease_iso)s"),
    }
    # Stored as Python stores it: the same keys and values (the order of keys is jsonb's own).
    detail_json = (
        "jsonb_build_object("
        + ", ".join(
            f"'{key}', ({value.expr})" + ("::text" if value.kind == "text" else "::bigint")
            for key, value in detail.items()
        )
        + ")"
    )
    document = {
        "action": Sql("text", "%(h_action)s"),
        "actor_id": Sql("int", "%(h_actor_id)s"),
        "actor_label": Sql("text", "%(h_actor_label)s"),
        "case_id": Sql("int", f"{ok}.hf_case"),
        "created_at": Sql("text", "%(h_created_iso)s"),
        "detail": Sql("object", fields=detail),
        "from_status": Sql("text", "%(h_from_status)s"),
        "reason": Sql("text", reason),
        "to_status": Sql("text", "%(h_to_status)s"),
        "version": Sql("int", f"{ok}.hf_version + 1"),
    }
    from_read = {
        Attempt: {
            "case_id": f"{ok}.hf_case",
            "operation_id": f"{ok}.hf_operation",
            "reference": reference,
            "sequence": f"{ok}.hf_sequence",
            "started_by_id": f"{ok}.hf_started_by",
            "fencing_token": f"{ok}.hf_token",
        },
        CaseEvent: {
            "case_id": f"{ok}.hf_case",
            "version": f"{ok}.hf_version + 1",
            "reason": reason,
            "detail": detail_json,
            "prev_hash": f"COALESCE({ok}.hf_head, '')",
            "hash": hash_sql(document, f"COALESCE({ok}.hf_head, '')"),
        },
    }

    assert {m: frozenset(v) for m, v in from_read.items()} == _CLAIM_FROM_READ  # noqa: S101

    def insert_from(model: Any, prefix: str, source: str) -> str:
        fields = insert_fields(model)
        names = ", ".join(f'"{f.column}"' for f in fields)
        values = ", ".join(
            from_read[model].get(f.attname, f"%({prefix}_{f.attname})s") for f in fields
        )
        return (
            f'INSERT INTO "{model._meta.db_table}" ({names}) '  # noqa: S608 - model metadata
            f'SELECT {values} FROM {source} RETURNING "id"'
        )

    table = Case._meta.db_table  # the WHERE's and RETURNING's
    sets = ", ".join(
        f'"{_case_field(name).column}" = %(c_{name})s'
        for name in CLAIMED_FIELDS
        if name not in {"status", "version"}
    )
    claimed = (
        f'UPDATE "{Case._meta.db_table}" SET "status" = \'{Status.APPLYING.value}\', '  # noqa: S608
        f'"version" = {ok}.hf_version + 1, {sets} FROM {ok} '
        f'WHERE "{table}"."id" = {ok}.hf_case AND "{table}"."status" = '
        f'\'{Status.READY.value}\' AND "{table}"."version" = {ok}.hf_version '
        f'RETURNING "{table}"."id"'
    )
    attempt = insert_from(Attempt, "a", f"{ok} JOIN claimed ON claimed.id = {ok}.hf_case")
    event = insert_from(CaseEvent, "e", f"{ok}, attempt")
    return (
        f"WITH {reads}, claimed AS ({claimed}), attempt AS ({attempt}), "  # noqa: S608 - metadata
        f"event AS ({event}) "
        f"SELECT claim_read.*, {_CLAIM_OWN_COMMIT if own_commit else _CLAIM_CALLERS_COMMIT}, "
        "(SELECT id FROM attempt), (SELECT id FROM event) FROM claim_read"
    )


# The write's values that are the claim's time (``now``, or ``lease``: when the lease runs out):
# every other value :func:`pg_claim_params` gives depends on the worker and the kind alone.
_CLAIM_TIMES: Final = {
    "c_next_check_at": "lease",  # the watchdog's look: when the lease runs out unrenewed
    "c_updated_at": "now",
    "a_claimed_at": "now",
    "a_lease_expires_at": "lease",
    "a_heartbeat_at": "now",
    "e_created_at": "now",
    "h_created_iso": "now",
    "h_lease_iso": "lease",
}


def pg_claim_params(
    *, worker: Worker, kind: str, now: dt.datetime, lease: dt.datetime
) -> dict[str, Any]:
    """The values :func:`pg_claim_statement`'s write takes from the worker, not from the read:
    the case's wait and next check, the attempt's and the event's other columns. Those that do
    not depend on the time are worked out once per worker and kind (building them through the
    models was a tenth of a claim); :func:`claim_params_at` is the whole of it."""
    db = current()
    params = dict(_claim_constants(worker, kind, db.alias))
    params.update(_claim_times(db, now=now, lease=lease))
    return params


@functools.lru_cache(maxsize=256)
def _claim_constants(worker: Worker, kind: str, alias: str) -> dict[str, Any]:
    """:func:`claim_params_at` without the times, checked: at two different times, the values
    that differ are exactly :data:`_CLAIM_TIMES`'s (a new column that takes the time and is not
    named there fails here, before any claim is written with a stale value)."""
    from django.db import connections

    db = connections[alias]
    first = dt.datetime(2001, 1, 1, tzinfo=dt.UTC)
    second = first + dt.timedelta(days=1, seconds=1, microseconds=1)
    at_first = claim_params_at(db, worker=worker, kind=kind, now=first, lease=first)
    at_second = claim_params_at(db, worker=worker, kind=kind, now=second, lease=second)
    varying = {name for name in at_first if at_first[name] != at_second[name]}
    if varying != set(_CLAIM_TIMES) or set(at_first) != set(at_second):
        raise AssertionError(f"The claim's time-dependent values are {sorted(varying)}")
    return {name: value for name, value in at_first.items() if name not in _CLAIM_TIMES}


def _claim_times(db: Any, *, now: dt.datetime, lease: dt.datetime) -> dict[str, Any]:
    """The values of :data:`_CLAIM_TIMES`, as :func:`claim_params_at` converts them."""
    at = {"now": now, "lease": lease}
    values: dict[str, Any] = {}
    for name, which in _CLAIM_TIMES.items():
        prefix, attname = name.split("_", 1)
        value = at[which]
        if prefix == "h":
            values[name] = canonical_timestamp(value) if which == "now" else value.isoformat()
            continue
        model: Any = {"c": Case, "a": Attempt, "e": CaseEvent}[prefix]
        field: Any = model._meta.get_field(attname)  # a concrete column: a Field, not a relation
        values[name] = field.get_db_prep_save(value, db)
    return values


def claim_params_at(
    db: Any, *, worker: Worker, kind: str, now: dt.datetime, lease: dt.datetime
) -> dict[str, Any]:
    """All of :func:`pg_claim_params`'s values, worked out through the models each time."""
    waiting_on, waiting_reason = WAITING_AFTER["claim"]
    case_values = {
        "waiting_on": waiting_on,
        "waiting_reason": waiting_reason,
        "next_check_at": lease,  # the watchdog's look: when the lease runs out unrenewed
        "updated_at": now,
    }
    attempt = Attempt(
        kind=kind,
        worker=worker.label,
        claimed_at=now,
        lease_expires_at=lease,
        heartbeat_at=now,
    )
    event = CaseEvent(
        action=Action.CASE_CLAIMED.value,
        from_status=Status.READY,
        to_status=Status.APPLYING,
        actor=user_or_none(worker),
        actor_label=actor_label(worker),
        created_at=now,
    )
    params: dict[str, Any] = {
        f"c_{name}": _case_field(name).get_db_prep_save(value, db)
        for name, value in case_values.items()
    }
    for prefix, instance in (("a", attempt), ("e", event)):
        from_read = _CLAIM_FROM_READ[type(instance)]
        written = zip(insert_fields(type(instance)), insert_values(instance, db), strict=True)
        for f, value in written:
            if f.attname not in from_read:
                params[f"{prefix}_{f.attname}"] = value
    # The hash's and the detail's own (``h_…``): a parameter is one type in a statement, and
    # the columns' types (varchar, integer) are not the text and bigint the hash writes out.
    params.update(
        h_action=event.action,
        h_actor_id=event.actor_id,
        h_actor_label=event.actor_label,
        h_from_status=event.from_status,
        h_to_status=event.to_status,
        h_created_iso=canonical_timestamp(now),
        h_lease_iso=lease.isoformat(),
    )
    return params
