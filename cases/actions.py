"""What may happen next on a case, for one actor: one list that every surface renders.

Each action is a check (state guards, then the actor's permission on the case's team) and an
execute (one service call), in the style of Wagtail's actions. The admin's buttons and forms, the
API's ``allowed_transitions``, the ``allowed`` list of a 409 and the "permitted now" words of the
next-action text all come from :func:`case_actions`, so they cannot disagree.

The kernel registers its own actions here; apps built on it (approvals, reconciliation) register
theirs from ``AppConfig.ready`` so nothing in ``cases`` imports them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from django_fsm import can_proceed

from cases.exceptions import ActionNotPermitted, InvalidCaseInput, TransitionRejected
from cases.kernel import (
    actor_label,
    actor_may,
    actor_team_ids,
    asks_membership,
    set_allowed_now,
)
from cases.models import TERMINAL_STATUSES, Case, Status

Text = str | Callable[[Case], str]


def _text(value: Text, case: Case) -> str:
    return value(case) if callable(value) else value


@dataclass(frozen=True)
class CaseAction:
    """One thing a person may do to a case.

    ``available`` holds the state guards only; the permission is checked per actor by
    :func:`case_actions` and again by :func:`action_run` (and by the service itself, under the
    row lock). ``form`` names a form the case page renders instead of a plain button.
    """

    name: str
    label: Text
    words: Text
    permission: str | None
    available: Callable[[Case], bool]
    execute: Callable[..., str] | None = None
    transition: bool = False
    needs_reason: bool = True
    confirm: Text = ""
    confirm_label: Text = ""
    danger: bool = False
    form: str = ""
    order: int = 100
    who: str = ""
    # Housekeeping (evidence, legal holds) is offered as a button but left out of the
    # "permitted now" summary of what moves the case on.
    in_summary: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def label_for(self, case: Case) -> str:
        return _text(self.label, case)

    def words_for(self, case: Case) -> str:
        return _text(self.words, case)

    def confirm_for(self, case: Case) -> str:
        return _text(self.confirm, case)

    def confirm_label_for(self, case: Case) -> str:
        return _text(self.confirm_label, case) or self.label_for(case)


_REGISTRY: dict[str, CaseAction] = {}

_WHO_FOR_PERMISSION = {
    "cases.work_case": "agents and leads of the team",
    "cases.lead_case": "the team's leads",
    "cases.add_evidencereference": "agents and leads of the team",
    None: "anyone on the team",
}


def register(action: CaseAction) -> CaseAction:
    _REGISTRY[action.name] = action
    return action


def get_action(name: str) -> CaseAction | None:
    return _REGISTRY.get(name)


def who_may(action: CaseAction) -> str:
    return action.who or _WHO_FOR_PERMISSION.get(action.permission, "the team")


def case_actions(case: Case, actor=None) -> list[CaseAction]:
    """The actions whose guards hold now, and that ``actor`` may take (everyone's if None).

    One look each: the guards that read other tables are read once for the whole list
    (``Case.guards_read_once``), and the actor's teams once, when a permission first asks."""
    found = []
    team_ids: frozenset[int] | None = None
    with case.guards_read_once():
        for action in sorted(_REGISTRY.values(), key=lambda a: (a.order, a.name)):
            if not action.available(case):
                continue
            if actor is not None:
                if team_ids is None and asks_membership(actor):
                    team_ids = case.read_once(
                        f"teams of {actor.pk}", partial(actor_team_ids, actor)
                    )
                if not actor_may(actor, action.permission, case, team_ids=team_ids):
                    continue
            found.append(action)
    return found


def allowed_transitions(case: Case, actor=None) -> list[str]:
    """The manual transitions of :func:`case_actions`: the API's list and a 409's (the
    kernel's ``allowed_now`` hook, installed below, is this function)."""
    return [action.name for action in case_actions(case, actor) if action.transition]


set_allowed_now(allowed_transitions)


def action_run(*, case: Case, name: str, actor, expected_version: int, reason: str = "") -> str:
    """Check, then execute one action; returns what happened in plain words.

    Refusals are the services' own errors: not permitted (403), not possible now (409 with the
    actor's allowed transitions), a reason missing (400), a stale version (409).
    """
    action = _REGISTRY.get(name)
    if action is None or action.execute is None:
        raise TransitionRejected(
            f"There is no action {name!r} on a case.", allowed=allowed_transitions(case, actor)
        )
    if not actor_may(actor, action.permission, case):
        raise ActionNotPermitted(
            f"{actor_label(actor)} may not use \u201c{action.label_for(case)}\u201d on "
            f"{case.reference}: that is for {who_may(action)}."
        )
    if not action.available(case):
        raise TransitionRejected(
            f"{case.reference} is {case.get_status_display().lower()}: "
            f"'{action.label_for(case)}' is not possible now.",
            allowed=allowed_transitions(case, actor),
        )
    reason = (reason or "").strip()
    if action.needs_reason and not reason:
        raise InvalidCaseInput("Give a reason.", fields={"reason": ["A reason is required."]})
    return action.execute(case=case, actor=actor, expected_version=expected_version, reason=reason)


# --- the kernel's own actions ---------------------------------------------------------------


def _can(name: str) -> Callable[[Case], bool]:
    return lambda case: can_proceed(getattr(case, name))


def _transition(name: str) -> Callable[..., str]:
    def execute(*, case: Case, actor, expected_version: int, reason: str) -> str:
        from cases.services import case_transition

        case = case_transition(
            case=case,
            transition=name,
            actor=actor,
            expected_version=expected_version,
            reason=reason,
        )
        return f"{case.reference}: now {case.get_status_display().lower()}."

    return execute


def cancel_situation(case: Case) -> str:
    """What a cancellation of ``case`` would meet, from its facts (status, attempts, operations):

    ``in_flight``: applying or held, the change may be at the order system; ``applied``: the
    change is confirmed at the order system (ready after apply: only the steps after it remain);
    ``tried``: attempts were made and nothing is applied; ``unsent``: no attempt was ever made;
    ``finished``: done, cancelled or stopped (nothing to cancel).
    """
    if case.status in TERMINAL_STATUSES:
        return "finished"
    if case.status in {Status.APPLYING, Status.HELD}:
        return "in_flight"
    if not case.nothing_applied():
        return "applied"
    if case.attempts_made():
        return "tried"
    return "unsent"


def _cancel_label(case: Case) -> str:
    situation = cancel_situation(case)
    if situation == "in_flight":
        return "Request cancellation"
    if situation == "applied":
        return "Record the customer's cancellation"
    return "Cancel the request"


def _cancel_words(case: Case) -> str:
    situation = cancel_situation(case)
    if situation == "in_flight":
        return (
            "request cancellation (saved and honoured only once the evidence shows nothing "
            "was applied)"
        )
    if situation == "applied":
        return (
            "record the customer's cancellation (the change is already applied and is not "
            "undone; reversing it is a new proposal)"
        )
    if situation == "tried":
        return "cancel (the order system's evidence shows nothing was applied)"
    return "cancel (nothing has been sent yet)"


def _cancel_confirm(case: Case) -> str:
    situation = cancel_situation(case)
    if situation == "in_flight":
        return (
            f"The change may already be at the order system. The cancellation is saved and "
            f"{case.reference} stays held until the order system's evidence shows whether it "
            "was applied; a running worker is asked to stop. Nothing is undone by this."
        )
    if situation == "applied":
        return (
            f"The change of {case.reference} is already applied at the order system: "
            "cancelling does not undo it. The customer's cancellation is recorded, the "
            "customer is told the change is applied, and reversing it is a new proposal "
            "that needs its own approval."
        )
    if situation == "tried":
        return (
            f"Earlier attempts reached the order system and its evidence shows nothing was "
            f"applied: {case.reference} is cancelled at once and no worker will apply it."
        )
    return (
        f"Nothing has been sent to the order system yet: {case.reference} is cancelled at once "
        "and no worker will apply it."
    )


def _cancel(*, case: Case, actor, expected_version: int, reason: str) -> str:
    from cases.services import case_cancel_request

    case = case_cancel_request(
        case=case, actor=actor, reason=reason, via="admin", expected_version=expected_version
    )
    if case.status == Status.CANCELLED:
        return f"{case.reference}: cancelled; nothing was applied."
    return (
        f"{case.reference}: cancellation recorded; it is honoured once the evidence shows "
        "nothing was applied."
    )


def _legal_hold(hold: bool) -> Callable[..., str]:
    def execute(*, case: Case, actor, expected_version: int, reason: str) -> str:
        from cases.services import case_set_legal_hold

        case_set_legal_hold(
            case=case, actor=actor, hold=hold, reason=reason, expected_version=expected_version
        )
        return f"{case.reference}: legal hold {'placed' if hold else 'lifted'}."

    return execute


register(
    CaseAction(
        name="request_source_check",
        label="Check the source now",
        words="check the order source again",
        permission="cases.work_case",
        available=_can("request_source_check"),
        execute=_transition("request_source_check"),
        transition=True,
        confirm=lambda case: (
            f"A worker reads order {case.order_id} from the order system now; any proposal "
            "that rests on older evidence is withdrawn."
        ),
        confirm_label="Check the source now",
        order=10,
    )
)
register(
    CaseAction(
        name="requeue",
        label="Put back in the apply queue",
        words="put it back in the apply queue (all guards re-checked)",
        permission="cases.lead_case",
        available=_can("requeue"),
        execute=_transition("requeue"),
        transition=True,
        confirm=lambda case: (
            "A worker may claim it again; the approval, the source and the customer's access "
            "are all checked again first."
            + (
                # What stopped it is said here: put back with its cause still there, it stops
                # the same way (a slot with no room refused it again within a second).
                f" It stopped on: {case.last_error.rstrip('.')}. Put it back only once that "
                "cause is gone; otherwise the order system answers the same."
                if case.last_error
                else ""
            )
        ),
        confirm_label="Put it back in the queue",
        order=20,
    )
)
register(
    CaseAction(
        name="escalate",
        label="Escalate to a person",
        words="escalate to a person",
        permission="cases.work_case",
        available=_can("escalate"),
        execute=_transition("escalate"),
        transition=True,
        confirm="The case moves to 'needs attention': no worker acts on it until a person "
        "decides what happens next.",
        confirm_label="Escalate",
        order=30,
    )
)
register(
    CaseAction(
        name="cancel",
        label=_cancel_label,
        words=_cancel_words,
        permission="cases.work_case",
        available=lambda case: case.status not in TERMINAL_STATUSES,
        execute=_cancel,
        transition=True,
        confirm=_cancel_confirm,
        confirm_label=lambda case: (
            f"Yes, record the cancellation of {case.reference}"
            if cancel_situation(case) == "applied"
            else f"Yes, cancel {case.reference}"
        ),
        danger=True,
        order=40,
    )
)
register(
    CaseAction(
        name="stop",
        label="Stop the work",
        words="stop the work",
        permission="cases.lead_case",
        available=_can("stop"),
        execute=_transition("stop"),
        transition=True,
        confirm=lambda case: (
            f"{case.reference} is stopped for good: "
            + (
                "nothing has been sent"
                if cancel_situation(case) == "unsent"
                else "the order system's evidence shows nothing was applied"
            )
            + ", and no worker will act on it again."
        ),
        confirm_label=lambda case: f"Yes, stop {case.reference}",
        danger=True,
        order=50,
    )
)
register(
    CaseAction(
        name="place_legal_hold",
        label="Place a legal hold",
        words="place a legal hold (blocks purging)",
        permission="cases.lead_case",
        available=lambda case: case.purged_at is None and not case.legal_hold,
        execute=_legal_hold(True),
        confirm=lambda case: (
            f"Nothing of {case.reference} is purged while the hold is in "
            "place, whatever its retention date."
        ),
        confirm_label="Place the legal hold",
        in_summary=False,
        order=80,
    )
)
register(
    CaseAction(
        name="lift_legal_hold",
        label="Lift the legal hold",
        words="lift the legal hold",
        permission="cases.lead_case",
        available=lambda case: case.purged_at is None and case.legal_hold,
        execute=_legal_hold(False),
        confirm=lambda case: (
            f"{case.reference} may then be purged once its retention date has passed."
        ),
        confirm_label="Lift the legal hold",
        in_summary=False,
        order=80,
    )
)
register(
    CaseAction(
        name="evidence",
        label="Record an evidence reference",
        words="record an evidence reference",
        permission="cases.add_evidencereference",
        available=lambda case: case.purged_at is None,
        form="evidence",
        in_summary=False,
        order=90,
    )
)
