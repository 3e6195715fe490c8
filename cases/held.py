"""Whom a held case waits on: the one rule.

A held case's outcome is unknown. While the workers are still settling it by themselves — they
look again at its ``next_check_at`` and the order system is autonomous for its kind of change
(``cases.extensions.workers_may_settle``) — it waits on **nobody yet**: no person's follow-up
clock runs, it is in nobody's "Mine to answer now", and nobody is told it is held. It becomes a
person's (the responsible person's) when the workers will not look again (their checks ran out:
``next_check_at`` is cleared) or may not settle it (the kind is not autonomous).

Every reader asks here: the case page (``cases.next_action``), the follow-up clock
(``cases.followups``), the held notification (``cases.notify``), "Mine to answer now" with
its home tile (``cases.inbox.cases_to_answer``), and what the case list and the API say a case
waits on, with their filter by it (:func:`waiting_on`, :func:`waiting_on_is`: a held case the
workers settle waits on a background worker, whatever the stored ``waiting_on`` says, which is
the person it becomes when the workers stop). This module reads only.
"""

from __future__ import annotations

from django.db.models import Case as Cases
from django.db.models import CharField, F, Q, QuerySet, Value, When

from cases.extensions import self_settling_kinds, workers_may_settle
from cases.models import Case, Status, WaitingOn


def workers_settle(case: Case) -> bool:
    """``case`` is held and the workers are still settling it by themselves (their next look
    is scheduled and they may settle its kind): it waits on nobody yet."""
    return (
        case.status == Status.HELD and case.next_check_at is not None and workers_may_settle(case)
    )


def held_waits_on_person(case: Case) -> bool:
    """``case`` is held and only a person settles it now (the workers will not look again, or
    may not settle its kind)."""
    return case.status == Status.HELD and not workers_settle(case)


def workers_settling() -> Q:
    """The held cases the workers are still settling (``workers_settle`` as a filter; one
    query for the kinds the workers may settle)."""
    return Q(status=Status.HELD, next_check_at__isnull=False, kind__in=self_settling_kinds())


# The annotation :func:`with_waiting_on` adds.
WAITING_ON_NOW = "hf_waiting_on_now"


def with_waiting_on(queryset: QuerySet[Case]) -> QuerySet[Case]:
    """``queryset`` with :func:`waiting_on` of each case computed in its own query (one read
    of the kinds the workers may settle, however many rows): what a list page reads, so that
    its held rows cost no query each."""
    now = Cases(
        When(workers_settling(), then=Value(WaitingOn.WORKER.value)),
        default=F("waiting_on"),
        output_field=CharField(),
    )
    return queryset.annotate(**{WAITING_ON_NOW: now})


def waiting_on(case: Case) -> str:
    """Whom ``case`` waits on: a background worker while the workers settle it (held), else
    its stored ``waiting_on`` (as :func:`with_waiting_on` computed it, when it did)."""
    computed = getattr(case, WAITING_ON_NOW, None)
    if computed is not None:
        return str(computed)
    return WaitingOn.WORKER.value if workers_settle(case) else case.waiting_on


def waiting_on_is(value: str) -> Q:
    """The cases :func:`waiting_on` names ``value`` for, as a filter."""
    if value == WaitingOn.WORKER:
        return Q(waiting_on=value) | workers_settling()
    return Q(waiting_on=value) & ~workers_settling()
