"""The one way a case whose change is applied moves on: ``case_complete``.

Once the order system has the change, a cancellation still pending can no longer be honoured:
it arrived after the change. Every completion — the close step, a late apply after a stop, a
settlement that proves the change applied (done at once, or the remaining steps resume), the
watchdog finding the change confirmed — first marks those cancellations so and puts the note
on the case, then makes its transition, in the caller's transaction under the case lock. No
completion can leave a cancellation pending behind a change that landed.
"""

from __future__ import annotations

from typing import Any

from cases.kernel import Actor, apply_transition
from cases.models import Case, CaseEvent
from cases.services import cancellations_mark_after_change

# The transitions that follow a change proven applied.
COMPLETIONS = ("complete", "resume_steps")


def case_complete(
    case: Case,
    *,
    actor: Actor,
    reason: str,
    transition: str = "complete",
    detail: dict[str, Any] | None = None,
    head: str | None = None,
    **changes: Any,
) -> CaseEvent:
    """The change of ``case`` (locked by the caller) is applied: mark its pending cancellations
    as arrived after the change, then make ``transition`` (``complete``, or ``resume_steps``
    when steps after the apply remain). The note for those cancellations ends ``reason`` and
    becomes the case's outstanding question; ``changes`` are saved with the transition, and
    ``head`` is the audit chain's head when the caller just recorded an event under the same
    lock (see ``cases.kernel.apply_transition``)."""
    assert transition in COMPLETIONS, transition
    note = cancellations_mark_after_change(case)
    return apply_transition(
        case,
        transition,
        actor=actor,
        reason=f"{reason} {note}".strip(),
        detail=detail,
        outstanding_question=note or case.outstanding_question,
        head=head,
        **changes,
    )
