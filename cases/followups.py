"""Follow-ups: every case that waits on a person has a time by which that person is late.

The clock is the case's ``follow_up_at`` (with ``follow_up_risk_at``, from when it shows as at
risk, and ``follow_up_reason``). ``next_check_at`` stays the workers' due time: a held case is
looked at again by the workers on their own schedule while its person's clock runs.

Invariants:

- *Every wait on a person has a clock.* The kernel refreshes the clock at every new version of
  a case (``cases.kernel.bump_and_save``), so whichever service moves a case, an open case that
  waits on a person (``PERSON_WAITS``) has ``follow_up_at``; any other case has none. A held
  case the workers are still settling by themselves waits on nobody yet (``cases.held``): its
  clock starts when it becomes a person's (the workers gave up, or may not settle its kind).
- *A clock runs for one wait.* It starts when the case starts to wait on a person for a reason
  (``wait_reason``) and keeps running while the reason stays the same (a retry, a reassignment
  or a fact recorded meanwhile never restarts it); a new reason starts a new clock.
- *The policy decides, once.* The time comes from the follow-up policy of the case's change
  kind and reason (``FollowUpPolicy``; without one for the kind, the one for any kind; without
  either, ``settings.FOLLOW_UP_MINUTES``) when the wait starts; a policy edited later applies to
  waits that start after it.

This module reads only: it imports the models and nothing that writes.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from cases.held import workers_settle
from cases.models import (
    PERSON_WAITS,
    TERMINAL_STATUSES,
    Case,
    FollowUpPolicy,
    Status,
    WaitingOn,
    WaitReason,
)

# The reason a status gives a wait on a person (waits on the customer aside).
_REASON_OF_STATUS: dict[str, WaitReason] = {
    Status.NEW: WaitReason.UNVERIFIED,
    Status.PREPARING_PROPOSAL: WaitReason.DRAFT,
    Status.AWAITING_REVIEW: WaitReason.AWAITING_REVIEW,
    Status.PROPOSAL_REJECTED: WaitReason.REJECTED,
    Status.READY: WaitReason.SUPERVISED,
    Status.HELD: WaitReason.HELD,
    Status.NEEDS_ATTENTION: WaitReason.NEEDS_ATTENTION,
}

CLOCK_FIELDS = ("follow_up_reason", "follow_up_at", "follow_up_risk_at", "follow_up_reminded_at")


def wait_reason(status: str, waiting_on: str) -> str:
    """The reason an open case in ``status`` waiting on ``waiting_on`` waits on a person, or
    '' when it does not (closed, or waiting on a worker, the order system or nobody)."""
    if status in TERMINAL_STATUSES or waiting_on not in PERSON_WAITS:
        return ""
    if waiting_on == WaitingOn.CUSTOMER:
        return WaitReason.CUSTOMER
    return _REASON_OF_STATUS.get(status, WaitReason.OTHER)


def case_wait_reason(case: Case) -> str:
    """The reason ``case`` waits on a person now, or '' — a held case the workers are still
    settling by themselves waits on nobody yet (``cases.held``), whoever it names."""
    if case.status == Status.HELD and workers_settle(case):
        return ""
    return wait_reason(case.status, case.waiting_on)


@dataclass(frozen=True)
class FollowUp:
    """One wait's clock: its reason, when the person is late and from when it is at risk."""

    reason: str
    due_at: dt.datetime
    at_risk_at: dt.datetime


def case_kind(case: Case) -> str:
    """The change kind's code of ``case`` ('' while cases carry none)."""
    return str(getattr(case, "kind", "") or "")


def policy_for(kind: str, reason: str) -> tuple[int, int]:
    """(minutes, at-risk percent) for a wait of ``reason`` on a case of ``kind``: the kind's
    own policy, else the one for any kind, else the settings' default. One query."""
    rows = dict(
        (row_kind, (minutes, percent))
        for row_kind, minutes, percent in FollowUpPolicy.objects.filter(
            reason=reason, kind__in={kind, ""}
        ).values_list("kind", "minutes", "at_risk_percent")
    )
    if kind in rows:
        return rows[kind]
    if "" in rows:
        return rows[""]
    return default_minutes(reason), settings.FOLLOW_UP_AT_RISK_PERCENT


def default_minutes(reason: str) -> int:
    """The settings' follow-up time for a wait of ``reason``: ``APPROVAL_REVIEW_SLA_MINUTES``
    for a review, ``FOLLOW_UP_MINUTES`` for the others."""
    if reason == WaitReason.AWAITING_REVIEW:
        return int(settings.APPROVAL_REVIEW_SLA_MINUTES)
    return int(settings.FOLLOW_UP_MINUTES.get(reason, settings.FOLLOW_UP_MINUTES["other"]))


def follow_up_for(case: Case, reason: str, start: dt.datetime | None = None) -> FollowUp:
    """The clock of a wait of ``reason`` that starts at ``start`` (now), by the policy."""
    start = start or timezone.now()
    minutes, percent = policy_for(case_kind(case), reason)
    span = dt.timedelta(minutes=minutes)
    return FollowUp(
        reason=reason, due_at=start + span, at_risk_at=start + span * (100 - percent) / 100
    )


def follow_up_refresh(case: Case, *, preset: FollowUp | None = None) -> list[str]:
    """Bring the case's clock in line with the wait it is in now (in memory); returns the fields
    it changed, for the caller's save. A wait that goes on keeps its clock; a new one gets the
    policy's (``preset``: the clock the caller already worked out for it, e.g. the review
    deadline it also made the next check); no wait on a person, no clock. No query unless a new
    wait on a person starts."""
    reason = case_wait_reason(case)
    if reason == (case.follow_up_reason or "") and (not reason or case.follow_up_at is not None):
        return []
    if not reason:
        case.follow_up_reason = None
        case.follow_up_at = case.follow_up_risk_at = case.follow_up_reminded_at = None
        return list(CLOCK_FIELDS)
    clock = (
        preset if preset is not None and preset.reason == reason else follow_up_for(case, reason)
    )
    case.follow_up_reason = reason
    case.follow_up_at, case.follow_up_risk_at = clock.due_at, clock.at_risk_at
    case.follow_up_reminded_at = None
    return list(CLOCK_FIELDS)
