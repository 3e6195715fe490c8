"""The case list's saved views, full-text search and bulk reassignment, thin over their
services (``cases.saved_views``, ``cases.fulltext``, ``cases.bulk``).

- Saved views: the case list names the views a person sees (their own and their teams') and
  saves its current filters under a name, for the person or for one of their teams; the
  *Saved views* page lists them and removes one (its owner only).
- Bulk reassignment: the case list's action asks for the new owner and/or backup and a reason
  on a page of its own, then calls ``cases_bulk_reassign`` once.
"""

from __future__ import annotations

from copy import copy
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, SuspiciousOperation, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from cases import bulk, saved_views, selectors
from cases.admin.views import person
from cases.exceptions import CaseError
from cases.models import Case, SavedView, Team
from cases.validation import REASON_MAX_LENGTH


def case_list_url(query: str) -> str:
    base = reverse("admin:cases_case_changelist")
    return f"{base}?{query}" if query else base


class SaveViewForm(forms.Form):
    name = forms.CharField(max_length=saved_views.NAME_MAX, label="Name this view")
    query = forms.CharField(required=False, widget=forms.HiddenInput, max_length=2000)
    team = forms.ModelChoiceField(
        queryset=Team.objects.none(),
        required=False,
        label="Share with",
        empty_label="Only me",
    )

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = Team.objects.filter(members=user)  # type: ignore[attr-defined]


def case_list_context(request: HttpRequest) -> dict[str, Any]:
    """What the case list shows of saved views: those the person sees, each as a link, and
    the form that saves the current filters."""
    current = saved_views.filters_of(request.GET.urlencode())
    views = [
        {
            "name": view.name,
            "url": case_list_url(view.query),
            "shared": view.team.name if view.team is not None else "",
            "current": view.query == current,
        }
        for view in saved_views.saved_views_for(request.user)
    ]
    return {
        "saved_views": views,
        "save_view_form": SaveViewForm(initial={"query": current}, user=request.user),
        "save_view_url": reverse("admin:cases_case_save_view"),
        "saved_views_url": reverse("admin:cases_savedview_changelist"),
    }


def _list_refuses(request: HttpRequest, query: str) -> str:
    """Why the case list would refuse to open ``query`` ('' when it opens it): the list's own
    check, made by building the list as it would be built for these filters. A view saved by a
    hand-made POST with a lookup the list does not offer (``owner__password__startswith``)
    was stored, and answered 400 every time it was opened."""
    listing = copy(request)
    listing.method = "GET"
    listing.GET = QueryDict(query)
    try:
        admin.site.get_model_admin(Case).get_changelist_instance(listing)
    except (IncorrectLookupParameters, SuspiciousOperation) as exc:
        cause = exc.args[0] if exc.args else exc  # the list wraps the field's own error
        words = " ".join(cause.messages) if isinstance(cause, ValidationError) else str(exc)
        return f"the case list does not take these filters ({words.rstrip('.')})."
    return ""


def save_view(request: HttpRequest) -> HttpResponse:
    """POST from the case list: save its filters under a name; back to the same list."""
    if request.method != "POST":
        return HttpResponseRedirect(case_list_url(""))
    form = SaveViewForm(request.POST, user=request.user)
    query = saved_views.filters_of(request.POST.get("query", ""))
    refused = _list_refuses(request, query)
    if refused:
        messages.error(request, f"The view was not saved: {refused}")
        return HttpResponseRedirect(case_list_url(""))
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, f"The view was not saved: {error}")
        return HttpResponseRedirect(case_list_url(query))
    try:
        view = saved_views.saved_view_save(
            actor=person(request),
            name=form.cleaned_data["name"],
            query=query,
            team=form.cleaned_data["team"],
        )
    except CaseError as exc:
        detail = exc.detail
        if getattr(exc, "fields", None):
            detail += " " + " ".join(m for msgs in exc.fields.values() for m in msgs)  # type: ignore[attr-defined]
        messages.error(request, detail)
        return HttpResponseRedirect(case_list_url(query))
    where = f"shared with {view.team}" if view.team_id else "for you"
    messages.success(request, f"Saved the view {view.name!r} {where}.")
    return HttpResponseRedirect(case_list_url(view.query))


@admin.register(SavedView)
class SavedViewAdmin(admin.ModelAdmin):
    """The views a person sees; saved from the case list, removed here by their owner."""

    list_display = ["name", "open_link", "shared_with", "owner", "created_at"]
    list_display_links = None
    actions = None

    def get_queryset(self, request: HttpRequest) -> QuerySet[SavedView]:
        return saved_views.saved_views_for(request.user)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request: HttpRequest, obj: SavedView | None = None) -> bool:
        return request.user.is_active and request.user.is_staff

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # saved from the case list, with its filters

    def has_change_permission(self, request: HttpRequest, obj: SavedView | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: SavedView | None = None) -> bool:
        return obj is not None and obj.owner_id == request.user.pk

    def delete_model(self, request: HttpRequest, obj: SavedView) -> None:
        saved_views.saved_view_delete(actor=person(request), view=obj)

    @admin.display(description="open")
    def open_link(self, view: SavedView) -> str:
        return format_html('<a href="{}">Open {}</a>', case_list_url(view.query), view.name)

    @admin.display(description="shared with")
    def shared_with(self, view: SavedView) -> str:
        return view.team.name if view.team is not None else "only its owner"


class ReassignForm(forms.Form):
    owner = forms.ModelChoiceField(
        queryset=get_user_model().objects.none(),
        required=False,
        empty_label="Keep each case's owner",
        label="New owner",
    )
    backup = forms.ModelChoiceField(
        queryset=get_user_model().objects.none(),
        required=False,
        empty_label="Keep each case's backup",
        label="New backup",
    )
    reason = forms.CharField(
        max_length=REASON_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Kept in each case's timeline.",
    )

    def __init__(self, *args: Any, people: QuerySet, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("owner", "backup"):
            self.fields[name].queryset = people  # type: ignore[attr-defined]


def bulk_reassign(
    model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Case]
) -> HttpResponse | None:
    """The case list's action: a page asking who and why, then one service call."""
    if not request.user.has_perm("cases.lead_case"):
        raise PermissionDenied
    people = selectors.case_workers_for(request.user)
    cases = list(queryset.order_by("pk")[: bulk.MAX_CASES + 1])
    form = ReassignForm(request.POST if "apply" in request.POST else None, people=people)
    if "apply" in request.POST and form.is_valid():
        data = form.cleaned_data
        try:
            done = bulk.cases_bulk_reassign(
                actor=person(request),
                case_ids=[case.pk for case in cases],
                reason=data["reason"],
                owner=data["owner"],
                backup=data["backup"] if data["backup"] is not None else bulk.KEEP,
            )
        except CaseError as exc:
            detail = exc.detail
            if getattr(exc, "fields", None) and "nothing was written" in detail:
                detail = " ".join(m for msgs in exc.fields.values() for m in msgs)  # type: ignore[attr-defined]
            model_admin.message_user(request, detail, messages.ERROR)
            return None
        model_admin.message_user(
            request,
            f"Reassigned {len(done)} case{'' if len(done) == 1 else 's'}: "
            f"{', '.join(c.reference for c in done)}.",
            messages.SUCCESS,
        )
        return None
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"Reassign {len(cases)} case{'' if len(cases) == 1 else 's'}",
        "opts": model_admin.model._meta,
        "cases": cases,
        "form": form,
        "too_many": len(cases) > bulk.MAX_CASES,
        "max_cases": bulk.MAX_CASES,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "back": case_list_url(urlencode(request.GET)),
    }
    return TemplateResponse(request, "admin/cases/case/bulk_reassign.html", context)
