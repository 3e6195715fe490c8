"""The case page's two pictures: ``{% case_status_path case %}`` and ``{% case_timeline case %}``.

Both only read. The status path costs one query (where a case off the main line left it); the
timeline one query (the case's events with their actors).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from django import template

from cases import case_story
from cases.models import Case
from cases.next_action import status_label

register = template.Library()

TIMELINE_LIMIT = 200


def status_path_context(case: Case, transitions: Iterable[Any] | None = None) -> dict:
    """``transitions`` defaults to the state machine's own (``Case.status``)."""
    if transitions is None:
        transitions = case_story.case_transitions()
    last_on_line = None
    if case.status not in case_story.MAIN_LINE and case.pk is not None:
        history = (
            case.events.exclude(to_status="")
            .order_by("-id")
            .values_list("from_status", "to_status")[:50]
        )
        last_on_line = case_story.last_main_status(history)
    path = case_story.status_path(
        case_story.edges_from(transitions), current=case.status, last_on_line=last_on_line
    )
    if case.pk is not None:
        # "Now:" names the case's status as its page does (a held case the workers still
        # settle is not one "a person must reconcile").
        path = dataclasses.replace(path, current_label=status_label(case))
    return {"case": case, "path": path}


def timeline_context(case: Case, *, limit: int = TIMELINE_LIMIT, now=None) -> dict:
    events = list(case.events.select_related("actor").order_by("-created_at", "-id")[: limit + 1])
    more = len(events) > limit
    return {
        "case": case,
        "entries": case_story.timeline(events[:limit], now=now),
        "more": more,
        "limit": limit,
    }


@register.inclusion_tag("admin/cases/case/_status_path.html")
def case_status_path(case: Case) -> dict:
    return status_path_context(case)


@register.inclusion_tag("admin/cases/case/_timeline.html")
def case_timeline(case: Case) -> dict:
    return timeline_context(case)
