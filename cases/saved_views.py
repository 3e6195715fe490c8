"""Saved views of the case list: the one writer of ``SavedView`` and what each person sees.

A view is a name for the case list's filters (its query string, paging left out). A personal
view is seen by its owner only; a team view by every member of its team, and only a member of
that team may share one with it. A view never widens what its reader sees: it is applied to
the reader's own case list, scoped to the reader's teams like any other filter.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import F, Q, QuerySet
from django.http import QueryDict

from cases.exceptions import ActionNotPermitted, InvalidCaseInput
from cases.models import SavedView, Team

# What the case list puts in its query string that is not a filter: the page, the admin's
# error flag and its popup and "to field" markers.
NOT_FILTERS = frozenset({"p", "e", "_popup", "_to_field", "_changelist_filters", "all"})
NAME_MAX = SavedView._meta.get_field("name").max_length or 80
QUERY_MAX = SavedView._meta.get_field("query").max_length or 1000


def filters_of(query: str) -> str:
    """``query`` (a case list's query string) without what is not a filter."""
    params = QueryDict(query.lstrip("?"), mutable=True)
    for key in NOT_FILTERS & set(params):
        del params[key]
    return params.urlencode()


def saved_views_for(user) -> QuerySet[SavedView]:
    """The views ``user`` sees: their own personal ones first, then those of their teams."""
    if user is None or not user.is_authenticated:
        return SavedView.objects.none()
    teams = Team.objects.filter(members=user)  # a superuser's too: the teams they are in
    return (
        SavedView.objects.filter(Q(owner=user, team__isnull=True) | Q(team__in=teams))
        .select_related("team", "owner")
        .order_by(F("team__name").asc(nulls_first=True), "name", "id")
    )


def saved_view_save(*, actor, name: str, query: str, team: Team | None = None) -> SavedView:
    """Save the case list's current filters as ``name``: the actor's own view, or ``team``'s
    (the actor must be a member). Saving under a name the actor already uses (in the same
    place) replaces that view's filters."""
    name = " ".join((name or "").split())
    errors: dict[str, list[str]] = {}
    if not name:
        errors["name"] = ["Name the view."]
    elif len(name) > NAME_MAX:
        errors["name"] = [f"At most {NAME_MAX} characters."]
    filters = filters_of(query or "")
    if len(filters) > QUERY_MAX:
        errors["query"] = [f"The filters are longer than {QUERY_MAX} characters."]
    if errors:
        raise InvalidCaseInput("The view was not saved.", fields=errors)
    if team is not None and not team.members.filter(pk=actor.pk).exists():
        raise ActionNotPermitted(f"{actor} is not a member of {team} and may not share with it.")
    where = {"team": team} if team is not None else {"owner": actor, "team__isnull": True}
    try:
        with transaction.atomic():
            view, created = SavedView.objects.select_for_update().get_or_create(
                **where, name=name, defaults={"owner": actor, "team": team, "query": filters}
            )
            if not created:
                if team is not None and view.owner_id != actor.pk:
                    raise ActionNotPermitted(
                        f"{team} already has a view named {name!r}, saved by {view.owner}."
                    )
                view.query = filters
                view.save(update_fields=["query"])
    except IntegrityError:  # the same name saved at the same moment by another request
        raise InvalidCaseInput(
            "The view was not saved.", fields={"name": ["That name was just taken."]}
        ) from None
    return view


def saved_view_delete(*, actor, view: SavedView) -> None:
    """Remove a view: its owner only (a team view too)."""
    if view.owner_id != actor.pk:
        raise ActionNotPermitted(f"Only {view.owner} may remove the view {view.name!r}.")
    view.delete()
