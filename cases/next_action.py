"""'What may happen next', in plain words, derived from a case's state and nothing else."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.utils import timezone

from cases.models import Case, Status, WaitingOn

_HEADLINES = {
    Status.NEW: "New request: verify the customer's account before any work starts.",
    Status.WAITING_SOURCE: "Waiting for the order system: a worker reads the order first.",
    Status.PREPARING_PROPOSAL: "Preparing one exact proposal from the current order evidence.",
    Status.AWAITING_REVIEW: "Waiting for an approver to approve or reject the proposal.",
    Status.READY: "Approved and queued: an authorized worker applies it when its checks hold.",
    Status.APPLYING: "A worker holds the claim and is applying the change now.",
    Status.HELD: (
        "Held: the outcome is not known. Reconcile from the order system's evidence before "
        "anything else is written."
    ),
    Status.NEEDS_ATTENTION: "Needs a person: the workflow cannot continue on its own.",
    Status.DONE: "Done: the change is confirmed at the order system.",
    Status.CANCELLED: "Cancelled: nothing was applied.",
    Status.STOPPED: "Stopped: access or the work context was revoked and the work is settled.",
}

_ACTION_WORDS = {
    "request_source_check": "check the order source again",
    "escalate": "escalate to a person",
    "requeue": "put it back in the apply queue (all guards re-checked)",
    "cancel": "cancel (nothing has been sent yet)",
    "stop": "stop the work",
}

_WHO_FOR_PERMISSION = {
    "cases.work_case": "agents and leads of the team",
    "cases.lead_case": "the team's leads",
    None: "anyone on the team",
}


@dataclass(frozen=True)
class NextAction:
    headline: str
    why_waiting: str
    who_must_answer: str
    follow_up: str
    permitted: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        parts = [self.headline]
        if self.why_waiting:
            parts.append(f"Why: {self.why_waiting}.")
        if self.who_must_answer:
            parts.append(f"Who must answer: {self.who_must_answer}.")
        if self.follow_up:
            parts.append(self.follow_up)
        if self.permitted:
            parts.append("Permitted now: " + "; ".join(self.permitted) + ".")
        return " ".join(parts)


def _person(user) -> str:
    if user is None:
        return "nobody"
    full = user.get_full_name()
    return f"{full} ({user.get_username()})" if full else user.get_username()


def _who_must_answer(case: Case) -> str:
    responsible = case.responsible_now
    if case.waiting_on == WaitingOn.OWNER:
        if case.owner_is_away and case.backup_id:
            return (
                f"{_person(responsible)}, the named backup, while {_person(case.owner)} is away "
                f"until {case.owner.staff_profile.away_until:%Y-%m-%d}"
            )
        return f"{_person(responsible)}, the responsible person"
    if case.waiting_on == WaitingOn.APPROVERS:
        return f"an approver of {case.team} other than the proposal's preparer"
    if case.waiting_on == WaitingOn.NOBODY:
        return ""
    label = WaitingOn(case.waiting_on).label.lower() if case.waiting_on else ""
    return f"{label}; {_person(responsible)} is responsible for following up"


def _follow_up(case: Case, now: dt.datetime) -> str:
    if case.is_terminal:
        if case.retention_until:
            return f"Closed; kept until {case.retention_until:%Y-%m-%d} under the retention policy."
        return ""
    if case.next_check_at is None:
        return "No follow-up time is set."
    when = timezone.localtime(case.next_check_at).strftime("%Y-%m-%d %H:%M %Z")
    if case.next_check_at < now:
        return f"Follow-up is overdue since {when}."
    return f"Next check at {when}."


def _join(first: str, second: str) -> str:
    return f"{first}; {second}" if first else second


def describe_next_action(case: Case, *, now: dt.datetime | None = None) -> NextAction:
    """Explain the case to someone who never saw the original conversation."""
    from cases.services import available_transitions, transition_meta

    now = now or timezone.now()
    permitted = []
    for name in available_transitions(case):
        who = _WHO_FOR_PERMISSION.get(transition_meta(name)["permission"], "the team")
        permitted.append(f"{_ACTION_WORDS.get(name, name)} ({who})")
    why = case.waiting_reason or ""
    if case.outstanding_question:
        why = (
            f"{why}; open question: {case.outstanding_question}"
            if why
            else (f"open question: {case.outstanding_question}")
        )
    if case.last_error and case.status in {Status.NEEDS_ATTENTION, Status.HELD}:
        why = f"{why}; last error: {case.last_error}" if why else f"last error: {case.last_error}"
    if case.revoked_at is not None and not case.is_terminal:
        why = _join(
            why,
            f"authority revoked ({case.revocation_kind}): no new work is admitted "
            "and what was in flight is being settled",
        )
    if case.cancellations.filter(outcome="pending").exists():
        why = _join(
            why,
            "a cancellation request is recorded; it is honoured only once the "
            "order system's evidence shows nothing was applied",
        )
    return NextAction(
        headline=_HEADLINES[Status(case.status)],
        why_waiting=why,
        who_must_answer=_who_must_answer(case),
        follow_up=_follow_up(case, now),
        permitted=permitted,
    )
