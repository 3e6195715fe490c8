"""List filters: each narrows a list the selectors already scoped to the user's teams, and
refuses a value that is not one the admin way (``?e=1``), never with a 500."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.auth import get_user_model
from django.db.models import Q

from cases import held, selectors
from cases.case_story import action_label
from cases.codes import Action
from cases.validation import first_unprintable, parse_id

User = get_user_model()


def _selected_id(list_filter: admin.SimpleListFilter) -> int | None:
    """The filter's id from the query string; a value that is not one is refused the admin way
    (``IncorrectLookupParameters``: the unfiltered list with ``?e=1``), never a 500."""
    value = list_filter.value()
    if value is None or value == "":
        return None
    # A str from the query string; the choice itself (an int) when the admin counts facets.
    pk = parse_id(str(value))
    if pk is None:
        raise IncorrectLookupParameters(f"{list_filter.parameter_name}: not an id.")
    return pk


class _PrintableFieldFilterMixin:
    """A field filter that, first in ``list_filter``, refuses a change list whose query string
    holds an unprintable value: the admin allows lookups on any local field (``?reason=``,
    ``?action__exact=``) and the search, and PostgreSQL answers a NUL in a text comparison
    with an error, not an empty result."""

    def __init__(self, field: Any, request: Any, params: Any, *args: Any, **kwargs: Any) -> None:
        for key, values in request.GET.lists():
            if any(first_unprintable(text) is not None for text in (key, *values)):
                raise IncorrectLookupParameters("Unprintable value in the query string.")
        super().__init__(field, request, params, *args, **kwargs)  # type: ignore[call-arg]


class PrintableChoicesFilter(_PrintableFieldFilterMixin, admin.ChoicesFieldListFilter):
    pass


class PrintableValuesFilter(_PrintableFieldFilterMixin, admin.AllValuesFieldListFilter):
    pass


class WaitingOnFilter(PrintableChoicesFilter):
    """The waiting-on filter (``?waiting_on__exact=``), as ``cases.held`` says: a held case the
    workers are still settling is listed under a background worker, not under the person its
    stored value names for when they stop."""

    def queryset(self, request: Any, queryset: Any) -> Any:
        values = self.used_parameters.get(self.lookup_kwarg)
        if not values:
            return super().queryset(request, queryset)
        chosen = Q()
        for value in values if isinstance(values, list) else [values]:
            chosen |= held.waiting_on_is(str(value))
        return queryset.filter(chosen)


class ActionFilter(PrintableValuesFilter):
    """The audit trail's action filter: the registry's codes (``cases.codes.Action``), not a
    ``SELECT DISTINCT action`` over every visible event (a read of the whole trail per page),
    each shown in the timeline's words (``case_story.action_label``), in their order; the code
    stays the filter's value."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lookup_choices = sorted(Action, key=action_label)  # type: ignore[assignment]

    def choices(self, changelist: Any) -> Any:
        for choice in super().choices(changelist):
            yield {**choice, "display": action_label(str(choice["display"]))}


class PrintableBooleanFilter(_PrintableFieldFilterMixin, admin.BooleanFieldListFilter):
    pass


class _TeamMemberFilter(admin.SimpleListFilter):
    def lookups(self, request: Any, model_admin: Any) -> list[tuple[Any, str]]:
        # The case list's three person filters list the same people: read once per request.
        found = getattr(request, _MEMBERS, None)
        if found is None:
            # Staff only: nobody else can own, back up or answer a case
            # (``selectors.case_workers``).
            users = User.objects.filter(
                holdfast_teams__in=selectors.teams_for(request.user), is_staff=True
            )
            found = [(u.pk, u.get_username()) for u in users.distinct().order_by("username")]
            setattr(request, _MEMBERS, found)
        return list(found)


_MEMBERS = "_holdfast_team_members"


class OwnerFilter(_TeamMemberFilter):
    title = "owner"
    parameter_name = "owner"

    def queryset(self, request: Any, queryset: Any) -> Any:
        pk = _selected_id(self)
        return queryset if pk is None else queryset.filter(owner_id=pk)


class ResponsibleNowFilter(_TeamMemberFilter):
    title = "responsible now"
    parameter_name = "responsible"

    def queryset(self, request: Any, queryset: Any) -> Any:
        pk = _selected_id(self)
        if pk is None:
            return queryset
        user = User.objects.filter(pk=pk).first()
        # Closed cases too (their responsible column shows —): restricted to open cases, the
        # page at 1M cases read a bitmap of the person's whole history, 1.35× its time at 10k
        # against 1.21× (``make bench``).
        return queryset.responsible(user) if user else queryset.none()


class MineToAnswerFilter(_TeamMemberFilter):
    """ "Mine to answer now" (``cases.inbox.cases_to_answer``): the cases waiting on the person
    as the one responsible now, and the decisions they may take."""

    title = "to answer now"
    parameter_name = "answer"

    def queryset(self, request: Any, queryset: Any) -> Any:
        from cases.inbox import cases_to_answer

        pk = _selected_id(self)
        if pk is None:
            return queryset
        user = User.objects.filter(pk=pk).first()
        return cases_to_answer(user, queryset) if user else queryset.none()


class FollowUpFilter(admin.SimpleListFilter):
    """Where a person's wait stands against its follow-up time."""

    title = "person's follow-up"
    parameter_name = "follow_up"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        return [("at_risk", "At risk"), ("waiting", "Waits on a person")]

    def queryset(self, request: Any, queryset: Any) -> Any:
        if self.value() == "at_risk":
            return queryset.at_risk()
        if self.value() == "waiting":
            return queryset.open().filter(follow_up_at__isnull=False)
        return queryset


class OverdueFilter(admin.SimpleListFilter):
    title = "follow-up"
    parameter_name = "overdue"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Overdue (follow-up or next check)"), ("no", "Not overdue")]

    def queryset(self, request: Any, queryset: Any) -> Any:
        if self.value() == "yes":
            return queryset.overdue()
        if self.value() == "no":
            return queryset.exclude(pk__in=queryset.overdue().values("pk"))
        return queryset


class TeamFilter(admin.SimpleListFilter):
    title = "team"
    parameter_name = "team"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[Any, str]]:
        return [(t.pk, t.name) for t in selectors.teams_for(request.user)]

    def queryset(self, request: Any, queryset: Any) -> Any:
        pk = _selected_id(self)
        return queryset if pk is None else queryset.filter(team_id=pk)
