"""Reminders: when a person's follow-up time passes, they are told, once per due time.

The sweep (``reconciliation.sweep``) calls :func:`follow_ups_remind_due`. Each reminder is a
kernel step: under the case's row lock it checks that the same clock is still running and has
not been reminded, records the fact ``cases.follow_up.due`` (a new version, as every event),
which notifies the person responsible now (and the approvers who may decide, for a review;
``cases.notify``), and marks the clock reminded. A second sweep, or one racing it, finds it
reminded and does nothing. A new wait gets a new clock, and its own reminder.
"""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from cases.codes import Action
from cases.kernel import Worker, bump_and_save, case_step, record_event
from cases.models import TERMINAL_STATUSES, Case, WaitReason

REMINDER = Worker("system:follow-up")


def follow_ups_remind_due(*, now: dt.datetime | None = None, limit: int = 100) -> int:
    """Remind every open case whose follow-up time has passed and was not reminded yet;
    returns how many were reminded now."""
    now = now or timezone.now()
    due = (
        Case.objects.filter(follow_up_at__lte=now, follow_up_reminded_at__isnull=True)
        .exclude(status__in=TERMINAL_STATUSES)
        .order_by("follow_up_at")
        .values_list("pk", "follow_up_at")[:limit]
    )
    return sum(
        follow_up_remind(case_id=pk, due_at=due_at, now=now)
        for pk, due_at in due
        if due_at is not None  # excluded by the query; narrows the type
    )


def follow_up_remind(*, case_id: int, due_at: dt.datetime, now: dt.datetime | None = None) -> bool:
    """Remind the case's person that its follow-up (due at ``due_at``) passed; False when the
    clock moved on or was reminded meanwhile."""
    now = now or timezone.now()
    with case_step(case_id, actor=REMINDER) as case:
        if (
            case.follow_up_at != due_at
            or case.follow_up_reminded_at is not None
            or case.is_terminal
            or case.follow_up_at > now
        ):
            return False
        case.follow_up_reminded_at = now
        bump_and_save(case, ["follow_up_reminded_at"])
        reason = WaitReason(case.follow_up_reason).label if case.follow_up_reason else "a wait"
        record_event(
            case=case,
            action=Action.FOLLOW_UP_DUE,
            actor=REMINDER,
            reason=f"Follow-up due at {timezone.localtime(due_at):%Y-%m-%d %H:%M %Z} has "
            f"passed: {reason.lower()}",
            detail={"reason": case.follow_up_reason, "due_at": due_at.isoformat()},
        )
    return True
