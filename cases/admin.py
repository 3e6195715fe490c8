"""The support desk: find a case, see why it waits and who must answer, act through services.

Every queryset is scoped to the user's teams (``cases.selectors``); every button calls a
service; nothing is hard-deleted from here.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from approvals.admin import OperationInline, ProposalInline
from approvals.services import live_approval
from cases import selectors, services
from cases.actions import action_run, case_actions, get_action
from cases.admin_inlines import ReadOnlyInline
from cases.exceptions import CaseError
from cases.models import (
    Attempt,
    AttentionCase,
    CancellationRequest,
    Case,
    CaseEvent,
    CustomerAccount,
    EvidenceReference,
    HeldCase,
    StaffProfile,
    Team,
)
from cases.next_action import describe_next_action
from cases.validation import (
    MAX_ORDER_VERSION,
    REASON_MAX_LENGTH,
    TextValidator,
    first_unprintable,
    parse_id,
)
from reconciliation.selectors import current_autonomy

User = get_user_model()

admin.site.site_header = "Holdfast case desk"
admin.site.site_title = "Holdfast"
admin.site.index_title = "What needs a person now"
admin.site.index_template = "admin/holdfast_index.html"


class CaseEventInline(ReadOnlyInline):
    model = CaseEvent
    verbose_name_plural = "Audit trail (append-only; the same events as 'What happened' above)"
    classes = ["collapse"]
    fields = [
        "created_at",
        "version",
        "action",
        "from_status",
        "to_status",
        "actor_label",
        "reason",
    ]
    readonly_fields = fields
    ordering = ["-id"]

    def get_queryset(self, request):
        visible = selectors.events_for(request.user).values("pk")
        return super().get_queryset(request).filter(pk__in=visible)


class EvidenceInline(ReadOnlyInline):
    model = EvidenceReference
    verbose_name_plural = "Evidence references (pointers to permitted evidence, not copies)"
    fields = [
        "captured_at",
        "source_system",
        "external_reference",
        "kind",
        "permitted_basis",
        "order_version",
        "summary",
        "recorded_by",
    ]
    readonly_fields = fields

    def get_queryset(self, request):
        visible = selectors.evidence_for(request.user).values("pk")
        return super().get_queryset(request).filter(pk__in=visible)


class AttemptInline(ReadOnlyInline):
    model = Attempt
    verbose_name_plural = "Attempts (one worker's claim each; tokens only ever grow)"
    fields = [
        "reference",
        "operation",
        "worker",
        "fencing_token",
        "state",
        "claimed_at",
        "heartbeat_at",
        "lease_expires_at",
        "submitted_at",
        "last_confirmed_step",
        "last_error",
    ]
    readonly_fields = fields

    def get_queryset(self, request):
        visible = selectors.attempts_for(request.user).values("pk")
        return super().get_queryset(request).filter(pk__in=visible)


class CancellationInline(ReadOnlyInline):
    model = CancellationRequest
    verbose_name_plural = "Cancellation requests"
    fields = ["requested_at", "requested_by_label", "via", "reason", "outcome", "settled_at"]
    readonly_fields = fields

    def get_queryset(self, request):
        visible = selectors.cancellations_for(request.user).values("pk")
        return super().get_queryset(request).filter(pk__in=visible)


# --- list filters ------------------------------------------------------------------------------


def _selected_id(list_filter: admin.SimpleListFilter) -> int | None:
    """The filter's id from the query string; a value that is not one is refused the admin way
    (``IncorrectLookupParameters``: the unfiltered list with ``?e=1``), never a 500."""
    value = list_filter.value()
    if not value:
        return None
    pk = parse_id(value)
    if pk is None:
        raise IncorrectLookupParameters(f"{list_filter.parameter_name}: not an id.")
    return pk


class _PrintableFieldFilterMixin:
    """A field filter that, first in ``list_filter``, refuses a change list whose query string
    holds an unprintable value: the admin allows lookups on any local field (``?reason=``,
    ``?action__exact=``) and the search, and PostgreSQL answers a NUL in a text comparison
    with an error, not an empty result."""

    def __init__(self, field, request, params, *args, **kwargs):
        for key, values in request.GET.lists():
            if any(first_unprintable(text) is not None for text in (key, *values)):
                raise IncorrectLookupParameters("Unprintable value in the query string.")
        super().__init__(field, request, params, *args, **kwargs)


class PrintableChoicesFilter(_PrintableFieldFilterMixin, admin.ChoicesFieldListFilter):
    pass


class PrintableValuesFilter(_PrintableFieldFilterMixin, admin.AllValuesFieldListFilter):
    pass


class PrintableBooleanFilter(_PrintableFieldFilterMixin, admin.BooleanFieldListFilter):
    pass


class _TeamMemberFilter(admin.SimpleListFilter):
    def lookups(self, request, model_admin):
        users = User.objects.filter(holdfast_teams__in=selectors.teams_for(request.user))
        return [(u.pk, u.get_username()) for u in users.distinct().order_by("username")]


class OwnerFilter(_TeamMemberFilter):
    title = "owner"
    parameter_name = "owner"

    def queryset(self, request, queryset):
        pk = _selected_id(self)
        return queryset if pk is None else queryset.filter(owner_id=pk)


class ResponsibleNowFilter(_TeamMemberFilter):
    title = "responsible now"
    parameter_name = "responsible"

    def queryset(self, request, queryset):
        pk = _selected_id(self)
        if pk is None:
            return queryset
        user = User.objects.filter(pk=pk).first()
        return queryset.responsible(user) if user else queryset.none()


class OverdueFilter(admin.SimpleListFilter):
    title = "follow-up"
    parameter_name = "overdue"

    def lookups(self, request, model_admin):
        return [("yes", "Overdue next check"), ("no", "Not overdue")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.overdue()
        if self.value() == "no":
            return queryset.exclude(pk__in=queryset.overdue().values("pk"))
        return queryset


class TeamFilter(admin.SimpleListFilter):
    title = "team"
    parameter_name = "team"

    def lookups(self, request, model_admin):
        return [(t.pk, t.name) for t in selectors.teams_for(request.user)]

    def queryset(self, request, queryset):
        pk = _selected_id(self)
        return queryset if pk is None else queryset.filter(team_id=pk)


# --- forms -------------------------------------------------------------------------------------


class CaseChangeForm(forms.ModelForm):
    expected_version = forms.IntegerField(widget=forms.HiddenInput)
    change_reason = forms.CharField(
        required=False, max_length=500, help_text="Why (kept in the timeline)."
    )

    class Meta:
        model = Case
        fields = ["owner", "backup", "outstanding_question", "next_check_at"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["expected_version"].initial = self.instance.version
            members = selectors.team_members(self.instance.team)
            for name in ("owner", "backup"):
                if name in self.fields:
                    self.fields[name].queryset = members


class ActionForm(forms.Form):
    """A case action's confirmation: the version the person saw and, where asked, why."""

    expected_version = forms.IntegerField(widget=forms.HiddenInput, min_value=1)
    reason = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Kept in the case's timeline.",
    )

    def __init__(self, *args, needs_reason: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["reason"].required = needs_reason
        if not needs_reason:
            self.fields["reason"].help_text = "Optional. Kept in the case's timeline."


class PrepareForm(forms.Form):
    expected_version = forms.IntegerField(widget=forms.HiddenInput)
    delivery_date = forms.DateField(
        widget=forms.DateInput(attrs={"type": "date"}), help_text="The exact new delivery date."
    )
    reason = forms.CharField(
        required=False,
        max_length=300,
        help_text="Why (e.g. the customer confirmed another date by phone).",
    )


class SettleForm(forms.Form):
    expected_version = forms.IntegerField(widget=forms.HiddenInput)
    # No default verdict: the person must choose what the evidence shows.
    outcome = forms.ChoiceField(
        choices=[("applied", "The change IS applied"), ("absent", "The change is NOT applied")],
        widget=forms.RadioSelect,
        label="What the evidence shows",
    )
    external_reference = forms.CharField(
        max_length=200, help_text="Where the evidence is: ticket, screen, log."
    )
    summary = forms.CharField(max_length=280, help_text="What the evidence shows.")
    order_version = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_ORDER_VERSION,
        help_text="The order version it shows, if known.",
    )


class AbsenceForm(forms.Form):
    user = forms.ModelChoiceField(queryset=User.objects.none())
    away_until = forms.DateField(required=False)

    def __init__(self, *args, people, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["user"].queryset = people


class EvidenceForm(forms.ModelForm):
    expected_version = forms.IntegerField(widget=forms.HiddenInput)

    class Meta:
        model = EvidenceReference
        fields = [
            "source_system",
            "external_reference",
            "kind",
            "permitted_basis",
            "summary",
            "order_version",
        ]


@admin.register(Case)
class CaseAdmin(admin.ModelAdmin):
    form = CaseChangeForm
    change_form_template = "admin/cases/case/change_form.html"
    list_display = [
        "reference",
        "status_badge",
        "account",
        "order_id",
        "requested_date",
        "owner",
        "responsible_now_display",
        "waiting_on",
        "next_check_display",
        "team",
    ]
    list_filter = [
        ("status", PrintableChoicesFilter),
        ("waiting_on", PrintableChoicesFilter),
        OwnerFilter,
        ResponsibleNowFilter,
        OverdueFilter,
        TeamFilter,
    ]
    search_fields = ["reference", "order_id", "account__reference", "account__name", "request_key"]
    list_select_related = ["account", "team", "owner__staff_profile", "backup"]
    readonly_fields = [
        "reference",
        "status",
        "version",
        "account",
        "request_key",
        "order_id",
        "requested_date",
        "note",
        "team",
        "waiting_on",
        "waiting_reason",
        "last_checked_order_version",
        "last_error",
        "created_at",
        "updated_at",
        "closed_at",
        "retention_until",
        "legal_hold",
    ]
    inlines = [
        ProposalInline,
        OperationInline,
        AttemptInline,
        CancellationInline,
        EvidenceInline,
        CaseEventInline,
    ]
    actions = ["revoke_selected"]
    delete_confirmation_template = "admin/cases/case/delete_confirmation.html"

    def get_fieldsets(self, request, obj=None):
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
        return [
            (
                "Request",
                {
                    "fields": [
                        "reference",
                        "account",
                        "request_key",
                        "order_id",
                        "requested_date",
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
                        "waiting_on",
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

    # --- scoping and permissions ---------------------------------------------------------
    def get_queryset(self, request):
        return selectors.cases_for(request.user)

    def has_add_permission(self, request):
        return False  # cases come from intake (API or integration), never a blank form

    def has_delete_permission(self, request, obj=None):
        # "Delete" is an authority revocation: the row stays (audit, retention) and every
        # piece of unsettled work under it is reconciled by cases.revocation. A finished or
        # already revoked case has no authority left to revoke: no button that does nothing.
        if obj is not None and (obj.is_terminal or obj.revoked_at is not None):
            return False
        return request.user.has_perm("cases.lead_case")

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # replaced by revoke_selected, which is honest
        return actions

    def get_deleted_objects(self, objs, request):
        # Nothing is deleted: list the cases whose authority is revoked, protect nothing.
        return (
            [f"{case.reference}: authority revoked, unsettled work reconciled" for case in objs],
            {"cases": len(objs)},
            set(),
            [],
        )

    def delete_model(self, request, obj):
        self._revoke(request, [obj], "deleted")

    def delete_queryset(self, request, queryset):
        self._revoke(request, list(queryset), "deleted")

    def response_delete(self, request, obj_display, obj_id):
        return HttpResponseRedirect(reverse("admin:cases_case_changelist"))

    def _revoke(self, request, cases, kind, reason=""):
        from cases.revocation import case_revoke, describe_revocation

        for case in cases:
            try:
                result = case_revoke(
                    case=case,
                    actor=request.user,
                    kind=kind,
                    reason=reason or f"{kind} in the admin",
                )
            except CaseError as exc:
                self.message_user(request, f"{case.reference}: {exc.detail}", messages.ERROR)
                continue
            self.message_user(request, describe_revocation(result), messages.WARNING)

    @admin.action(
        description="Delete selected cases (revoke authority, settle their work)",
        permissions=["delete"],
    )
    def revoke_selected(self, request, queryset):
        self._revoke(request, list(queryset), "deleted")

    def get_inline_instances(self, request, obj=None):
        return super().get_inline_instances(request, obj) if obj else []

    # --- list columns ----------------------------------------------------------------------
    @admin.display(description="status", ordering="status")
    def status_badge(self, case):
        return format_html(
            '<span class="hf-status hf-{}">{}</span>', case.status, case.get_status_display()
        )

    @admin.display(description="responsible now")
    def responsible_now_display(self, case):
        person = case.responsible_now
        if person != case.owner:
            return format_html("{} <small>(backup; owner away)</small>", person)
        return person

    @admin.display(description="next check", ordering="next_check_at")
    def next_check_display(self, case):
        if case.next_check_at is None:
            return "—"
        text = timezone.localtime(case.next_check_at).strftime("%Y-%m-%d %H:%M")
        if case.is_overdue:
            return format_html('<strong class="hf-overdue">{} (overdue)</strong>', text)
        return text

    # --- saving goes through services ------------------------------------------------------
    def save_model(self, request, obj, form, change):
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
                actor=request.user,
            )
            version = case.version
        if {"outstanding_question", "next_check_at"} & set(form.changed_data):
            services.case_update_followup(
                case=case,
                expected_version=version,
                actor=request.user,
                outstanding_question=data.get("outstanding_question", ""),
                next_check_at=data.get("next_check_at"),
                reason=reason,
            )

    def save_related(self, request, form, formsets, change):
        """Inlines are read-only; nothing else is saved behind the services' back."""

    def construct_change_message(self, request, form, formsets, add=False):
        # The read-only inlines were never saved, so they have nothing to report.
        return super().construct_change_message(request, form, [], add)

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except CaseError as exc:
            self.message_user(request, exc.detail, messages.ERROR)
            return HttpResponseRedirect(request.path)

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context.update(self._case_panel_context(request, obj))
        return super().render_change_form(request, context, add, change, form_url, obj)

    def _case_panel_context(self, request, case):
        actions = case_actions(case, request.user)
        by_form = {a.form: a for a in actions if a.form}
        buttons = []
        for action in actions:
            if action.form:
                continue
            url_name = "cases_case_transition" if action.transition else "cases_case_action"
            buttons.append(
                {
                    "name": action.name,
                    "label": action.label_for(case),
                    "url": reverse(f"admin:{url_name}", args=[case.pk, action.name]),
                    # An action with a reason or a consequence to confirm opens its confirm
                    # page; the others are a button that posts at once.
                    "confirm": action.needs_reason or bool(action.confirm),
                    "danger": action.danger,
                }
            )
        approval = live_approval(case) if not case.is_terminal else None
        return {
            "next_action": describe_next_action(case, actor=request.user),
            "case_actions": buttons,
            "case_transitions": [b for b in buttons if get_action(b["name"]).transition],
            "case": case,
            "approval": approval,
            "autonomy_status": current_autonomy(),
            "operation_keys": list(case.operations.values_list("key", flat=True)),
            "evidence_form": EvidenceForm(
                initial={"expected_version": case.version}, prefix="evidence"
            )
            if "evidence" in by_form
            else None,
            "evidence_url": reverse("admin:cases_case_evidence", args=[case.pk]),
            "settle_form": SettleForm(initial={"expected_version": case.version}, prefix="settle")
            if "settle" in by_form
            else None,
            "settle_url": reverse("admin:cases_case_settle", args=[case.pk]),
            "prepare_form": PrepareForm(
                initial={"expected_version": case.version, "delivery_date": case.requested_date},
                prefix="prepare",
            )
            if "prepare" in by_form
            else None,
            "prepare_url": reverse("admin:cases_case_prepare", args=[case.pk]),
            "live_url": reverse("live-case", args=[case.reference]),
        }

    # --- buttons ------------------------------------------------------------------------------
    def get_urls(self):
        custom = [
            path(
                "<int:pk>/transition/<str:name>/",
                self.admin_site.admin_view(self.action_view),
                name="cases_case_transition",
            ),
            path(
                "<int:pk>/evidence/",
                self.admin_site.admin_view(self.evidence_view),
                name="cases_case_evidence",
            ),
            path(
                "<int:pk>/do/<str:name>/",
                self.admin_site.admin_view(self.action_view),
                name="cases_case_action",
            ),
            path(
                "<int:pk>/prepare/",
                self.admin_site.admin_view(self.prepare_view),
                name="cases_case_prepare",
            ),
            path(
                "<int:pk>/settle/",
                self.admin_site.admin_view(self.settle_view),
                name="cases_case_settle",
            ),
        ]
        return custom + super().get_urls()

    def _scoped_case(self, request, pk):
        return get_object_or_404(self.get_queryset(request), pk=pk)

    def action_view(self, request, pk, name):
        """One case action: GET confirms what it will do (and asks why), POST runs it.

        Every action is checked and executed by ``cases.actions.action_run``; this view only
        renders its confirm page and the outcome.
        """
        action = get_action(name)
        if action is None or action.execute is None:
            raise Http404(f"No action {name!r}.")
        case = self._scoped_case(request, pk)
        change_url = reverse("admin:cases_case_change", args=[case.pk])
        if request.method != "POST":
            return TemplateResponse(
                request,
                "admin/cases/case/transition_confirm.html",
                {
                    **self.admin_site.each_context(request),
                    "opts": self.model._meta,
                    "case": case,
                    "name": name,
                    "label": action.label_for(case),
                    "consequence": action.confirm_for(case),
                    "confirm_label": action.confirm_label_for(case),
                    "danger": action.danger,
                    "form": ActionForm(
                        initial={"expected_version": case.version},
                        needs_reason=action.needs_reason,
                    ),
                    "title": f"{case.reference}: {action.label_for(case)}",
                },
            )
        form = ActionForm(request.POST, needs_reason=action.needs_reason)
        if not form.is_valid():
            self.message_user(
                request,
                "Nothing was done: "
                + (
                    "give a reason for this action."
                    if "reason" in form.errors
                    else "the page was incomplete; reload it and try again."
                ),
                messages.ERROR,
            )
            return HttpResponseRedirect(change_url)
        try:
            message = action_run(
                case=case,
                name=name,
                actor=request.user,
                expected_version=form.cleaned_data["expected_version"],
                reason=form.cleaned_data["reason"],
            )
        except CaseError as exc:
            self.message_user(request, f"Nothing was done: {exc.detail}", messages.ERROR)
        else:
            self.message_user(request, message, messages.SUCCESS)
        return HttpResponseRedirect(change_url)

    def prepare_view(self, request, pk):
        """A person prepares the proposal by hand, e.g. with a date the customer confirmed."""
        from approvals.services import proposal_prepare_by_hand

        case = self._scoped_case(request, pk)
        change_url = reverse("admin:cases_case_change", args=[case.pk])
        form = PrepareForm(request.POST or None, prefix="prepare")
        if request.method != "POST" or not form.is_valid():
            self.message_user(request, "Proposal not prepared: give a valid date.", messages.ERROR)
            return HttpResponseRedirect(change_url)
        data = form.cleaned_data
        try:
            proposal = proposal_prepare_by_hand(
                case=case,
                actor=request.user,
                delivery_date=data["delivery_date"],
                reason=data["reason"],
                expected_version=data["expected_version"],
            )
        except CaseError as exc:
            self.message_user(request, exc.detail, messages.ERROR)
        else:
            self.message_user(
                request,
                f"Proposal #{proposal.pk} submitted for review as "
                f"{proposal.operation.key}; another approver must decide it.",
                messages.SUCCESS,
            )
        return HttpResponseRedirect(change_url)

    def settle_view(self, request, pk):
        from reconciliation.settle import case_settle_manually

        case = self._scoped_case(request, pk)
        change_url = reverse("admin:cases_case_change", args=[case.pk])
        form = SettleForm(request.POST or None, prefix="settle")
        if request.method != "POST" or not form.is_valid():
            self.message_user(
                request, "Settlement not recorded: fill in every field.", messages.ERROR
            )
            return HttpResponseRedirect(change_url)
        try:
            outcome = case_settle_manually(case=case, actor=request.user, **form.cleaned_data)
        except CaseError as exc:
            self.message_user(request, exc.detail, messages.ERROR)
        else:
            self.message_user(request, f"{case.reference}: settled — {outcome}.", messages.SUCCESS)
        return HttpResponseRedirect(change_url)

    def evidence_view(self, request, pk):
        case = self._scoped_case(request, pk)
        change_url = reverse("admin:cases_case_change", args=[case.pk])
        if request.method != "POST":
            raise PermissionDenied
        form = EvidenceForm(request.POST, prefix="evidence")
        if not form.is_valid():
            errors = "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())
            self.message_user(request, f"Evidence not recorded: {errors}", messages.ERROR)
            return HttpResponseRedirect(change_url)
        data = dict(form.cleaned_data)
        version = data.pop("expected_version")
        try:
            services.evidence_record(
                case=case, expected_version=version, actor=request.user, **data
            )
        except CaseError as exc:
            self.message_user(request, exc.detail, messages.ERROR)
        else:
            self.message_user(request, "Evidence reference recorded.", messages.SUCCESS)
        return HttpResponseRedirect(change_url)


@admin.register(CaseEvent)
class CaseEventAdmin(admin.ModelAdmin):
    list_display = [
        "created_at",
        "case",
        "version",
        "action",
        "from_status",
        "to_status",
        "actor_label",
        "reason",
    ]
    list_filter = [("action", PrintableValuesFilter)]
    search_fields = ["case__reference", "reason", "actor_label"]
    list_select_related = ["case"]

    def get_queryset(self, request):
        return selectors.events_for(request.user).select_related("case")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class CustomerAccountForm(forms.ModelForm):
    change_reason = forms.CharField(
        required=False,
        max_length=REASON_MAX_LENGTH,
        validators=[TextValidator(REASON_MAX_LENGTH)],
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Why the name or email changes (required; kept on each open case's timeline).",
    )

    class Meta:
        model = CustomerAccount
        fields = ["reference", "name", "email", "team"]

    def clean(self):
        data = super().clean()
        changes_contact = self.instance.pk and {"name", "email"} & set(self.changed_data)
        if changes_contact and not (data.get("change_reason") or "").strip():
            self.add_error("change_reason", "Give a reason for the change.")
        return data


@admin.register(CustomerAccount)
class CustomerAccountAdmin(admin.ModelAdmin):
    form = CustomerAccountForm
    list_display = ["reference", "name", "team", "verified", "access_active"]
    list_filter = [("verified", PrintableBooleanFilter), "access_active"]
    search_fields = ["reference", "name"]
    # The team, the reference (the order system's id) and the flags change only through
    # audited services: the actions below; the name and email through ``account_update``.
    readonly_fields = ["reference", "team", "verified", "access_active", "access_revoked_at"]
    actions = ["verify", "revoke_access"]

    def save_model(self, request, obj, form, change):
        if not change:
            super().save_model(request, obj, form, change)
            return
        data = form.cleaned_data
        services.account_update(
            account=obj,
            actor=request.user,
            reason=data.get("change_reason", ""),
            name=data.get("name"),
            email=data.get("email"),
        )

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except CaseError as exc:
            self.message_user(request, f"Nothing was changed: {exc.detail}", messages.ERROR)
            return HttpResponseRedirect(request.path)

    def get_readonly_fields(self, request, obj=None):
        return [
            f for f in self.readonly_fields if obj is not None or f not in {"reference", "team"}
        ]

    @admin.action(description="Mark verified (their new cases start)")
    def verify(self, request, queryset):
        for account in queryset:
            try:
                moved = services.account_verify(account=account, actor=request.user)
            except CaseError as exc:
                self.message_user(request, f"{account.reference}: {exc.detail}", messages.ERROR)
                continue
            self.message_user(
                request,
                f"{account.reference}: verified; {moved} new case(s) started.",
                messages.SUCCESS,
            )

    def get_queryset(self, request):
        return selectors.accounts_for(request.user)

    @admin.action(description="Revoke access (stops and settles every open case)")
    def revoke_access(self, request, queryset):
        from cases.revocation import account_revoke_access

        for account in queryset:
            try:
                results = account_revoke_access(
                    account=account, actor=request.user, reason="Access revoked in the admin"
                )
            except CaseError as exc:
                self.message_user(request, f"{account.reference}: {exc.detail}", messages.ERROR)
                continue
            self.message_user(
                request,
                f"{account.reference}: access revoked; {len(results)} open case(s) revoked.",
                messages.WARNING,
            )

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "default_owner", "default_backup"]
    filter_horizontal = ["members"]

    def get_queryset(self, request):
        return selectors.teams_for(request.user)


@admin.register(StaffProfile)
class StaffProfileAdmin(admin.ModelAdmin):
    list_display = ["user", "away_until"]

    def get_queryset(self, request):
        qs = super().get_queryset(request).select_related("user")
        if request.user.is_superuser:
            return qs
        return qs.filter(user__holdfast_teams__in=selectors.teams_for(request.user)).distinct()

    def get_readonly_fields(self, request, obj=None):
        return ["user"] if obj is not None else []

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "user":
            kwargs["queryset"] = User.objects.filter(
                holdfast_teams__in=selectors.teams_for(request.user)
            ).distinct()
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request, obj, form, change):
        try:
            services.staff_set_away(user=obj.user, away_until=obj.away_until, actor=request.user)
        except CaseError as exc:
            raise PermissionDenied(exc.detail) from exc

    def get_urls(self):
        return [
            path(
                "mark-away/",
                self.admin_site.admin_view(self.mark_away_view),
                name="cases_staffprofile_mark_away",
            ),
            *super().get_urls(),
        ]

    def mark_away_view(self, request):
        """The home page's "Away and back" form: one service call, then back home."""
        home = reverse("admin:index")
        if request.method != "POST":
            return HttpResponseRedirect(home)
        form = AbsenceForm(request.POST, people=selectors.team_people(request.user))
        if not form.is_valid():
            errors = "; ".join(" ".join(v) for v in form.errors.values())
            self.message_user(request, f"Nothing was changed: {errors}", messages.ERROR)
            return HttpResponseRedirect(home)
        person = form.cleaned_data["user"]
        back = request.POST.get("mark") == "back"
        until = None if back else form.cleaned_data["away_until"]
        if not back and until is None:
            self.message_user(
                request, "Nothing was changed: say until when they are away.", messages.ERROR
            )
            return HttpResponseRedirect(home)
        try:
            services.staff_set_away(user=person, away_until=until, actor=request.user)
        except CaseError as exc:
            self.message_user(request, f"Nothing was changed: {exc.detail}", messages.ERROR)
            return HttpResponseRedirect(home)
        name = person.get_full_name() or person.get_username()
        if back:
            text = f"{name} is back: their cases are theirs again."
        else:
            text = (
                f"{name} is away until {until:%Y-%m-%d}: their cases fall to their named "
                "backups (each case's timeline says so)."
            )
        self.message_user(request, text, messages.SUCCESS)
        return HttpResponseRedirect(home)

    def has_delete_permission(self, request, obj=None):
        return False


class _QueueAdmin(admin.ModelAdmin):
    """A read-only work queue over cases; each row links to the case page."""

    status: str = ""
    list_select_related = ["account", "owner__staff_profile", "backup", "team"]
    search_fields = ["reference", "order_id", "account__reference"]

    def get_queryset(self, request):
        return selectors.cases_for(request.user).filter(status=self.status).order_by("updated_at")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_view_permission(self, request, obj=None):
        return request.user.has_perm("cases.view_case")

    def get_model_perms(self, request):
        return {"view": self.has_view_permission(request)}

    # Bulk actions are offered only to those the action itself would admit (an auditor sees
    # none); each case is still checked on its own team by cases.actions.action_run.
    def has_lead_permission(self, request):
        return request.user.has_perm("cases.lead_case")

    def has_work_permission(self, request):
        return request.user.has_perm("cases.work_case")

    @admin.display(description="case")
    def case_link(self, case):
        url = reverse("admin:cases_case_change", args=[case.pk])
        return format_html('<a href="{}">{}</a>', url, case.reference)

    @admin.display(description="responsible now")
    def responsible(self, case):
        return case.responsible_now

    @admin.display(description="since")
    def since(self, case):
        event = case.events.filter(to_status=self.status).order_by("-id").first()
        return timezone.localtime(event.created_at).strftime("%Y-%m-%d %H:%M") if event else "—"

    @admin.display(description="why")
    def why(self, case):
        return case.last_error or case.waiting_reason

    @admin.display(description="next check", ordering="next_check_at")
    def next_check(self, case):
        if case.next_check_at is None:
            return "—"
        return timezone.localtime(case.next_check_at).strftime("%Y-%m-%d %H:%M")


@admin.register(HeldCase)
class HeldCaseAdmin(_QueueAdmin):
    status = "held"
    list_display = [
        "case_link",
        "owner",
        "responsible",
        "why",
        "since",
        "next_check",
        "evidence_so_far",
    ]
    actions = ["reconcile_now"]

    @admin.display(description="evidence so far")
    def evidence_so_far(self, case):
        latest = case.evidence.order_by("-captured_at").first()
        count = case.evidence.count()
        return f"{count}: latest {latest.external_reference}" if latest else "none"

    @admin.action(description="Reconcile now (fence, then look)", permissions=["lead"])
    def reconcile_now(self, request, queryset):
        _run_on_each(self, request, queryset, "reconcile", "")


def _run_on_each(model_admin, request, queryset, name: str, reason: str) -> None:
    """A queue's bulk action: the same checked action as the case page's button, per case."""
    for case in queryset:
        try:
            message = action_run(
                case=case,
                name=name,
                actor=request.user,
                expected_version=case.version,
                reason=reason,
            )
        except CaseError as exc:
            model_admin.message_user(
                request, f"{case.reference}: nothing was done: {exc.detail}", messages.ERROR
            )
        else:
            model_admin.message_user(request, message, messages.SUCCESS)


@admin.register(AttentionCase)
class AttentionCaseAdmin(_QueueAdmin):
    status = "needs_attention"
    list_display = [
        "case_link",
        "owner",
        "responsible",
        "why",
        "since",
        "confirmed_steps",
        "next_check",
    ]
    actions = ["check_source_now"]

    @admin.action(
        description="Check the source now (a worker reads the order again)", permissions=["work"]
    )
    def check_source_now(self, request, queryset):
        _run_on_each(
            self, request, queryset, "request_source_check", "Asked from the needs-attention queue"
        )

    @admin.display(description="confirmed steps")
    def confirmed_steps(self, case):
        attempt = case.attempts.order_by("-sequence").first()
        if attempt is None or not attempt.last_confirmed_step:
            return "none"
        return attempt.get_last_confirmed_step_display()
