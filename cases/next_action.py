"""'What may happen next', in plain words, derived from a case's state and nothing else.

The permitted actions come from ``cases.actions.case_actions``, the same list the admin's buttons
and the API's ``allowed_transitions`` come from. A finished case reads as finished: no reason to
wait, nobody to answer, no follow-up.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from cases.actions import case_actions, who_may
from cases.extensions import case_deciders
from cases.held import held_waits_on_person, workers_settle
from cases.models import Case, FollowUpState, Status, WaitingOn, overdue_cutoff

_HEADLINES = {
    Status.NEW: "New request: verify the customer's account before any work starts.",
    Status.WAITING_SOURCE: "Waiting for the order system: a worker reads the order first.",
    Status.PREPARING_PROPOSAL: "Preparing one exact proposal from the current order evidence.",
    Status.AWAITING_REVIEW: "Waiting for an approver to approve or reject the proposal.",
    Status.PROPOSAL_REJECTED: (
        "Rejected: the responsible person prepares another proposal (or cancels the request); "
        "no worker acts on it."
    ),
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

NOTHING_BY_HAND = "Nothing by hand: the workflow or a worker acts next."
FINISHED = "Nothing: the case is finished."


@dataclass(frozen=True)
class NextAction:
    headline: str
    why_waiting: str
    who_must_answer: str
    follow_up: str
    permitted: list[str] = field(default_factory=list)
    finished: bool = False
    overdue: bool = False
    at_risk: bool = False
    # The status as the page names it (``status_label``).
    status: str = ""
    # The case waits on a person's answer (its owner, its approvers, or one who must settle
    # it), not on a worker or the order system.
    waits_on_a_person: bool = False

    @property
    def permitted_text(self) -> str:
        if self.permitted:
            return "; ".join(self.permitted)
        if self.finished:
            return FINISHED
        if self.waits_on_a_person and self.who_must_answer:
            # Not "the workflow acts next": it cannot, and this viewer may not answer for it.
            return f"Nothing for you to do here: it waits on {self.who_must_answer}."
        return NOTHING_BY_HAND

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


def person(user) -> str:
    if user is None:
        return "nobody"
    full = user.get_full_name()
    return f"{full} ({user.get_username()})" if full else user.get_username()


def away_until(user) -> dt.date | None:
    """The last day ``user`` is away, while they are; else None."""
    profile = getattr(user, "staff_profile", None)
    return profile.away_until if profile is not None and profile.is_away() else None


def person_here_or_away(user) -> str:
    """:func:`person`, with the last day of their absence while they are away."""
    until = away_until(user)
    if until is None:
        return person(user)
    full = user.get_full_name()
    away = f"away until {until:%Y-%m-%d}"
    return f"{full} ({user.get_username()}, {away})" if full else f"{user.get_username()} ({away})"


def _names(people, *, name=person) -> str:
    people = [name(p) for p in people]
    if not people:
        return ""
    if len(people) == 1:
        return people[0]
    return ", ".join(people[:-1]) + f" or {people[-1]}"


def _approvers(case: Case) -> str:
    """The people who may decide the proposal awaiting review (never its preparer), by the
    registered provider's rule (``cases.extensions.case_deciders``: approvals' own)."""
    deciders = case_deciders(case)
    if deciders is None:
        return f"an approver of {case.team} other than the proposal's preparer"
    names = _names(deciders, name=person_here_or_away)
    if not names:
        return f"nobody yet: {case.team} has no approver other than the proposal's preparer"
    if all(away_until(p) is not None for p in deciders):
        # Their cases fall to their backups, but a decision is nobody's backup's: say so.
        return (
            f"{names}; everyone who may decide is away. When the follow-up passes, "
            f"{person(case.responsible_now)} is reminded too"
        )
    return names


def _who_must_answer(case: Case) -> str:
    responsible = case.responsible_now
    absence = ""
    if case.owner_is_away and case.backup_id:
        absence = (
            f", the named backup, while {person(case.owner)} is away until "
            f"{case.owner.staff_profile.away_until:%Y-%m-%d}"
        )
    if case.status == Status.HELD:
        who = f"{person(responsible)}{absence or ', the responsible person'}"
        if workers_settle(case):
            limit = settings.RECONCILE_ATTEMPT_LIMIT
            return (
                f"nobody yet: the workers settle it themselves; {who}, settles it from the "
                f"evidence only if it is still unknown after {limit} checks"
            )
        return f"{who}, must settle it from the order system's evidence"
    if case.waiting_on == WaitingOn.OWNER:
        return f"{person(responsible)}{absence or ', the responsible person'}"
    if case.waiting_on == WaitingOn.APPROVERS or case.status == Status.AWAITING_REVIEW:
        return f"{_approvers(case)}; {person(responsible)} is responsible for following up"
    if case.waiting_on == WaitingOn.NOBODY:
        return ""
    label = WaitingOn(case.waiting_on).label.lower() if case.waiting_on else ""
    return f"{label}; {person(responsible)} is responsible for following up"


def status_label(case: Case) -> str:
    """The status as the case page names it: the status's own label, except that a held case
    says who settles it now (the workers, on their schedule, or a person)."""
    if workers_settle(case):
        return "Held: the workers are reconciling it"
    if case.status == Status.HELD:
        return "Held: a person must settle it"
    if case.status == Status.READY and not case.nothing_applied():
        # Its change is applied: "Ready to apply" read as if it were still to be sent.
        return "Applied: finishing the steps after it"
    return case.get_status_display()


def _held_look(case: Case) -> str:
    """For a held case the workers settle: their next look and which check it is."""
    assert case.next_check_at is not None  # noqa: S101 - the caller checked
    failures = int((case.retry_counts or {}).get("reconcile", 0))
    limit = settings.RECONCILE_ATTEMPT_LIMIT
    return (
        f"The workers look again at {_when(case.next_check_at)} (check {failures + 1} of "
        f"{limit}: fence the order, then read the operation by its key)."
    )


def _when(moment: dt.datetime) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M %Z")


def _person_clock(case: Case, now: dt.datetime) -> tuple[str, bool]:
    """The follow-up of a wait on a person: by when they must answer, at risk, overdue."""
    assert case.follow_up_at is not None  # noqa: S101 - the caller checked
    when = _when(case.follow_up_at)
    state = case.follow_up_state(now)
    if state == FollowUpState.OVERDUE:
        text = f"Follow-up is overdue since {when}."
    elif case.follow_up_at <= now:
        text = f"Follow-up due now (since {when}); overdue after a short grace."
    elif state == FollowUpState.AT_RISK:
        text = f"At risk: the follow-up is due at {when}."
    elif case.status == Status.AWAITING_REVIEW:
        text = f"The approvers should decide by {when}."
    else:
        text = f"Follow up by {when}."
    if workers_settle(case):
        text += " " + _held_look(case)
    return text, state == FollowUpState.OVERDUE


def _follow_up(case: Case, now: dt.datetime) -> tuple[str, bool]:
    if case.follow_up_at is not None:
        return _person_clock(case, now)
    if case.next_check_at is None:
        return "No follow-up time is set.", False
    when = _when(case.next_check_at)
    if workers_settle(case):
        # No person's clock runs (``cases.held``): the workers' own next look is the time.
        late = case.next_check_at < overdue_cutoff(now)
        return _held_look(case) + (" That look is overdue." if late else ""), late
    if case.next_check_at < overdue_cutoff(now):
        return f"Follow-up is overdue since {when}.", True
    if case.next_check_at <= now:
        return f"Due now (since {when}); a worker picks it up within minutes.", False
    if case.status == Status.AWAITING_REVIEW:
        return f"The approvers should decide by {when}.", False
    return f"Next check at {when}.", False


def _join(first: str, second: str) -> str:
    return f"{first}; {second}" if first else second


def _approval_lapsed(case: Case) -> str:
    """The reference of the approval that authorized the case's unconfirmed operation and has
    expired, or '' (read through the case's relations: the kernel imports no approvals code)."""
    proposals = case.proposals.filter(status="approved", operation__confirmed_at__isnull=True)
    proposal = proposals.first()
    if proposal is None:
        return ""
    approvals = proposal.approvals.filter(decision="approved", revoked_at__isnull=True)
    if approvals.filter(expires_at__gt=timezone.now()).exists():
        return ""
    lapsed = approvals.order_by("-expires_at").first()
    return lapsed.reference if lapsed else ""


def _why(case: Case) -> str:
    why = case.waiting_reason or ""
    if case.outstanding_question:
        why = _join(why, f"open question: {case.outstanding_question}")
    if case.status == Status.WAITING_SOURCE and case.retry_count:
        why = _join(
            why,
            f"{case.retry_count} failed source check{'s' if case.retry_count != 1 else ''} in a "
            f"row (a person is asked after {settings.SOURCE_CHECK_ATTEMPT_LIMIT})",
        )
    error = error_words(case.last_error)
    if (
        error
        and case.status in {Status.NEEDS_ATTENTION, Status.HELD}
        # Not twice: the waiting reason often is the error itself.
        and error.rstrip(".") not in why
    ):
        why = _join(why, f"last error: {error}")
    if case.status == Status.HELD and (lapsed := _approval_lapsed(case)):
        why = _join(
            why,
            f"{lapsed} expired during the hold: no new application under it; if the evidence "
            "shows nothing was applied, the proposal goes back for a fresh decision",
        )
    if case.revoked_at is not None:
        why = _join(
            why,
            f"authority revoked ({case.revocation_kind}): no new work is admitted "
            "and what was in flight is being settled",
        )
    if case.has_pending_cancellation():
        why = _join(
            why,
            "a cancellation request is recorded; it is honoured only once the "
            "order system's evidence shows nothing was applied",
        )
    return why


def _finished(case: Case, permitted: list[str]) -> NextAction:
    """A done, cancelled or stopped case: what happened, and what (if anything) is left."""
    from cases.actions import get_action

    headline = _HEADLINES[Status(case.status)]
    why = ""
    told = get_action("customer_told")
    if told is not None and told.available(case):
        late = case.has_late_cancellation() or case.revoked_at is not None
        why = (
            "The change is applied although "
            + (
                "the customer asked to cancel or the work was withdrawn"
                if late
                else "no notification step ran"
            )
            + ": the customer has not been told"
        )
    elif case.status == Status.DONE and case.has_late_cancellation():
        why = (
            "The customer asked to cancel after the change was applied; they were told the "
            "change is applied. Reversing it is a new proposal with its own approval"
        )
    follow_up = ""
    if case.retention_until:
        follow_up = (
            f"Closed; kept until {case.retention_until:%Y-%m-%d} under the retention policy."
        )
        if case.legal_hold:
            follow_up = "Closed; under legal hold, so nothing of it is purged."
    who = f"{person(case.responsible_now)}, the responsible person" if why else ""
    return NextAction(
        headline=headline,
        why_waiting=why,
        who_must_answer=who,
        follow_up=follow_up,
        permitted=permitted,
        finished=True,
        status=status_label(case),
    )


_CODED = re.compile(r"(?P<code>[a-z][a-z0-9]*(?:_[a-z0-9]+)+): (?P<words>.+)", re.DOTALL)


def error_words(error: str) -> str:
    """A stored error as a person reads it: "order_not_open: Order ORD-7734 is shipped" is
    the order system's code, then its words; the words are what a page shows."""
    found = _CODED.fullmatch(error or "")
    return found.group("words") if found else (error or "")


def describe_next_action(case: Case, *, actor=None, now: dt.datetime | None = None) -> NextAction:
    """Explain the case to someone who never saw the original conversation.

    ``permitted`` lists what ``actor`` may do now (what anyone on the team may, with who, when
    no actor is given) — the same actions the case page offers as buttons.
    """
    now = now or timezone.now()
    actions = [a for a in case_actions(case, actor) if a.in_summary]
    if actor is None:
        permitted = [f"{a.words_for(case)} ({who_may(a)})" for a in actions]
    else:
        permitted = [a.words_for(case) for a in actions]
    if case.is_terminal:
        return _finished(case, permitted)
    follow_up, overdue = _follow_up(case, now)
    headline = _HEADLINES[Status(case.status)]
    if case.status == Status.PREPARING_PROPOSAL and case.waiting_on == WaitingOn.OWNER:
        headline = "A proposal is being prepared by a person: it waits for them to submit it."
    if case.status == Status.HELD:
        headline = (
            "Held: the outcome is not known yet. The workers are settling it themselves from "
            "the order system's evidence (fence, then the consistent lookup); nothing is "
            "written before that."
            if workers_settle(case)
            else "Held: the outcome is not known and the workers no longer look by themselves: "
            "a person settles it from the order system's evidence before anything else is "
            "written."
        )
    if case.status == Status.READY and not case.nothing_applied():
        headline = (
            "Applied: the change is confirmed at the order system; a worker finishes the "
            "steps after it (tell the customer, close). Nothing is sent again."
        )
    return NextAction(
        headline=headline,
        why_waiting=_why(case),
        who_must_answer=_who_must_answer(case),
        follow_up=follow_up,
        permitted=permitted,
        overdue=overdue,
        at_risk=case.follow_up_state(now) == FollowUpState.AT_RISK,
        status=status_label(case),
        waits_on_a_person=_waits_on_a_person(case),
    )


def _waits_on_a_person(case: Case) -> bool:
    if case.status == Status.HELD:
        return held_waits_on_person(case)
    return case.status in (Status.NEEDS_ATTENTION, Status.AWAITING_REVIEW) or case.waiting_on in (
        WaitingOn.OWNER,
        WaitingOn.APPROVERS,
    )
