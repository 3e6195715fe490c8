"""The support desk: find a case, see why it waits and who must answer, act through services.

Every queryset is scoped to the user's teams (``cases.selectors``); every button calls a
service; nothing is hard-deleted from here.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django_fsm import can_proceed

from approvals.admin import OperationInline, ProposalInline
from approvals.services import live_approval
from cases import selectors, services
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
from reconciliation.selectors import current_autonomy

User = get_user_model()

admin.site.site_header = "Holdfast case desk"
admin.site.site_title = "Holdfast"
admin.site.index_title = "What needs a person now"
admin.site.index_template = "admin/holdfast_index.html"


class CaseEventInline(ReadOnlyInline):
    model = CaseEvent
    verbose_name_plural = "Timeline (append-only audit trail)"
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


class CancellationInline(ReadOnlyInline):
    model = CancellationRequest
    verbose_name_plural = "Cancellation requests"
    fields = ["requested_at", "requested_by_label", "via", "reason", "outcome", "settled_at"]
    readonly_fields = fields


# --- list filters ------------------------------------------------------------------------------


class _TeamMemberFilter(admin.SimpleListFilter):
    def lookups(self, request, model_admin):
        users = User.objects.filter(holdfast_teams__in=selectors.teams_for(request.user))
        return [(u.pk, u.get_username()) for u in users.distinct().order_by("username")]


class OwnerFilter(_TeamMemberFilter):
    title = "owner"
    parameter_name = "owner"

    def queryset(self, request, queryset):
        return queryset.filter(owner_id=self.value()) if self.value() else queryset


class ResponsibleNowFilter(_TeamMemberFilter):
    title = "responsible now"
    parameter_name = "responsible"

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        user = User.objects.filter(pk=self.value()).first()
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
        return queryset.filter(team_id=self.value()) if self.value() else queryset


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


class TransitionForm(forms.Form):
    expected_version = forms.IntegerField(widget=forms.HiddenInput)
    reason = forms.CharField(max_length=2000)


class ExpectedVersionForm(forms.Form):
    expected_version = forms.IntegerField(min_value=1)
    reason = forms.CharField(required=False, max_length=500)


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
    outcome = forms.ChoiceField(
        choices=[("applied", "The change IS applied"), ("absent", "The change is NOT applied")]
    )
    external_reference = forms.CharField(
        max_length=200, help_text="Where the evidence is: ticket, screen, log."
    )
    summary = forms.CharField(max_length=280, help_text="What the evidence shows.")
    order_version = forms.IntegerField(
        required=False, min_value=1, help_text="The order version it shows, if known."
    )


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
        "status",
        "waiting_on",
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
        # piece of unsettled work under it is reconciled by cases.revocation.
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
        from cases.revocation import case_revoke

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
            if result.already:
                text = f"{case.reference}: already revoked or closed; nothing to do."
            elif result.settled:
                text = f"{case.reference}: authority revoked; nothing was in flight, stopped."
            else:
                text = (
                    f"{case.reference}: authority revoked; cancellation requested for "
                    f"{', '.join(result.cancel_requested) or 'no running attempt'}"
                    f"{'; outcome unknown, held for reconciliation' if result.uncertain else ''}"
                    f"; fence {'raised' if result.fenced else 'NOT raised (retrying)'}. "
                    "The case stays until its work is settled."
                )
            self.message_user(request, text, messages.WARNING)

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
        from cases.services import available_transitions, transition_meta

        transitions = [
            {
                "name": name,
                "label": transition_meta(name)["custom"].get("label", name),
                "url": reverse("admin:cases_case_transition", args=[case.pk, name]),
            }
            for name in available_transitions(case, request.user)
        ]
        can_add_evidence = services.actor_may(request.user, "cases.add_evidencereference", case)
        return {
            "next_action": describe_next_action(case),
            "case_transitions": transitions,
            "evidence_form": EvidenceForm(
                initial={"expected_version": case.version}, prefix="evidence"
            )
            if can_add_evidence
            else None,
            "evidence_url": reverse("admin:cases_case_evidence", args=[case.pk]),
            "case": case,
            "approval": live_approval(case),
            "autonomy_status": current_autonomy(),
            "operation_keys": list(case.operations.values_list("key", flat=True)),
            "case_buttons": self._case_buttons(request, case),
            "settle_form": SettleForm(initial={"expected_version": case.version}, prefix="settle")
            if case.status == "held" and services.actor_may(request.user, "cases.lead_case", case)
            else None,
            "settle_url": reverse("admin:cases_case_settle", args=[case.pk]),
            "prepare_form": PrepareForm(
                initial={"expected_version": case.version, "delivery_date": case.requested_date},
                prefix="prepare",
            )
            if case.status in {"preparing_proposal", "awaiting_review", "ready"}
            and services.actor_may(request.user, "cases.work_case", case)
            else None,
            "prepare_url": reverse("admin:cases_case_prepare", args=[case.pk]),
        }

    def _case_buttons(self, request, case):
        """Workflow buttons beyond plain transitions, each backed by one service."""
        lead = services.actor_may(request.user, "cases.lead_case", case)
        worker = services.actor_may(request.user, "cases.work_case", case)
        buttons = []
        if case.status == "held" and lead:
            buttons.append(("reconcile", "Reconcile now (fence, then look)"))
        if case.status == "ready" and lead and not current_autonomy().is_autonomous:
            buttons.append(("authorize", "Start the apply (supervised)"))
        if case.status == "done" and worker and case.has_late_cancellation():
            buttons.append(("reversal", "Propose reversal (new proposal, new approval)"))
        if not case.is_terminal and case.revoked_at is None and lead and not can_proceed(case.stop):
            # With work in flight a plain stop is refused; withdrawing revokes authority and
            # settles what is running (the plain "Stop the work" covers the rest).
            buttons.append(("withdraw", "Withdraw (revoke authority, settle work in flight)"))
        if lead and case.purged_at is None:
            # The button names the state it asks for: a stale page cannot flip a hold back.
            buttons.append(
                ("lift_legal_hold", "Lift the legal hold")
                if case.legal_hold
                else ("place_legal_hold", "Place a legal hold (blocks purging)")
            )
        return [
            {"label": label, "url": reverse("admin:cases_case_action", args=[case.pk, name])}
            for name, label in buttons
        ]

    # --- buttons ------------------------------------------------------------------------------
    def get_urls(self):
        custom = [
            path(
                "<int:pk>/transition/<str:name>/",
                self.admin_site.admin_view(self.transition_view),
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

    def transition_view(self, request, pk, name):
        if name not in services.MANUAL_TRANSITIONS:
            raise Http404(f"No manual action {name!r}.")
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
                    "label": services.transition_meta(name)["custom"].get("label", name),
                    "form": TransitionForm(initial={"expected_version": case.version}),
                    "title": f"{case.reference}: confirm",
                },
            )
        form = TransitionForm(request.POST)
        if not form.is_valid():
            self.message_user(request, "Give a reason for this action.", messages.ERROR)
            return HttpResponseRedirect(change_url)
        try:
            services.case_transition(
                case=case, transition=name, actor=request.user, **form.cleaned_data
            )
        except CaseError as exc:
            self.message_user(request, exc.detail, messages.ERROR)
        else:
            self.message_user(request, f"{case.reference}: done.", messages.SUCCESS)
        return HttpResponseRedirect(change_url)

    def action_view(self, request, pk, name):
        """POST-only workflow buttons; each calls exactly one service."""
        from cases.claims import case_authorize_apply
        from reconciliation.settle import case_propose_reversal, case_reconcile

        case = self._scoped_case(request, pk)
        change_url = reverse("admin:cases_case_change", args=[case.pk])
        if request.method != "POST":
            return HttpResponseRedirect(change_url)
        form = ExpectedVersionForm(request.POST)
        if not form.is_valid():
            self.message_user(
                request, "The page was incomplete; reload it and try again.", messages.ERROR
            )
            return HttpResponseRedirect(change_url)
        version = form.cleaned_data["expected_version"]
        try:
            if name == "reconcile":
                if not services.actor_may(request.user, "cases.lead_case", case):
                    raise PermissionDenied
                outcome = case_reconcile(case_id=case.pk, actor=request.user)
                message = f"{case.reference}: reconciliation — {outcome}."
            elif name == "authorize":
                case_authorize_apply(case=case, actor=request.user, expected_version=version)
                message = f"{case.reference}: apply started; a worker claims it now."
            elif name == "reversal":
                proposal = case_propose_reversal(
                    case=case, actor=request.user, expected_version=version
                )
                message = (
                    f"{case.reference}: reversal proposed (proposal #{proposal.pk}); it "
                    "needs its own approval."
                )
            elif name in {"place_legal_hold", "lift_legal_hold"}:
                hold = name == "place_legal_hold"
                services.case_set_legal_hold(
                    case=case,
                    actor=request.user,
                    hold=hold,
                    expected_version=version,
                    reason=form.cleaned_data["reason"] or "Changed in the admin",
                )
                message = f"{case.reference}: legal hold {'set' if hold else 'lifted'}."
            elif name == "withdraw":
                self._revoke(
                    request,
                    [case],
                    "withdrawn",
                    reason=request.POST.get("reason") or "Withdrawn in the admin",
                )
                return HttpResponseRedirect(change_url)
            else:
                raise Http404(f"No action {name!r}.")
        except CaseError as exc:
            self.message_user(request, exc.detail, messages.ERROR)
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
    list_filter = ["action"]
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


@admin.register(CustomerAccount)
class CustomerAccountAdmin(admin.ModelAdmin):
    list_display = ["reference", "name", "team", "verified", "access_active"]
    list_filter = ["verified", "access_active"]
    search_fields = ["reference", "name"]
    # The team, the reference (the order system's id) and the flags change only through
    # audited services: the actions below.
    readonly_fields = ["reference", "team", "verified", "access_active", "access_revoked_at"]
    actions = ["verify", "revoke_access"]

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

    @admin.action(description="Reconcile now (fence, then look)")
    def reconcile_now(self, request, queryset):
        from reconciliation.settle import case_reconcile

        for case in queryset:
            if not services.actor_may(request.user, "cases.lead_case", case):
                self.message_user(
                    request, f"{case.reference}: only leads reconcile.", messages.ERROR
                )
                continue
            outcome = case_reconcile(case_id=case.pk, actor=request.user)
            self.message_user(request, f"{case.reference}: {outcome}", messages.INFO)


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
    actions = None

    @admin.display(description="confirmed steps")
    def confirmed_steps(self, case):
        attempt = case.attempts.order_by("-sequence").first()
        if attempt is None or not attempt.last_confirmed_step:
            return "none"
        return attempt.get_last_confirmed_step_display()
