"""The case page and the audit trail: find a case, see why it waits, act through services.

Every queryset is scoped to the user's teams (``cases.selectors``); every button runs a case
action (``cases.actions``) or posts a form to a view that calls one service; saving the page
calls ``case_assign`` / ``case_update_followup``; nothing is hard-deleted: "Delete" revokes the
case's authority through the revoker an app registered (``extend``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html

from cases import fulltext, held, kinds, search, selectors, services
from cases.admin import intake, saved_views, views
from cases.admin.extend import EXTENSIONS
from cases.admin.filters import (
    ActionFilter,
    FollowUpFilter,
    MineToAnswerFilter,
    OverdueFilter,
    OwnerFilter,
    PrintableChoicesFilter,
    ResponsibleNowFilter,
    TeamFilter,
    WaitingOnFilter,
)
from cases.admin.forms import CaseChangeForm
from cases.admin.inlines import (
    AttemptInline,
    CancellationInline,
    CaseEventInline,
    EventWords,
    EvidenceInline,
)
from cases.admin.related import RelationsAsTheyMayOpen, as_text
from cases.admin.search import IndexedSearchMixin
from cases.case_story import event_sentence, status_label
from cases.exceptions import CaseError
from cases.models import Case, CaseEvent, FollowUpState, WaitingOn, overdue_cutoff
from cases.paging import BoundedCountAdminMixin

# The kernel's inlines and their positions on the case page; apps add theirs (``extend``).
CASE_INLINES: list[tuple[int, type[admin.options.InlineModelAdmin[Any, Any]]]] = [
    (30, AttemptInline),
    (40, CancellationInline),
    (50, EvidenceInline),
    (60, CaseEventInline),
]


@admin.register(Case)
class CaseAdmin(
    RelationsAsTheyMayOpen, IndexedSearchMixin, BoundedCountAdminMixin, admin.ModelAdmin
):
    form = CaseChangeForm
    change_form_template = "admin/cases/case/change_form.html"
    list_display = [
        "reference",
        "status_badge",
        "account",
        "order_id",
        "change_display",
        "owner",
        "responsible_now_display",
        "waiting_on_display",
        "follow_up_display",
        "next_check_display",
        "team",
    ]
    list_filter = [
        ("status", PrintableChoicesFilter),
        ("waiting_on", WaitingOnFilter),
        OwnerFilter,
        ResponsibleNowFilter,
        MineToAnswerFilter,
        OverdueFilter,
        FollowUpFilter,
        TeamFilter,
    ]
    search_fields = list(search.CASE_FIELDS)
    list_select_related = ["account", "team", "owner__staff_profile", "backup"]
    # A filtered page counts its rows once: no second COUNT(*) over every visible case; and
    # at most 1,000 past the page (``cases.paging``), so the page costs the same at 1M cases.
    show_full_result_count = False
    readonly_fields = [
        "reference",
        "status",
        "version",
        "account",
        "request_key",
        "order_id",
        "kind_display",
        "change_display",
        "note",
        "team",
        "waiting_on_display",
        "waiting_reason",
        "last_checked_order_version",
        "last_error",
        "created_at",
        "updated_at",
        "closed_at",
        "retention_until",
        "legal_hold",
    ]
    inlines = [inline for _, inline in CASE_INLINES]
    # Shown as text to who may not open the person's or the team's page (a link there was a
    # bare 403 for an agent).
    plain_relations = ("owner", "backup", "team")
    owner_as_text = as_text("owner", "owner")
    backup_as_text = as_text("backup", "backup")
    team_as_text = as_text("team", "team")
    actions = ["revoke_selected", "reassign_selected"]
    delete_confirmation_template = "admin/cases/case/delete_confirmation.html"

    def get_fieldsets(self, request: HttpRequest, obj: Case | None = None) -> Any:
        editable = [
            "owner",
            "backup",
            "outstanding_question",
            "next_check_at",
            "change_reason",
            "expected_version",
        ]
        if not self.has_change_permission(request, obj):
            editable = ["owner", "backup", "outstanding_question", "next_check_at"]
        fieldsets = [
            (
                "Request",
                {
                    "fields": [
                        "reference",
                        "account",
                        "request_key",
                        "order_id",
                        "kind_display",
                        "change_display",
                        "note",
                        "team",
                    ]
                },
            ),
            ("Responsibility and follow-up", {"fields": editable}),
            (
                "State",
                {
                    "fields": [
                        "status",
                        "version",
                        "waiting_on_display",
                        "waiting_reason",
                        "last_checked_order_version",
                        "last_error",
                        "created_at",
                        "updated_at",
                        "closed_at",
                        "retention_until",
                        "legal_hold",
                    ]
                },
            ),
        ]
        return self.fieldsets_shown(request, obj, fieldsets)

    # --- scoping and permissions ---------------------------------------------------------
    def get_queryset(self, request: HttpRequest) -> QuerySet[Case]:
        # Whom each row waits on now, in the page's own query (``cases.held``).
        return held.with_waiting_on(selectors.cases_for(request.user))

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Whoever may open cases (agents, leads) gets "Add", which leads to the intake page:
        a case comes from intake (the page, the API or an integration), never a blank form."""
        return intake.may_open(request)

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        if not self.has_add_permission(request):
            raise PermissionDenied
        return HttpResponseRedirect(reverse("admin:cases_case_intake"))

    def has_delete_permission(self, request: HttpRequest, obj: Case | None = None) -> bool:
        # "Delete" is an authority revocation: the row stays (audit, retention) and the
        # registered revoker settles every piece of unsettled work under it. Whether it is
        # offered is the revoker's (the service's) answer, not this page's.
        revoker = EXTENSIONS.revoker
        return revoker is not None and revoker.offered(obj, request.user)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # replaced by revoke_selected, which is honest
        return actions

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        # Nothing is deleted: list the cases whose authority is revoked, protect nothing.
        return (
            [
                f"{case.reference}: its authority will be revoked and its unsettled work reconciled"
                for case in objs
            ],
            {"cases": len(objs)},
            set(),
            [],
        )

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The page is what the button said, "Revoke authority", never "Delete"."""
        case = self.get_object(request, object_id)
        title = f"Revoke authority over {case.reference}?" if case else "Revoke authority?"
        return super().delete_view(request, object_id, {"title": title, **(extra_context or {})})

    def delete_model(self, request: HttpRequest, obj: Case) -> None:
        self._revoke(request, [obj], "deleted")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Case]) -> None:
        self._revoke(request, list(queryset), "deleted")

    def response_delete(self, request: HttpRequest, obj_display: str, obj_id: int) -> HttpResponse:
        return HttpResponseRedirect(reverse("admin:cases_case_changelist"))

    def _revoke(self, request: HttpRequest, cases: Sequence[Case], kind: str) -> None:
        revoker = EXTENSIONS.revoker
        if revoker is None:
            raise PermissionDenied
        for case in cases:
            try:
                text = revoker.run(
                    case=case, actor=views.person(request), kind=kind, reason=f"{kind} in the admin"
                )
            except CaseError as exc:
                self.message_user(request, f"{case.reference}: {exc.detail}", messages.ERROR)
                continue
            self.message_user(request, text, messages.WARNING)

    def has_lead_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("cases.lead_case")

    @admin.action(
        description="Reassign selected cases (owner or backup, with a reason)…",
        permissions=["lead"],
    )
    def reassign_selected(
        self, request: HttpRequest, queryset: QuerySet[Case]
    ) -> HttpResponse | None:
        return saved_views.bulk_reassign(self, request, queryset)

    @admin.action(
        description="Delete selected cases (revoke authority, settle their work)",
        permissions=["delete"],
    )
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[Case]) -> None:
        self._revoke(request, list(queryset), "deleted")

    def get_inlines(self, request: HttpRequest, obj: Case | None) -> list[Any]:
        """The kernel's inlines and the apps' (``extend``), in the order of their positions."""
        placed = sorted([*CASE_INLINES, *EXTENSIONS.inlines], key=lambda entry: entry[0])
        return [inline for _, inline in placed]

    def get_inline_instances(self, request: HttpRequest, obj: Case | None = None) -> list[Any]:
        return super().get_inline_instances(request, obj) if obj else []

    # --- the list: saved views and full-text search ------------------------------------------
    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {**saved_views.case_list_context(request), **(extra_context or {})}
        return super().changelist_view(request, context)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Case], search_term: str
    ) -> tuple[QuerySet[Case], bool]:
        """The indexed search of the references (``IndexedSearchMixin``) or the full-text
        search of notes, reasons, the timeline and owners' names (``cases.fulltext``): a
        capped set of ids, scoped to the person's teams, in a fixed number of queries."""
        found, duplicates = super().get_search_results(request, queryset, search_term)
        if not search_term.strip():
            return found, duplicates
        user = request.user
        teams = (
            None
            if user.is_superuser
            else list(selectors.teams_for(user).values_list("pk", flat=True))
        )
        ids = fulltext.case_ids_matching(search_term, team_ids=teams)
        if not ids:
            return found, duplicates
        # The indexed search's rows read as ids too (a capped set), and the page filters on
        # the one array of both: "these ids OR that subquery" was planned as a read of every
        # case (314 ms for "customer" at 1M cases, against 11 ms as one array).
        indexed = found.order_by().values_list("pk", flat=True)[: search.RESOLVED_MATCHES + 1]
        return queryset.filter(pk__among=sorted(ids | set(indexed))), duplicates

    # --- list columns ----------------------------------------------------------------------
    @admin.display(description="status", ordering="status")
    def status_badge(self, case: Case) -> str:
        return format_html(
            '<span class="hf-status hf-{}">{}</span>', case.status, status_label(case.status)
        )

    @admin.display(description="kind", ordering="kind")
    def kind_display(self, case: Case) -> str:
        return kinds.label_of(case.kind)

    @admin.display(description="change asked for")
    def change_display(self, case: Case) -> str:
        return case.change_description

    @admin.display(description="responsible now")
    def responsible_now_display(self, case: Case) -> Any:
        if case.is_terminal:
            return "—"  # closed: nobody answers for it any more
        person = case.responsible_now
        if person != case.owner:
            return format_html("{} <small>(backup; owner away)</small>", person)
        return person

    @admin.display(description="waiting on", ordering="waiting_on")
    def waiting_on_display(self, case: Case) -> str:
        """Whom the case waits on (``cases.held``: a held case the workers settle waits on a
        background worker)."""
        return WaitingOn(held.waiting_on(case)).label

    @admin.display(description="follow-up", ordering="follow_up_at")
    def follow_up_display(self, case: Case) -> str:
        """The person's clock: when the one waited on is late, at risk or overdue."""
        if case.follow_up_at is None or case.is_terminal:
            return "—"
        text = date_format(timezone.localtime(case.follow_up_at), "DATETIME_FORMAT")
        state = case.follow_up_state()
        if state == FollowUpState.OVERDUE:
            return format_html('<strong class="hf-overdue">{} (overdue)</strong>', text)
        if state == FollowUpState.AT_RISK:
            return format_html('<strong class="hf-at-risk">{} (at risk)</strong>', text)
        return text

    @admin.display(description="next check", ordering="next_check_at")
    def next_check_display(self, case: Case) -> str:
        if case.next_check_at is None:
            return "—"
        text = date_format(timezone.localtime(case.next_check_at), "DATETIME_FORMAT")
        if case.next_check_at < overdue_cutoff() and not case.is_terminal:
            return format_html('<strong class="hf-overdue">{} (overdue)</strong>', text)
        return text

    # --- saving goes through services ------------------------------------------------------
    def save_model(self, request: HttpRequest, obj: Case, form: Any, change: bool) -> None:
        data = form.cleaned_data
        case = Case.objects.get(pk=obj.pk)
        version = data["expected_version"]
        reason = data.get("change_reason") or "Changed in the admin"
        if {"owner", "backup"} & set(form.changed_data):
            case = services.case_assign(
                case=case,
                expected_version=version,
                owner=data["owner"],
                backup=data.get("backup"),
                reason=reason,
                actor=views.person(request),
            )
            version = case.version
        if {"outstanding_question", "next_check_at"} & set(form.changed_data):
            services.case_update_followup(
                case=case,
                expected_version=version,
                actor=views.person(request),
                outstanding_question=data.get("outstanding_question", ""),
                next_check_at=data.get("next_check_at"),
                reason=reason,
            )

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """Inlines are read-only; nothing else is saved behind the services' back."""

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> Any:
        # The read-only inlines were never saved, so they have nothing to report.
        return super().construct_change_message(request, form, [], add)

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The case's history is the timeline on its page, from the audit trail: Django's own
        history page lists only edits made through this form, and read "This object doesn't
        have a change history" for a case the workers had taken from intake to done."""
        case = self.get_object(request, unquote(object_id))
        if case is None:  # Django's answer for an id this person may not open
            return super().history_view(request, object_id, extra_context)
        return HttpResponseRedirect(views.timeline_url(case))

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
            self.message_user(request, exc.detail, messages.ERROR)
            return HttpResponseRedirect(request.path)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Case | None = None,
    ) -> HttpResponse:
        adminform = context.get("adminform")
        if obj is not None and adminform is not None and adminform.form.errors:
            # Refused: the form wrote what was typed into ``obj`` (it keeps it to show again);
            # the page states the case as it is ("Responsible now: Bo Backup, the owner" was
            # read from a refused owner).
            obj = context["original"] = Case.objects.get(pk=obj.pk)
        if obj is not None:
            context.update(views.case_page_context(request, obj))
            # The page and the window are named after the case, not "Change case".
            # What the case asks for, not a statement that it happened ("D-49: the order is
            # cancelled" sat above "Cancelled: nothing was applied").
            context["title"] = f"{obj.reference} asks: {obj.change_description}"
            context["subtitle"] = None
        return super().render_change_form(request, context, add, change, form_url, obj)

    # --- buttons and forms -------------------------------------------------------------------
    def get_urls(self) -> list[URLPattern]:
        action = self.admin_site.admin_view(self.action_view)
        custom = [
            path(
                "intake/",
                self.admin_site.admin_view(self.intake_view),
                name="cases_case_intake",
            ),
            path(
                "saved-views/save/",
                self.admin_site.admin_view(saved_views.save_view),
                name="cases_case_save_view",
            ),
            path("<int:pk>/transition/<str:name>/", action, name="cases_case_transition"),
            path("<int:pk>/do/<str:name>/", action, name="cases_case_action"),
            *(
                path(
                    f"<int:pk>/{case_form.name}/",
                    self.admin_site.admin_view(self.form_view),
                    {"form_name": case_form.name},
                    name=f"cases_case_{case_form.name}",
                )
                for case_form in views.case_forms()
            ),
        ]
        return custom + super().get_urls()

    def intake_view(self, request: HttpRequest) -> HttpResponse:
        return intake.intake_view(self, request)

    def action_view(self, request: HttpRequest, pk: int, name: str) -> HttpResponse:
        return views.action_view(self, request, pk, name)

    def form_view(self, request: HttpRequest, pk: int, form_name: str) -> HttpResponse:
        """The POST of a case-page form (``extend.CaseForm``): the case within the person's
        teams (404 otherwise), then the form's own view."""
        case_form = next(f for f in views.case_forms() if f.name == form_name)
        return case_form.view(self, request, views.scoped_case(self, request, pk))


@admin.register(CaseEvent)
class CaseEventAdmin(
    EventWords,
    RelationsAsTheyMayOpen,
    IndexedSearchMixin,
    BoundedCountAdminMixin,
    admin.ModelAdmin,
):
    # The reason is what an auditor reads: the columns before it stay narrow (the status change
    # in one column, the action code breaking only at its dots), so that it fits a desktop
    # window beside the filters (``tests/browser/test_layout.py``).
    list_display = ["when", "case", "what_happened", "status_change", "acted_by", "reason"]
    list_display_links = ["when"]
    list_filter = [("action", ActionFilter)]
    # The event in words first on its own page too (the stored fields follow, as stored).
    readonly_fields = ["what_happened", "from_status_name", "to_status_name"]
    # Who acted links to their user page only for who may open it (an auditor may not).
    plain_relations = ("case", "actor")
    case_as_text = as_text("case", "case")
    actor_as_text = as_text("actor", "actor")
    # Field by field through each one's trigram index (``cases.admin.search``): the case
    # reference's on the cases, the reason's and the actor's on the events (migration 0015).
    search_fields = ["case__reference", "reason", "actor_label"]
    list_select_related = ["case"]
    # A filtered page counts its rows once: no second COUNT(*) over every visible event, and
    # at most 1,000 past the page (``cases.paging``).
    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[CaseEvent]:
        return selectors.events_for(request.user).select_related("case", "actor")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        named: dict[Any, Any] = {"from_status": "from_status_name", "to_status": "to_status_name"}
        fields = [
            named.get(name, name)
            for name in super().get_fields(request, obj)
            if name not in {"what_happened", *named.values()}
        ]
        return ["what_happened", *fields]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """Titled, and crumbed (``admin/cases/caseevent/change_form.html``), by its case and
        what happened ("D-43 v9: Moved from Awaiting review to …"), not by its stored code
        (Django's subtitle is the event's ``__str__``)."""
        event = self.get_object(request, object_id)
        if event is not None:
            words = f"{event.case.reference} v{event.version}: {event_sentence(event).text}"
            extra_context = {**(extra_context or {}), "subtitle": words}
        return super().change_view(request, object_id, form_url, extra_context)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
