"""The one writer of ``Attempt.state``: every move of an attempt goes through here.

An attempt's state only moves forward out of an active state (``running`` or
``cancel_requested``), and every move is one conditional ``UPDATE``: the caller names the states
it expects the attempt to be in, and a racing writer that moved it first wins (the call then
returns ``False`` and writes nothing, not even an event). A move that happened is recorded on
the case's timeline in the same transaction, at its own version, unless the caller records the
event that names the attempt next (then it passes ``event=None`` and says so).

The caller holds the case's row lock (``cases.kernel.lock_case``): that lock orders a move of an
attempt against every other write of its case, and it is what the audit chain needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.utils import timezone

from cases import rows
from cases.codes import Action
from cases.kernel import Actor, record_fact
from cases.models import Attempt, Case

# The attempt ended: set its finishing time with the state (the restore's recovery alone ends
# an attempt without one: its end is not known, only that it is over).
_FINISHED = {
    Attempt.State.SUCCEEDED,
    Attempt.State.FAILED,
    Attempt.State.EFFECT_UNKNOWN,
    Attempt.State.LEASE_EXPIRED,
    Attempt.State.STOPPED,
    Attempt.State.FENCED,
}


def attempt_set_state(
    attempt: Attempt,
    state: str,
    *,
    case: Case,
    actor: Actor,
    expected: Iterable[str] = Attempt.ACTIVE,
    where: dict[str, Any] | None = None,
    event: Action | None,
    reason: str = "",
    detail: dict[str, Any] | None = None,
    **fields: Any,
) -> bool:
    """Move ``attempt`` to ``state`` if it is still in one of the ``expected`` states (and
    matches the further conditions ``where``, e.g. a lease that ran out); True when it moved.
    ``fields`` are saved with the state (``finished_at``, ``last_error``, …).

    ``event`` is the action recorded for the move (with ``reason`` and ``detail``, ``detail``
    always naming the attempt); ``None`` only when the caller records, in the same transaction
    and right after, the event that accounts for it (a step or a transition of the case naming
    the attempt).

    A move from any state, with no further condition, always moves: its count is not read, and
    inside ``cases.rows.writes_held`` it waits for the next statement."""
    expected = list(expected)
    if where is None and event is None and set(expected) >= set(Attempt.State.values):
        rows.update_unread(Attempt, {"pk": attempt.pk}, {"state": state, **fields})
        return True
    moved = bool(
        rows.update(
            Attempt,
            {"pk": attempt.pk, "state__in": expected, **(where or {})},
            {"state": state, **fields},
        )
    )
    if moved and event is not None:
        record_fact(
            case=case,
            action=event,
            actor=actor,
            reason=reason,
            detail={"attempt": attempt.reference, **(detail or {})},
        )
    return moved


def attempt_finish(
    attempt: Attempt,
    state: str,
    *,
    case: Case,
    actor: Actor,
    event: Action | None,
    reason: str = "",
    detail: dict[str, Any] | None = None,
    expected: Iterable[str] = Attempt.ACTIVE,
    where: dict[str, Any] | None = None,
    **fields: Any,
) -> bool:
    """:func:`attempt_set_state` to a final state, with its finishing time (now, unless given)."""
    assert state in _FINISHED, state
    fields.setdefault("finished_at", timezone.now())
    return attempt_set_state(
        attempt,
        state,
        case=case,
        actor=actor,
        expected=expected,
        where=where,
        event=event,
        reason=reason,
        detail=detail,
        **fields,
    )


def attempts_request_stop(
    case: Case,
    *,
    actor: Actor,
    reason: str,
    detail: dict[str, Any] | None = None,
    restate: bool = False,
) -> list[Attempt]:
    """Ask the case's running attempts to stop: each moves ``running`` → ``cancel_requested``
    (with ``cancel_requested_at``) and records ``cases.attempt.cancel_requested``. The intent
    is durable; the stop is not yet: the worker acknowledges it at its next heartbeat, or its
    lease runs out. Returns the attempts now asked to stop.

    ``reason`` may name the attempt as ``{attempt}``. ``restate`` (a revocation) also records
    the request again for an attempt already asked to stop (by a customer's cancellation): the
    revocation is a new reason to stop, and the attempt counts among the revocation's stops.
    """
    now = timezone.now()
    states = Attempt.ACTIVE if restate else (Attempt.State.RUNNING,)
    asked = list(case.attempts.filter(state__in=states).order_by("sequence"))
    for attempt in asked:
        text = reason.format(attempt=attempt.reference)
        moved = attempt_set_state(
            attempt,
            Attempt.State.CANCEL_REQUESTED,
            case=case,
            actor=actor,
            expected=(Attempt.State.RUNNING,),
            event=Action.ATTEMPT_CANCEL_REQUESTED,
            reason=text,
            detail=detail,
            cancel_requested_at=now,
        )
        if not moved:  # already asked (restate): the request is recorded again
            record_fact(
                case=case,
                action=Action.ATTEMPT_CANCEL_REQUESTED,
                actor=actor,
                reason=text,
                detail={"attempt": attempt.reference, **(detail or {})},
            )
    return asked
