"""Customer accounts: created through ``services.account_create``, the name and email changed
through ``services.account_update``, the flags only through audited services (the bulk actions:
the kernel's own and those apps add). The page shows the account's own audit trail."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from cases import selectors, services
from cases.admin import intake
from cases.admin.extend import EXTENSIONS
from cases.admin.filters import PrintableBooleanFilter
from cases.admin.forms import CustomerAccountForm
from cases.admin.inlines import AccountEventInline
from cases.admin.related import RelationsAsTheyMayOpen, as_text
from cases.admin.search import IndexedSearchMixin
from cases.admin.views import person
from cases.exceptions import CaseError
from cases.models import CustomerAccount
from cases.paging import BoundedCountAdminMixin


@admin.register(CustomerAccount)
class CustomerAccountAdmin(
    RelationsAsTheyMayOpen, IndexedSearchMixin, BoundedCountAdminMixin, admin.ModelAdmin
):
    form = CustomerAccountForm
    list_display = ["reference", "name", "team", "verified", "access_active"]
    list_filter = [("verified", PrintableBooleanFilter), "access_active"]
    # Field by field through each one's trigram index (``cases.admin.search``).
    search_fields = ["reference", "name"]
    # The page counts its filtered rows once, at most 1,000 past the page (``cases.paging``).
    show_full_result_count = False
    # The team, the reference (the order system's id) and the flags change only through
    # audited services: the actions below; the name and email through ``account_update``.
    readonly_fields = ["reference", "team", "verified", "access_active", "access_revoked_at"]
    inlines = [AccountEventInline]
    # Text, not a link, for who may not open the team's page (``cases.admin.related``).
    plain_relations = ("team",)
    team_as_text = as_text("team", "team")

    @property
    def actions(self) -> list[Any]:  # type: ignore[override]
        """The kernel's bulk action, then those the apps registered (``extend``)."""
        return ["verify", *EXTENSIONS.account_actions]

    def save_model(
        self, request: HttpRequest, obj: CustomerAccount, form: Any, change: bool
    ) -> None:
        if not change:
            services.account_create(
                account=obj,
                actor=person(request),
                reason=form.cleaned_data.get("change_reason", ""),
            )
            return
        data = form.cleaned_data
        services.account_update(
            account=obj,
            actor=person(request),
            reason=data.get("change_reason", ""),
            name=data.get("name"),
            email=data.get("email"),
        )

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except CaseError as exc:
            self.message_user(request, f"Nothing was changed: {exc.detail}", messages.ERROR)
            return HttpResponseRedirect(request.path)

    def get_inline_instances(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        """The account's history is shown, never submitted: a POST of the form (a browser's,
        or a script's without formset fields) does not depend on it."""
        if request.method == "POST":
            return []
        return super().get_inline_instances(request, obj)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: CustomerAccount | None = None,
    ) -> HttpResponse:
        if obj is not None and intake.may_open(request):
            context["intake_url"] = intake.intake_url(account=obj)
        if obj is not None:
            context["title"] = f"{obj.reference}: {obj.name}"
            context["subtitle"] = None
        return super().render_change_form(request, context, add, change, form_url, obj)

    def has_lead_permission(self, request: HttpRequest) -> bool:
        """The accounts' bulk actions (verify, revoke access) are the leads': nobody else is
        offered them (the services check the lead permission in the account's team again)."""
        return bool(request.user.is_superuser or request.user.has_perm("cases.lead_case"))

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = super().get_fields(request, obj)
        if not self.has_change_permission(request, obj):
            # The reason is asked of who changes the account: a reader saw "Change reason: None".
            fields = [f for f in fields if f != "change_reason"]
        return fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = [
            f for f in self.readonly_fields if obj is not None or f not in {"reference", "team"}
        ]
        return self.readonly_shown(request, obj, fields) if obj is not None else fields

    @admin.action(description="Mark verified (their new cases start)", permissions=["lead"])
    def verify(self, request: HttpRequest, queryset: QuerySet[CustomerAccount]) -> None:
        for account in queryset:
            try:
                moved = services.account_verify(account=account, actor=person(request))
            except CaseError as exc:
                self.message_user(request, f"{account.reference}: {exc.detail}", messages.ERROR)
                continue
            self.message_user(
                request,
                f"{account.reference}: verified; {moved} new case(s) started.",
                messages.SUCCESS,
            )

    def get_queryset(self, request: HttpRequest) -> QuerySet[CustomerAccount]:
        return selectors.accounts_for(request.user)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
