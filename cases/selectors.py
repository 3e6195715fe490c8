"""Read-side querysets. Team scoping lives here, once, for the admin, the API and services."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from cases.models import (
    Attempt,
    CancellationRequest,
    Case,
    CaseEvent,
    CaseQuerySet,
    CustomerAccount,
    EvidenceReference,
    Team,
)

User = get_user_model()

_Rows = TypeVar("_Rows", bound=QuerySet[Any])


def teams_for(user) -> QuerySet[Team]:
    if user is None or not user.is_authenticated:
        return Team.objects.none()
    if user.is_superuser:
        return Team.objects.all()
    return Team.objects.filter(members=user)


# Inside one web request (``team_ids_read_once``): each person's team ids, read once.
_REQUEST_TEAM_IDS: ContextVar[dict[int, tuple[int, ...]] | None] = ContextVar(
    "holdfast_request_team_ids", default=None
)


@contextlib.contextmanager
def team_ids_read_once() -> Iterator[None]:
    """Inside, :func:`team_ids_of` reads a person's teams once and gives the same ids after:
    one web request (``cases.middleware.TeamIdsPerRequestMiddleware``), whose page scopes
    every panel to the same person's teams (the case page did so seven times, one query
    each). Outside (workers, services, the shell), every call reads them afresh."""
    token = _REQUEST_TEAM_IDS.set({})
    try:
        yield
    finally:
        _REQUEST_TEAM_IDS.reset(token)


def team_ids_of(user) -> list[int]:
    """The ids of :func:`teams_for` ``user``: read now (one query), or inside
    :func:`team_ids_read_once`, as first read there."""
    kept = _REQUEST_TEAM_IDS.get()
    if kept is None or user is None or user.pk is None:
        return _read_team_ids(user)
    if user.pk not in kept:
        kept[user.pk] = tuple(_read_team_ids(user))
    return list(kept[user.pk])


def _read_team_ids(user) -> list[int]:
    return list(teams_for(user).order_by("pk").values_list("pk", flat=True))


def scoped_to_teams(qs: _Rows, user, *, case: str) -> _Rows:
    """``qs`` narrowed to the rows whose case (reached by the relation path ``case``; ``""``
    for cases themselves) the user may see: a case of one of their teams, any case for a
    superuser, none for an anonymous caller. This is the one team-scoping rule.

    The user's teams are read first and named in the query (``team_id IN (…)``), not joined:
    a list page's query then holds two tables fewer, and PostgreSQL's planner weighed every
    order of joining them (at 1M cases it planned the case list for 9-14 ms and ran it in
    under 1; the teams named, 2-4 ms). Not ``IN (SELECT … FROM cases)`` either: the count and
    the rows stay one plain scan. A person of no team sees nothing (an empty ``IN``).
    """
    if user is None or not user.is_authenticated:
        return qs.none()
    if user.is_superuser:
        return qs
    prefix = f"{case}__" if case else ""
    return qs.filter(**{f"{prefix}team_id__in": team_ids_of(user)})


def cases_for(user) -> CaseQuerySet:
    """Cases the user may see: those of their teams (all of them for a superuser)."""
    qs = Case.objects.select_related("account", "team", "owner__staff_profile", "backup")
    return scoped_to_teams(qs, user, case="")


# At most this many of the other open cases on one order are named on a case's page.
SAME_ORDER_SHOWN = 10


def open_cases_on_order(case: Case, user) -> list[Case]:
    """The other open cases on ``case``'s order (its account's), that ``user`` may see, oldest
    first: a date change and a cancellation of one order may be open together, and whichever
    is applied first moves the order on under the other."""
    return list(
        cases_for(user)
        .open()
        .filter(account_id=case.account_id, order_id=case.order_id)
        .exclude(pk=case.pk)
        .order_by("pk")[:SAME_ORDER_SHOWN]
    )


def accounts_for(user) -> QuerySet[CustomerAccount]:
    if user is None or not user.is_authenticated:
        return CustomerAccount.objects.none()
    if user.is_superuser:
        return CustomerAccount.objects.all()
    return CustomerAccount.objects.filter(team__members=user)


def events_for(user) -> QuerySet[CaseEvent]:
    return scoped_to_teams(CaseEvent.objects.all(), user, case="case")


def evidence_for(user) -> QuerySet[EvidenceReference]:
    return EvidenceReference.objects.filter(case__in=cases_for(user).values("pk"))


def attempts_for(user) -> QuerySet[Attempt]:
    return Attempt.objects.filter(case__in=cases_for(user).values("pk"))


def cancellations_for(user) -> QuerySet[CancellationRequest]:
    return CancellationRequest.objects.filter(case__in=cases_for(user).values("pk"))


def team_members(team: Team) -> QuerySet:
    return User.objects.filter(holdfast_teams=team, is_active=True).order_by("username")


def _who_may_work() -> QuerySet:
    """People who may work a case: the work permission and a seat at the desk (staff). An
    integration's user holds the agent role to open cases over the API, but cannot open the
    admin where a case's owner answers it: it was offered as an owner and as someone away."""
    may_work = (
        Q(is_superuser=True)
        | Q(groups__permissions__codename="work_case")
        | Q(user_permissions__codename="work_case")
    )
    return User.objects.filter(may_work, is_staff=True).values("pk")


def people_who_may_work() -> QuerySet:
    """Every active person who may work a case: whom a team may name its default owner or
    backup."""
    return User.objects.filter(is_active=True, pk__in=_who_may_work()).order_by("username")


def case_workers(team: Team) -> QuerySet:
    """The team's active members who may work a case (``cases.work_case``): who may own it or
    be its backup. An auditor or an approver only, who can move nothing, never is."""
    return team_members(team).filter(pk__in=_who_may_work())


def case_workers_for(user) -> QuerySet:
    """:func:`case_workers` of every team of ``user``: whom a bulk reassignment offers."""
    return team_people(user).filter(pk__in=_who_may_work())


def team_people(user) -> QuerySet:
    """Active people who share a team with ``user`` (``user`` included)."""
    return (
        User.objects.filter(holdfast_teams__in=teams_for(user), is_active=True)
        .distinct()
        .order_by("username")
    )


def case_get_for(user, reference: str) -> Case:
    from cases.exceptions import CaseNotFound

    try:
        return cases_for(user).get(reference=reference)
    except Case.DoesNotExist:
        raise CaseNotFound(f"No case {reference} among your teams' cases.") from None
