"""``transient_failure_record``: the one writer of a transient failure of a case's work.

A transient failure (nothing was changed; trying again may succeed) of ``apply``,
``source_check`` or ``reconcile`` counts one more consecutive failure *of that kind*
(``cases.retries``), then either schedules the next try on the kind's bounded backoff or —
on the failure that reaches the kind's limit — gives up to the one destination: **a person**.
The case waits on its owner, with the last error and the count in plain words:

- where a person's decision is a status (``escalate`` is allowed: the source check, the
  apply), the case goes to *needs attention*;
- a held case stays *held* (``reconcile``): its outcome is unknown, and uncertainty is never
  turned into a write. It is flagged for a person (waiting on the owner, no automatic next
  check) who settles it from evidence (``case_settle_manually``) or asks again.

Inbound events keep their counter on the event row (``reconciliation.inbound``) and use the
``inbound`` policy's bound and backoff.

The caller holds the case's row lock; everything is written in its transaction.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone
from django_fsm import can_proceed

from cases.codes import Action
from cases.kernel import Actor, apply_transition, bump_and_save, record_event
from cases.models import Case, Status, WaitingOn
from cases.retries import RetryPolicy, retries_count_one_more, retry_failures, retry_policy


@dataclass(frozen=True)
class Words:
    """What the timeline and the case page say. Templates, formatted with ``error`` (the last
    error in plain words), ``failures``, ``limit``, ``next_try`` (failures + 1), ``next_time``
    (``%H:%M:%S``) and ``next_check`` (``%Y-%m-%d %H:%M:%S``) of the next try."""

    reason: str
    waiting: str


@dataclass(frozen=True)
class RetryOutcome:
    """What a transient failure led to: the ``failures``-th of ``limit`` of ``kind``; given up
    to a person, or tried again at ``next_check_at`` (on a give-up: the next permitted check
    named, or None)."""

    kind: str
    failures: int
    limit: int
    gave_up: bool
    next_check_at: dt.datetime | None
    revoked_approvals: list[str] = field(default_factory=list)

    @property
    def code(self) -> str:
        return "needs_attention" if self.gave_up else "retry_scheduled"


def literal(text: str) -> str:
    """``text`` as it stands inside a :class:`Words` template (its braces are not fields)."""
    return text.replace("{", "{{").replace("}", "}}")


_GIVE_UP = Words(
    reason="Gave up after {failures} consecutive failures: {error}",
    waiting="Tried {failures} times without success: a person decides",
)


def transient_failure_record(
    *,
    case: Case,
    kind: str,
    error: str | Callable[[int], str],
    actor: Actor,
    retry: Words,
    give_up: Words = _GIVE_UP,
    retry_after: float | None = None,
    detail: dict[str, Any] | Callable[[int], dict[str, Any]] | None = None,
    retry_transition: str | None = None,
    retry_event: Action | None = None,
    retry_waiting_on: str = WaitingOn.ORDER_SYSTEM,
) -> RetryOutcome:
    """Record one more transient failure of ``kind`` on ``case`` (locked by the caller).

    ``error`` is the last error in plain words (or makes them from the failure count). Below
    the limit the next try is scheduled: with ``retry_transition`` when the kind's retry is a
    status change (the apply: ``retry_later``), otherwise in place with the event
    ``retry_event``; either way waiting on ``retry_waiting_on`` with ``retry.waiting``. At the
    limit the case goes to a person (see the module). ``detail`` is the event's (or makes it
    from the failure count); the count, the limit, the last error and the next check are added
    to it."""
    policy = retry_policy(kind)
    failures = retry_failures(case, kind) + 1
    text = error(failures) if callable(error) else error
    next_at = policy.next_try_at(failures, retry_after=retry_after)
    words = {
        # Set inside sentences ("Last error: {error}. …"): its own full stop would double.
        "error": text.rstrip(". "),
        "failures": failures,
        "checks": "1 check" if failures == 1 else f"{failures} checks",
        "limit": policy.limit,
        "next_try": failures + 1,
        "next_time": f"{timezone.localtime(next_at):%H:%M:%S}",
        "next_check": f"{timezone.localtime(next_at):%Y-%m-%d %H:%M:%S}",
    }
    detail = {
        **((detail(failures) if callable(detail) else detail) or {}),
        "failures": failures,
        "attempt_limit": policy.limit,
        "last_error": text,
        "next_check_at": next_at.isoformat(),
    }
    held = case.status == Status.HELD
    if policy.gives_up(failures) and (held or can_proceed(case.escalate)):
        return _give_up(case, policy, actor, failures, text, next_at, give_up, words, detail)
    counters = retries_count_one_more(case, kind)
    waiting = (retry_waiting_on, retry.waiting.format(**words))
    if retry_transition is not None:
        apply_transition(
            case,
            retry_transition,
            actor=actor,
            reason=retry.reason.format(**words),
            detail=detail,
            waiting=waiting,
            next_check_at=next_at,
            last_error=text,
            **counters,
        )
    else:
        case.next_check_at = next_at
        case.last_error = text
        case.waiting_on, case.waiting_reason = waiting[0], waiting[1][:200]
        bump_and_save(
            case, [*counters, "next_check_at", "last_error", "waiting_on", "waiting_reason"]
        )
        if retry_event is None:
            raise TypeError("a retry in place (no retry_transition) names its retry_event")
        record_event(
            case=case,
            action=retry_event,
            actor=actor,
            reason=retry.reason.format(**words),
            detail=detail,
        )
    return RetryOutcome(kind, failures, policy.limit, False, next_at)


def _give_up(
    case: Case,
    policy: RetryPolicy,
    actor: Actor,
    failures: int,
    text: str,
    next_at: dt.datetime,
    words_of: Words,
    words: dict[str, Any],
    detail: dict[str, Any],
) -> RetryOutcome:
    """The one destination: a person. Needs attention where that is a status; a held case
    stays held, flagged."""
    counters = retries_count_one_more(case, policy.kind)
    next_check = next_at if policy.names_next_check else None
    reason = words_of.reason.format(**words)
    waiting = (WaitingOn.OWNER, words_of.waiting.format(**words))
    revoked: list[str] = []
    detail = {**detail, "next_check_at": next_check.isoformat() if next_check else None}
    if case.status == Status.HELD:
        case.next_check_at = next_check
        case.last_error = text
        case.waiting_on, case.waiting_reason = waiting[0], waiting[1][:200]
        bump_and_save(
            case, [*counters, "next_check_at", "last_error", "waiting_on", "waiting_reason"]
        )
        record_event(
            case=case,
            action=Action.RETRIES_EXHAUSTED,  # held, flagged for a person
            actor=actor,
            reason=reason,
            detail={**detail, "retry_kind": policy.kind},
        )
        return RetryOutcome(policy.kind, failures, policy.limit, True, next_check)
    if policy.withdraws_proposals:
        from approvals.services import proposals_withdraw_open

        revoked = proposals_withdraw_open(case, f"Escalated: {text}")
        detail = {**detail, "revoked_approvals": revoked}
    apply_transition(
        case,
        "escalate",
        actor=actor,
        reason=reason,
        detail=detail,
        waiting=waiting,
        next_check_at=next_check,
        last_error=text,
        **counters,
    )
    return RetryOutcome(policy.kind, failures, policy.limit, True, next_check, revoked)
