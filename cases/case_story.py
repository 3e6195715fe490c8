"""A case told as a picture and in words: the status path and the event timeline.

Pure functions over the state machine's own transitions and over ``CaseEvent`` rows. Nothing
here writes; the template tags in ``cases.templatetags.holdfast_case`` do the (bounded) reads.

The status path's edges come from django-fsm-2's transition metadata on ``Case.status``; only
the *order* of the main line is fixed here, so a transition added to or removed from the model
shows up on the case page without touching this module.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone
from django.utils.timesince import timesince

from cases.codes import Action
from cases.models import TERMINAL_STATUSES, Case, CaseEvent, Status

# The order in which the main line is drawn. Which step leads to which is read from the
# transitions; this only says where each status sits on the line.
MAIN_LINE: tuple[str, ...] = (
    Status.NEW,
    Status.WAITING_SOURCE,
    Status.PREPARING_PROPOSAL,
    Status.AWAITING_REVIEW,
    Status.READY,
    Status.APPLYING,
    Status.DONE,
)
BRANCHES: tuple[str, ...] = (
    Status.HELD,
    Status.PROPOSAL_REJECTED,
    Status.NEEDS_ATTENTION,
    Status.CANCELLED,
    Status.STOPPED,
)
_ORDER = {status: index for index, status in enumerate((*MAIN_LINE, *BRANCHES))}
_LABELS = dict(Status.choices)

# django-fsm-2's wildcard sources.
_ANY_STATE = "*"
_ANY_OTHER_STATE = "+"


def status_label(status: str) -> str:
    return _LABELS.get(status, status.replace("_", " ").capitalize() if status else "")


# --- the graph ------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Edge:
    source: str
    target: str
    transition: str


def case_transitions() -> list[Any]:
    """Every ``django_fsm.Transition`` of ``Case.status`` (one per source of each method)."""
    return list(Case._meta.get_field("status").get_all_transitions(Case))


def _targets(transition: Any) -> list[str]:
    target = transition.target
    if target is None:  # a transition that keeps the state
        return []
    allowed = getattr(target, "allowed_states", None)  # RETURN_VALUE / GET_STATE
    if allowed is not None:
        return [str(s) for s in allowed]
    return [str(target)]


def edges_from(transitions: Iterable[Any], statuses: Sequence[str] | None = None) -> list[Edge]:
    """The directed edges the transitions allow, wildcards expanded over ``statuses``.

    Each item needs ``source``, ``target`` and ``name`` (a ``django_fsm.Transition`` has them).
    Self-loops are left out: they do not move a case along the path.
    """
    statuses = list(statuses or Status.values)
    edges: set[Edge] = set()
    for transition in transitions:
        source = str(transition.source)
        for target in _targets(transition):
            if source == _ANY_STATE:
                sources = statuses
            elif source == _ANY_OTHER_STATE:
                sources = [s for s in statuses if s != target]
            else:
                sources = [source]
            edges.update(Edge(s, target, transition.name) for s in sources if s != target)
    return sorted(edges, key=lambda e: (_rank(e.source), _rank(e.target), e.transition))


def _rank(status: str) -> tuple[int, str]:
    return (_ORDER.get(status, len(_ORDER)), status)


def _sorted_statuses(statuses: Iterable[str]) -> list[str]:
    return sorted(set(statuses), key=_rank)


def _phrases(statuses: Iterable[str]) -> tuple[str, ...]:
    """Labels in path order; three or more consecutive main-line steps read as one run
    ("every step from New to Applying")."""
    ordered = _sorted_statuses(statuses)
    phrases: list[str] = []
    run: list[str] = []

    def flush():
        if len(run) >= 3:
            phrases.append(f"every step from {status_label(run[0])} to {status_label(run[-1])}")
        else:
            phrases.extend(status_label(s) for s in run)
        run.clear()

    for status in ordered:
        if status in MAIN_LINE and run and MAIN_LINE.index(status) == MAIN_LINE.index(run[-1]) + 1:
            run.append(status)
            continue
        flush()
        if status in MAIN_LINE:
            run.append(status)
        else:
            phrases.append(status_label(status))
    flush()
    return tuple(phrases)


@dataclass(frozen=True)
class PathStep:
    status: str
    label: str
    number: int
    state: str  # "done", "current", "left" (where the case left the line) or "todo"
    linked: bool  # a transition leads here from the previous step of the line
    previous_label: str
    via: tuple[str, ...]  # the transitions that do
    back_to: tuple[str, ...]  # labels of earlier steps of the line this step can return to
    ahead_to: tuple[str, ...]  # labels of later steps reached by skipping the next one

    @property
    def is_current(self) -> bool:
        return self.state == "current"


@dataclass(frozen=True)
class BranchStep:
    status: str
    label: str
    is_current: bool
    terminal: bool
    sources: tuple[str, ...]  # statuses that lead here, in path order
    targets: tuple[str, ...]  # statuses this leads to
    reached_from: tuple[str, ...]  # phrases: labels, runs of the main line summed up
    leads_to: tuple[str, ...]  # phrases


@dataclass(frozen=True)
class StatusPath:
    current: str
    current_label: str
    finished: bool
    steps: tuple[PathStep, ...]
    branches: tuple[BranchStep, ...]
    edges: tuple[Edge, ...] = field(repr=False)


def last_main_status(history: Iterable[tuple[str, str]]) -> str | None:
    """The main-line status a case was last in, from its status changes newest first
    (``(from_status, to_status)`` pairs)."""
    for from_status, to_status in history:
        if to_status in MAIN_LINE:
            return to_status
        if from_status in MAIN_LINE:
            return from_status
    return None


def status_path(
    edges: Iterable[Edge], *, current: str, last_on_line: str | None = None
) -> StatusPath:
    """The main line with each step's state, and the branches beside it.

    ``last_on_line`` is where a case off the main line (held, cancelled, …) left it; steps
    before it look done. A case on the main line has passed every step before its own.
    """
    edges = tuple(edges)
    by_source: dict[str, set[str]] = {}
    via: dict[tuple[str, str], list[str]] = {}
    for edge in edges:
        by_source.setdefault(edge.source, set()).add(edge.target)
        via.setdefault((edge.source, edge.target), []).append(edge.transition)
    terminal = current in TERMINAL_STATUSES

    if current in MAIN_LINE:
        passed_before, left_at = MAIN_LINE.index(current), None
    elif last_on_line in MAIN_LINE:
        left_at = MAIN_LINE.index(last_on_line)
        passed_before = left_at
    else:
        passed_before, left_at = 0, None

    steps = []
    for index, status in enumerate(MAIN_LINE):
        if status == current:
            state = "current"
        elif index == left_at:
            state = "left"
        elif index < passed_before:
            state = "done"
        else:
            state = "todo"
        previous = MAIN_LINE[index - 1] if index else None
        targets = by_source.get(status, set())
        steps.append(
            PathStep(
                status=status,
                label=status_label(status),
                number=index + 1,
                state=state,
                linked=previous is not None and status in by_source.get(previous, set()),
                previous_label=status_label(previous) if previous else "",
                via=tuple(sorted(via.get((previous, status), []))) if previous else (),
                back_to=tuple(status_label(t) for t in MAIN_LINE[:index] if t in targets),
                ahead_to=tuple(status_label(t) for t in MAIN_LINE[index + 2 :] if t in targets),
            )
        )

    branches = []
    for status in BRANCHES:
        sources = [e.source for e in edges if e.target == status]
        branches.append(
            BranchStep(
                status=status,
                label=status_label(status),
                is_current=status == current,
                terminal=status in TERMINAL_STATUSES,
                sources=tuple(_sorted_statuses(sources)),
                targets=tuple(_sorted_statuses(by_source.get(status, ()))),
                reached_from=_phrases(sources),
                leads_to=tuple(
                    status_label(t) for t in _sorted_statuses(by_source.get(status, ()))
                ),
            )
        )
    return StatusPath(
        current=current,
        current_label=status_label(current),
        finished=terminal,
        steps=tuple(steps),
        branches=tuple(branches),
        edges=edges,
    )


# --- the timeline ---------------------------------------------------------------------------

# What each transition of ``Case.status`` reads like in the timeline. ``{actor}`` is the
# person's full name or the worker; a sentence without it gets "by …" beside it.
TRANSITION_WORDS: dict[str, tuple[str, str]] = {
    "request_source_check": ("Source check requested by {actor}", ""),
    "source_checked": ("Order source read by {actor}", ""),
    "source_changed": ("The order changed: the proposal and any approval are void", "alert"),
    "submit_for_review": ("Submitted for review by {actor}", ""),
    "approve": ("Approved by {actor}", "good"),
    "reject": ("Rejected by {actor}: a person prepares another proposal", "alert"),
    "prepare_again": ("Another proposal is prepared by {actor}", ""),
    "revise": ("The intended change was revised by {actor}", ""),
    "approval_expired": ("The approval expired: a fresh decision is needed", "alert"),
    "claim": ("Claimed by {actor}", ""),
    "retry_later": ("Back in the queue: the order system is retried later", ""),
    "hold": ("Held: the outcome is unknown", "alert"),
    "hold_for_recovery": ("Held for recovery after a restore", "alert"),
    "complete": ("Done: the change is confirmed", "good"),
    "resume_steps": ("Proven applied: the steps after apply resume", "good"),
    "settle_absent": ("Proven absent: the same operation may be applied again", ""),
    "escalate": ("Escalated to a person by {actor}", "alert"),
    "requeue": ("Put back in the apply queue by {actor}", ""),
    "cancel": ("Cancelled by {actor}", "end"),
    "settle_cancelled": ("Cancelled: proven that nothing was applied", "end"),
    "stop": ("Stopped by {actor}", "end"),
    "settle_stopped": ("Stopped: authority revoked and everything settled", "end"),
    "reopen_for_reversal": ("Reopened to propose reversing the applied change", "alert"),
}

# Words for every ``Action`` the services write (a test checks every member has some).
ACTION_WORDS: dict[Action, tuple[str, str]] = {
    Action.CASE_CREATED: ("Case opened by {actor}", ""),
    Action.CASE_TRANSITIONED: ("Moved from {from_label} to {to_label}", ""),
    Action.CASE_CLAIMED: ("Claimed by {actor} as {attempt}", ""),
    Action.CASE_REASSIGNED: ("Reassigned by {actor}: owner {owner}, backup {backup}", ""),
    Action.CASE_FOLLOWUP_UPDATED: ("Follow-up updated by {actor}", ""),
    Action.FOLLOW_UP_DUE: ("The follow-up time passed: a reminder was sent", "alert"),
    Action.CASE_REQUEST_JOINED: (
        "{actor} re-sent this request: an author of it, who may not approve it",
        "",
    ),
    Action.CASE_INTENT_CHANGED: ("The requested change was revised by {actor}", ""),
    Action.CASE_RESPONSIBILITY_TO_BACKUP: ("Responsibility passed to the named backup", ""),
    Action.CASE_RESPONSIBILITY_TO_OWNER: ("Responsibility returned to the owner", ""),
    Action.CASE_LEGAL_HOLD_SET: ("Legal hold placed by {actor}", ""),
    Action.CASE_LEGAL_HOLD_LIFTED: ("Legal hold lifted by {actor}", ""),
    Action.CASE_PURGED: ("Payload purged after retention; the audit trail is kept", "end"),
    Action.EVIDENCE_RECORDED: ("Evidence recorded by {actor} ({external_reference})", ""),
    Action.CANCELLATION_REQUESTED: ("Cancellation requested by {actor}", "alert"),
    Action.CANCELLATION_AFTER_CHANGE: (
        "Cancellation arrived after the change was applied",
        "alert",
    ),
    Action.CANCELLATION_REFUSED: (
        "Cancellation by {actor} refused: the case is done, the change applied",
        "alert",
    ),
    Action.APPROVAL_EXPIRED_DURING_HOLD: (
        "{approval} expired during the hold: no new application under it",
        "alert",
    ),
    Action.CLAIM_REFUSED: ("Claim refused: a person must start the apply", "alert"),
    Action.APPLY_AUTHORIZED: ("Apply started by {actor}", ""),
    Action.ATTEMPT_CANCEL_REQUESTED: ("{attempt} asked to stop", "alert"),
    Action.ATTEMPT_WORKER_STOPPED: ("{attempt} stopped: the worker acknowledged", ""),
    Action.ATTEMPT_LEASE_EXPIRED: (
        "The lease of {attempt} expired: the worker went silent",
        "alert",
    ),
    Action.ATTEMPT_CLAIM_RELEASED: ("{attempt} released its claim", ""),
    Action.ATTEMPT_CLAIM_RELEASED_LEGACY: ("{attempt} released its claim", ""),
    Action.ATTEMPT_LATE_RESULT_RECORDED: (
        "A late result from {attempt} was recorded as evidence",
        "",
    ),
    Action.ATTEMPT_LATE_RESULT_REFUSED: (
        "A late result from {attempt} was refused",
        "alert",
    ),
    Action.STEP_APPLIED: (
        "Change applied at the order system (order version {order_version})",
        "good",
    ),
    Action.STEP_NOTIFIED: ("Customer notified", "good"),
    Action.NOTIFICATION_SENDING: ("Sending the customer's notification", ""),
    Action.NOTIFICATION_FAILED: ("The customer's notification could not be sent", "alert"),
    Action.NOTIFICATION_MAY_HAVE_GONE: (
        "The customer's notification may already have gone: not sent again",
        "alert",
    ),
    Action.RESTORE_UNEXPECTED_REPLAY: (
        "The order system already had this change: these records were restored from a backup",
        "alert",
    ),
    Action.RESTORE_APPLIED_BEFORE_RESTORE: (
        "Applied after the restored backup was taken: the steps that followed are not repeated",
        "alert",
    ),
    Action.RESTORE_ATTEMPT_ENDED: (
        "{attempt} was running in the restored records: ended as a lost worker",
        "alert",
    ),
    Action.REVOCATION_REQUESTED: ("Authority revoked by {actor}", "alert"),
    Action.ACCOUNT_ACCESS_REVOKED: ("The customer's access was revoked by {actor}", "alert"),
    Action.ACCOUNT_UPDATED: ("The customer's details were changed by {actor}", ""),
    Action.REVOCATION_UNSETTLED_DISCOVERED: ("Unsettled work found after the revocation", ""),
    Action.REVOCATION_CLOSED_QUEUED: ("Queued work closed after the revocation", ""),
    Action.REVOCATION_FENCED: ("Fence raised at the order system (token {fence_token})", ""),
    Action.REVOCATION_FENCE_FAILED: ("The fence could not be raised", "alert"),
    Action.PROPOSAL_PREPARED: ("Proposal prepared by {actor}", ""),
    Action.SOURCE_CHECK_FAILED: ("The order source could not be read", "alert"),
    Action.ORDER_EVENT_RECORDED: (
        "The order system reported a change (order version {order_version})",
        "",
    ),
    Action.MANUAL_SETTLEMENT_NEEDED: (
        "A person must record the settlement from evidence",
        "alert",
    ),
    Action.FINDING_DISCARDED: (
        "A reconciliation finding was discarded: the case changed meanwhile",
        "",
    ),
    Action.STILL_UNKNOWN: ("Still unknown after reconciliation", "alert"),
    Action.RETRIES_EXHAUSTED: (
        "Reconciliation kept failing: the case stays held for a person to settle",
        "alert",
    ),
}


# What an action's words say of any event of it, for a list of actions (the audit trail's
# filter): the parts that name one event's values go, the rest say "someone" and "an attempt".
_ANY_EVENT = {
    "actor": "someone",
    "attempt": "an attempt",
    "approval": "an approval",
    "from_label": "one status",
    "to_label": "another",
}


def action_label(action: str) -> str:
    """``action`` in words of any event of it ("Claimed by someone as an attempt"); a code
    without words is shown as it is."""
    try:
        pattern = ACTION_WORDS[Action(action)][0]
    except (ValueError, KeyError):
        return action
    # "(order version {order_version})", "({external_reference})"; ": owner {owner}, …".
    pattern = re.sub(r"\s*\([^)]*\{\w+\}[^)]*\)", "", pattern)
    pattern = re.sub(r":[^:]*\{(owner|backup)\}.*$", "", pattern)
    text = pattern.format_map(_ANY_EVENT)
    if Action(action).name.endswith("_LEGACY"):  # the same fact, by the code it had before
        text += " (in older records)"
    return text[:1].upper() + text[1:]


NEAR = dt.timedelta(minutes=2)


def actor_words(event: CaseEvent) -> str:
    """The person's full name, else the recorded label, a worker's kind kept in front."""
    if event.actor_id is not None and event.actor is not None:
        return event.actor.get_full_name() or event.actor.get_username()
    label = event.actor_label or "someone"
    if label == "system":
        return "the system"
    kind, sep, rest = label.partition(":")
    if sep:
        return f"{kind} {rest}"
    return f"the {label}" if label in {"watchdog", "webhook"} else label


# What a placeholder reads as when an event's detail lacks it (older events, other writers).
_MISSING = {"attempt": "an attempt", "owner": "unknown", "backup": "none"}


class _Blank(dict):
    def __missing__(self, key: str) -> str:
        return _MISSING.get(key, "unknown")


def _fallback_words(action: str) -> str:
    words = action.rsplit(".", 1)[-1].replace("_", " ").strip() or action
    return f"{words.capitalize()} ({action})"


@dataclass(frozen=True)
class Sentence:
    text: str
    tone: str  # "", "good", "alert" or "end"
    actor: str
    actor_named: bool  # the text already says who acted
    moved: str  # "Moved from X to Y" for status changes, else ""


def event_sentence(event: CaseEvent) -> Sentence:
    """One event in words. Unknown codes read as their last segment."""
    actor = actor_words(event)
    detail = event.detail if isinstance(event.detail, dict) else {}
    values = _Blank(
        {str(k): v for k, v in detail.items() if isinstance(v, str | int | float)},
        actor=actor,
        from_label=status_label(event.from_status) or "—",
        to_label=status_label(event.to_status) or "—",
    )
    after = detail.get("after")
    if isinstance(after, dict):
        values["owner"] = after.get("owner") or "—"
        values["backup"] = after.get("backup") or "none"
    moved = ""
    if event.from_status and event.to_status and event.from_status != event.to_status:
        moved = f"Moved from {values['from_label']} to {values['to_label']}"

    if event.action == Action.CASE_TRANSITIONED and detail.get("never_approved"):
        # Back to review from a hold before anyone approved it: no approval expired.
        pattern, tone = "Back to its approvers after the hold: it had not been approved yet", ""
    elif event.action == Action.CASE_TRANSITIONED and detail.get("transition") in TRANSITION_WORDS:
        pattern, tone = TRANSITION_WORDS[detail["transition"]]
    elif event.action in ACTION_WORDS:
        pattern, tone = ACTION_WORDS[Action(event.action)]
    else:
        pattern, tone = _fallback_words(event.action).replace("{", "{{").replace("}", "}}"), ""
    text = pattern.format_map(values)
    if text == moved:
        moved = ""
    return Sentence(
        text=text[:1].upper() + text[1:],
        tone=tone,
        actor=actor,
        actor_named="{actor}" in pattern,
        moved=moved,
    )


@dataclass(frozen=True)
class TimelineEntry:
    event: CaseEvent
    sentence: Sentence
    iso: str
    exact: str  # "2026-12-01 10:42:07 UTC"
    shown: str  # "10:42:07" near another event, else "5 minutes ago"
    near: bool


def _ago(when: dt.datetime, now: dt.datetime) -> str:
    if now - when < dt.timedelta(minutes=1):
        return "just now"
    return f"{timesince(when, now, depth=1)} ago"


def timeline(events: Sequence[CaseEvent], *, now: dt.datetime | None = None) -> list[TimelineEntry]:
    """Events newest first, each in words; an event within two minutes of the one before or
    after it shows its time to the second, the others how long ago they were."""
    now = now or timezone.now()
    ordered = sorted(events, key=lambda e: (e.created_at, e.pk or 0), reverse=True)
    entries = []
    for index, event in enumerate(ordered):
        neighbours = ordered[max(index - 1, 0) : index] + ordered[index + 1 : index + 2]
        near = any(abs(event.created_at - other.created_at) <= NEAR for other in neighbours)
        utc = event.created_at.astimezone(dt.UTC)
        if near:
            local = timezone.localtime(event.created_at)
            same_day = timezone.localtime(now).date() == local.date()
            # With its zone, as every time the desk writes ("16:25:48" stood alone).
            shown = f"{local:%H:%M:%S %Z}" if same_day else f"{local:%Y-%m-%d %H:%M:%S %Z}"
        else:
            shown = _ago(event.created_at, now)
        entries.append(
            TimelineEntry(
                event=event,
                sentence=event_sentence(event),
                iso=utc.isoformat(),
                exact=f"{utc:%Y-%m-%d %H:%M:%S} UTC",
                shown=shown,
                near=near,
            )
        )
    return entries
