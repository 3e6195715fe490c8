"""Teams and people: who is away goes through ``services.staff_set_away`` (which checks who may
say so); the lists are scoped to the user's teams."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse

from cases import selectors, services
from cases.admin.forms import AbsenceForm, errors_in_words
from cases.admin.related import RelationsAsTheyMayOpen, as_text
from cases.admin.views import person
from cases.exceptions import CaseError
from cases.models import StaffProfile, Team
from cases.references import case_prefix_errors

User = get_user_model()


class TeamForm(forms.ModelForm):
    class Meta:
        model = Team
        fields = ["name", "case_prefix", "members", "default_owner", "default_backup"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The new cases' owner and backup: never an auditor or an approver only, who could
        # answer nothing a case asks (``case_assign`` refuses them on a case).
        for name in ("default_owner", "default_backup"):
            if name in self.fields:
                self.fields[name].queryset = selectors.people_who_may_work()  # type: ignore[attr-defined]

    def clean_case_prefix(self) -> str:
        prefix = self.cleaned_data.get("case_prefix") or ""
        if prefix and (errors := case_prefix_errors(prefix, team_id=self.instance.pk)):
            raise forms.ValidationError(errors)
        return prefix

    def clean(self) -> dict[str, Any]:
        data = super().clean() or self.cleaned_data
        owner = data.get("default_owner")
        if owner is not None and owner == data.get("default_backup"):
            # A case's backup answers while its owner is away: never the owner.
            self.add_error(
                "default_backup",
                "The backup answers while the owner is away: choose someone other than the "
                "default owner, or leave it blank.",
            )
        return data


@admin.register(Team)
class TeamAdmin(RelationsAsTheyMayOpen, admin.ModelAdmin):
    form = TeamForm
    # The default owner and backup link to their user pages only for who may open them.
    plain_relations = ("default_owner", "default_backup")
    default_owner_as_text = as_text("default_owner", "default owner")
    default_backup_as_text = as_text("default_backup", "default backup")
    list_display = ["name", "case_prefix", "default_owner", "default_backup"]
    filter_horizontal = ["members"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # The prefix is in every reference and operation key of the team's cases: set once,
        # before the first (left blank, one is made from the name).
        fields = ["case_prefix"] if obj is not None and obj.cases.exists() else []
        return self.readonly_shown(request, obj, fields)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Team]:
        return selectors.teams_for(request.user)


class StaffProfileForm(forms.ModelForm):
    """The absence's end checked as the service checks it, beside its field (a refused date
    was a bare "403 Forbidden")."""

    def clean_away_until(self) -> Any:
        away_until = self.cleaned_data.get("away_until")
        if why := services.absence_end_error(away_until):
            raise forms.ValidationError(why)
        return away_until


@admin.register(StaffProfile)
class StaffProfileAdmin(RelationsAsTheyMayOpen, admin.ModelAdmin):
    form = StaffProfileForm
    list_display = ["user", "away_until"]
    # The person is chosen on the add page only (``get_readonly_fields``); read-only after.
    readonly_fields = ("user",)
    plain_relations = ("user",)
    user_as_text = as_text("user", "user")

    def get_queryset(self, request: HttpRequest) -> QuerySet[StaffProfile]:
        qs = super().get_queryset(request).select_related("user")
        if request.user.is_superuser:
            return qs
        return qs.filter(user__holdfast_teams__in=selectors.teams_for(request.user)).distinct()

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return self.readonly_shown(request, obj, ["user"] if obj is not None else [])

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "user":
            kwargs["queryset"] = User.objects.filter(
                holdfast_teams__in=selectors.teams_for(request.user)
            ).distinct()
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: StaffProfile, form: Any, change: bool) -> None:
        try:
            services.staff_set_away(user=obj.user, away_until=obj.away_until, actor=person(request))
        except CaseError as exc:
            raise PermissionDenied(exc.detail) from exc

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "mark-away/",
                self.admin_site.admin_view(self.mark_away_view),
                name="cases_staffprofile_mark_away",
            ),
            *super().get_urls(),
        ]

    def mark_away_view(self, request: HttpRequest) -> HttpResponse:
        """The home page's "Away and back" form: one service call, then back home."""
        home = reverse("admin:index")
        if request.method != "POST":
            return HttpResponseRedirect(home)
        form = AbsenceForm(request.POST, people=selectors.team_people(request.user))
        if not form.is_valid():
            self.message_user(
                request, f"Nothing was changed: {errors_in_words(form)}", messages.ERROR
            )
            return HttpResponseRedirect(home)
        member = form.cleaned_data["user"]
        back = request.POST.get("mark") == "back"
        until = None if back else form.cleaned_data["away_until"]
        if not back and until is None:
            self.message_user(
                request, "Nothing was changed: say until when they are away.", messages.ERROR
            )
            return HttpResponseRedirect(home)
        try:
            services.staff_set_away(user=member, away_until=until, actor=person(request))
        except CaseError as exc:
            self.message_user(request, f"Nothing was changed: {exc.detail}", messages.ERROR)
            return HttpResponseRedirect(home)
        name = member.get_full_name() or member.get_username()
        if back:
            text = f"{name} is back: their cases are theirs again."
        else:
            text = (
                f"{name} is away until {until:%Y-%m-%d}: their cases fall to their named "
                "backups (each case's timeline says so)."
            )
        self.message_user(request, text, messages.SUCCESS)
        return HttpResponseRedirect(home)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
