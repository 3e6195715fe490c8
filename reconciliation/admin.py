"""Admin for order-system profiles: read-only history, and a "Run probe" button that calls the
probe service (the same code path as ``manage.py probe_order_system``)."""

from __future__ import annotations

import json

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode

from cases import kinds
from reconciliation.models import CAPABILITIES, OrderSystemProfile
from reconciliation.probe import ProbeRefused, order_system_probe, probe_changes_words

RUN_PROBE_PERMISSION = "reconciliation.run_probe"


def _sandbox_choices() -> list[tuple[str, str]]:
    """The sandbox orders as they are configured now (read each time the form is used)."""
    return [(order, order) for order in settings.ORDER_SYSTEM_SANDBOX_ORDERS]


class RunProbeForm(forms.Form):
    sandbox_order_id = forms.ChoiceField(
        label="Sandbox order",
        choices=_sandbox_choices,
        help_text="An order reserved for probing, never a customer's. The probe changes it "
        "and changes it back, as said above.",
    )


def may_run_probe(user) -> bool:
    return bool(user.is_active and (user.is_superuser or user.has_perm(RUN_PROBE_PERMISSION)))


@admin.register(OrderSystemProfile)
class OrderSystemProfileAdmin(admin.ModelAdmin):
    list_display = (
        "probed_at",
        "base_url",
        "autonomy",
        "probed_by_name",
        "reachable",
        *CAPABILITIES,
    )
    list_filter = ("autonomy", "base_url")
    date_hierarchy = "probed_at"
    change_list_template = "admin/reconciliation/ordersystemprofile/change_list.html"
    fieldsets = (
        (None, {"fields": ("base_url", "sandbox_order_id", "probed_at", "probed_by_name")}),
        ("Autonomy", {"fields": ("autonomy", "autonomy_reason", "reachable")}),
        ("Verified capabilities", {"fields": (*CAPABILITIES, "claimed_display")}),
        ("Evidence", {"fields": ("evidence_display",)}),
    )

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="Claimed by /capabilities")
    def claimed_display(self, obj: OrderSystemProfile):
        return format_html("<pre>{}</pre>", json.dumps(obj.claimed, indent=2, sort_keys=True))

    @admin.display(description="Evidence")
    def evidence_display(self, obj: OrderSystemProfile):
        """Each check the probe made, then each kind of change it probed (what it sent the
        sandbox order, what came back), then the setup's requests."""
        found_kinds = obj.evidence.get("kinds") or {}
        checks = [
            (obj.evidence.get(name) or {}, CAPABILITIES[name].capitalize()) for name in CAPABILITIES
        ]
        checks += [
            (found_kinds.get(kind.code) or {}, f"{kind.label}: the kind's own probe")
            for kind in kinds.kinds()
            if isinstance(found_kinds.get(kind.code), dict)
        ]
        sections = []
        for check, title in checks:
            steps = format_html_join(
                "",
                "<li><code>{}</code> → {} {} <small>({} ms)</small>{}</li>",
                (
                    (
                        step.get("request", ""),
                        step.get("status") or "no answer",
                        step.get("error") or "",
                        step.get("ms", ""),
                        f" — {step['detail']}" if step.get("detail") else "",
                    )
                    for step in check.get("steps", [])
                ),
            )
            sections.append(
                format_html(
                    "<h4>{} {}</h4><p>{}</p><ul>{}</ul>",
                    "✓" if check.get("verified") else "✗",
                    title,
                    check.get("summary", ""),
                    steps,
                )
            )
        setup = json.dumps(obj.evidence.get("setup", []), indent=2)
        return format_html(
            "{}<details><summary>Setup requests</summary><pre>{}</pre></details>",
            format_html_join("", "{}", ((s,) for s in sections)),
            setup,
        )

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields] + ["claimed_display", "evidence_display"]

    def get_urls(self):
        urls = super().get_urls()
        custom = [
            path(
                "run-probe/",
                self.admin_site.admin_view(self.run_probe_view),
                name="reconciliation_ordersystemprofile_run_probe",
            )
        ]
        return custom + urls

    def changelist_view(self, request, extra_context=None):
        extra_context = {**(extra_context or {}), "may_run_probe": may_run_probe(request.user)}
        return super().changelist_view(request, extra_context)

    def run_probe_view(self, request):
        if not may_run_probe(request.user):
            raise PermissionDenied
        if request.method == "POST":
            form = RunProbeForm(request.POST)
            if form.is_valid():
                try:
                    profile = order_system_probe(
                        sandbox_order_id=form.cleaned_data["sandbox_order_id"],
                        actor=request.user,
                    )
                except ProbeRefused as exc:
                    self.message_user(request, str(exc), messages.ERROR)
                    return redirect(reverse("admin:reconciliation_ordersystemprofile_run_probe"))
                level = messages.SUCCESS if profile.reachable else messages.ERROR
                self.message_user(
                    request,
                    f"Probe recorded: {profile.get_autonomy_display()}. {profile.reason}",
                    level,
                )
                return redirect(
                    reverse("admin:reconciliation_ordersystemprofile_change", args=[profile.pk])
                )
        else:
            form = RunProbeForm()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Run the order-system probe",
            "form": form,
            "changes": probe_changes_words(),
        }
        return TemplateResponse(
            request, "admin/reconciliation/ordersystemprofile/run_probe.html", context
        )


# --- Inbound order events -----------------------------------------------------------------------

from cases.admin.inlines import breakable  # noqa: E402
from cases.admin.search import IndexedSearchMixin  # noqa: E402
from cases.paging import BoundedCountAdminMixin  # noqa: E402
from reconciliation.inbound import ORDER_UPDATED, inbound_event_process  # noqa: E402
from reconciliation.models import InboundEvent  # noqa: E402
from reconciliation.selectors import (  # noqa: E402
    may_process_inbound_events,
    may_see_inbound_events,
)


class InboundTypeFilter(admin.SimpleListFilter):
    """The event's type: the one Holdfast acts on, or any other (kept, never acted on). Its
    choices are fixed: the admin's own filter would read every event for the types it holds."""

    title = "type"
    parameter_name = "type"

    def lookups(self, request, model_admin):
        return [(ORDER_UPDATED, ORDER_UPDATED), ("other", "Other types")]

    def queryset(self, request, queryset):
        if self.value() == ORDER_UPDATED:
            return queryset.filter(type=ORDER_UPDATED)
        if self.value() == "other":
            return queryset.exclude(type=ORDER_UPDATED)
        return queryset


@admin.register(InboundEvent)
class InboundEventAdmin(IndexedSearchMixin, BoundedCountAdminMixin, admin.ModelAdmin):
    """Receipts and their processing, read-only; "process again" calls the service.

    A page costs the same however many events arrived: newest first through
    ``recon_inbound_received``, counted at most 1,000 past the page (``cases.paging``), searched
    field by field through each field's trigram index (``cases.admin.search``), filtered by
    fixed choices and by a date range (no date hierarchy: its years and months are read from
    every event)."""

    # What a lead reads first is the state and the error: the other columns stay narrow (the
    # order and its version in one, the processing with its attempts and next try in one, ids
    # breaking only at their dashes), so that every column fits a desktop window beside the
    # filters (``tests/browser/test_layout.py``).
    list_display = ("received", "event", "order", "state", "short_error")
    list_display_links = ("received",)
    list_filter = ("processing", InboundTypeFilter, ("received_at", admin.DateFieldListFilter))
    search_fields = ("event_id", "order_id")
    show_full_result_count = False
    actions = ["process_again"]
    fieldsets = (
        (None, {"fields": ("event_id", "type", "order_id", "order_version", "occurred_at")}),
        ("Receipt", {"fields": ("received_at", "last_received_at", "deliveries", "body")}),
        (
            "Processing",
            {
                "fields": (
                    "processing",
                    "attempts",
                    "next_attempt_at",
                    "processed_at",
                    "last_error",
                    "outcome",
                )
            },
        ),
    )

    def get_queryset(self, request):
        # Only events whose order belongs to the account of one of the caller's teams' cases
        # (the account the order system reported, never the order id alone); for an operator,
        # also those no team owns yet.
        from reconciliation.selectors import inbound_events_for

        return inbound_events_for(request.user, unowned=True)

    def has_module_permission(self, request):
        return may_see_inbound_events(request.user)

    def has_view_permission(self, request, obj=None):
        return may_see_inbound_events(request.user)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    @admin.display(description="Received", ordering="received_at")
    def received(self, obj: InboundEvent) -> str:
        when = f"{timezone.localtime(obj.received_at):%Y-%m-%d %H:%M:%S %Z}"
        return when if obj.deliveries == 1 else f"{when} ({obj.deliveries} deliveries)"

    @admin.display(description="Event", ordering="event_id")
    def event(self, obj: InboundEvent) -> str:
        return breakable(obj.event_id, at="-_.:")

    @admin.display(description="Order: version", ordering="order_id")
    def order(self, obj: InboundEvent) -> str:
        return breakable(f"{obj.order_id} v{obj.order_version}", at="-_.:")

    @admin.display(description="Processing", ordering="processing")
    def state(self, obj: InboundEvent) -> str:
        """``Failed, 3 attempts, next 2026-12-02 03:27:00 UTC``: the state and what comes next."""
        parts = [obj.get_processing_display()]
        if obj.attempts != 1 or obj.processing != InboundEvent.Processing.PROCESSED:
            parts.append(f"{obj.attempts} attempt{'' if obj.attempts == 1 else 's'}")
        if obj.next_attempt_at is not None:
            parts.append(f"next {timezone.localtime(obj.next_attempt_at):%Y-%m-%d %H:%M:%S %Z}")
        return ", ".join(parts)

    @admin.display(description="Last error")
    def short_error(self, obj: InboundEvent) -> str:
        return obj.last_error[:120]

    def has_process_permission(self, request):
        """The "process again" action is offered to who may use it (not to an auditor)."""
        return may_process_inbound_events(request.user)

    @admin.action(
        description="Process again (changes nothing already processed)", permissions=["process"]
    )
    def process_again(self, request, queryset):
        if not may_process_inbound_events(request.user):
            raise PermissionDenied
        results: dict[str, int] = {}
        for event_id in queryset.values_list("event_id", flat=True):
            status = inbound_event_process(event_id=event_id)
            results[status] = results.get(status, 0) + 1
        summary = ", ".join(f"{count} {status}" for status, count in sorted(results.items()))
        level = messages.WARNING if results.get("failed") else messages.SUCCESS
        self.message_user(request, f"Processed again: {summary or 'nothing selected'}.", level)


# --- what reconciliation adds to the case admin (``cases.admin.case_admin_extend``) -----------

from collections.abc import Mapping  # noqa: E402
from typing import Any  # noqa: E402

from django.db.models import QuerySet  # noqa: E402
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect  # noqa: E402

from cases.actions import case_actions  # noqa: E402
from cases.admin import CaseForm, CaseRevoker, case_admin_extend, change_url, person  # noqa: E402
from cases.admin.forms import errors_in_words  # noqa: E402
from cases.exceptions import CaseError  # noqa: E402
from cases.models import (  # noqa: E402
    Case,
    CustomerAccount,
    Status,  # noqa: E402
)
from cases.validation import MAX_ORDER_VERSION  # noqa: E402
from reconciliation import revocation  # noqa: E402
from reconciliation.client import Order, OrderSystemClient  # noqa: E402
from reconciliation.exceptions import OrderSystemError, UnknownOrder  # noqa: E402
from reconciliation.held_evidence import HeldEvidence, held_evidence  # noqa: E402
from reconciliation.selectors import current_autonomy  # noqa: E402
from reconciliation.settle import case_settle_manually  # noqa: E402


class SettleForm(forms.Form):
    """A settlement from evidence, for ``reconciliation.settle.case_settle_manually``."""

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


def settle_view(
    model_admin: admin.ModelAdmin[Case], request: HttpRequest, case: Case
) -> HttpResponse:
    """The "Record the settlement from evidence" form: one ``case_settle_manually`` call."""
    back = change_url(case)
    form = SettleForm(request.POST or None, prefix="settle")
    if request.method != "POST" or not form.is_valid():
        # What is wrong, by field: "fill in every field" was said of fields filled in too long.
        why = errors_in_words(form) if request.method == "POST" else "nothing was sent"
        model_admin.message_user(request, f"Settlement not recorded: {why}", messages.ERROR)
        return HttpResponseRedirect(back)
    try:
        outcome = case_settle_manually(case=case, actor=person(request), **form.cleaned_data)
    except CaseError as exc:
        model_admin.message_user(request, exc.detail, messages.ERROR)
    else:
        model_admin.message_user(
            request, f"{case.reference}: settled — {outcome}.", messages.SUCCESS
        )
    return HttpResponseRedirect(back)


def case_page_context(request: HttpRequest, case: Case) -> Mapping[str, Any]:
    """The order system's autonomy for the case's kind of change, shown on every case page;
    on a held case, the evidence to decide it from (``reconciliation.held_evidence``) and a
    settlement form that cites it."""
    context: dict[str, Any] = {"autonomy_status": current_autonomy(kind=case.kind)}
    if case.status != Status.HELD:
        return context
    evidence = held_evidence(request.user, case)
    if not may_see_inbound_events(request.user):
        evidence = HeldEvidence(read=evidence.read)
    context["held_evidence"] = evidence
    if any(a.name == "settle" for a in case_actions(case, request.user)):
        context["settle_form"] = SettleForm(
            initial={
                "expected_version": case.version,
                "external_reference": (
                    f"operation:{evidence.read.operation_key} (consistent lookup)"
                    if evidence.read.operation_key
                    else ""
                ),
                "order_version": evidence.read.order_version,
            },
            prefix="settle",
        )
    return context


def order_events_url(user: Any, order_id: str) -> str | None:
    """The inbound events list narrowed to ``order_id``, for a person who may see it."""
    if not may_see_inbound_events(user):
        return None
    url = reverse("admin:reconciliation_inboundevent_changelist")
    return f"{url}?{urlencode({'q': order_id})}" if order_id else url


def revoke_case(*, case: Case, actor: Any, kind: str, reason: str) -> str:
    """The case admin's "Delete": revoke the case's authority, say what happened."""
    result = revocation.case_revoke(case=case, actor=actor, kind=kind, reason=reason)
    return revocation.describe_revocation(result)


@admin.action(description="Revoke access (stops and settles every open case)", permissions=["lead"])
def revoke_access(
    model_admin: admin.ModelAdmin[CustomerAccount],
    request: HttpRequest,
    queryset: QuerySet[CustomerAccount],
) -> None:
    """The accounts' bulk action: ``account_revoke_access`` on each selected account."""
    for account in queryset:
        try:
            results = revocation.account_revoke_access(
                account=account, actor=person(request), reason="Access revoked in the admin"
            )
        except CaseError as exc:
            model_admin.message_user(request, f"{account.reference}: {exc.detail}", messages.ERROR)
            continue
        model_admin.message_user(
            request,
            f"{account.reference}: access revoked; {len(results)} open case(s) revoked.",
            messages.WARNING,
        )


def read_order(order_id: str) -> tuple[Order | None, str]:
    """The intake page's read of an order (outside any transaction): the order, or None and
    why not in words; None and "" when the order system has no such order (the page says it
    in the words it uses for another account's order)."""
    try:
        with OrderSystemClient.from_settings() as client:
            return client.get_order(order_id), ""
    except UnknownOrder:
        return None, ""
    except OrderSystemError as exc:
        return None, (
            f"The order system could not be asked ({exc.error}); the case's source check reads "
            "the order again before anything is proposed."
        )


case_admin_extend(
    order_reader=read_order,
    forms=[
        CaseForm(
            name="settle",
            build=lambda case: SettleForm(
                initial={"expected_version": case.version}, prefix="settle"
            ),
            view=settle_view,
        )
    ],
    context=case_page_context,
    revoker=CaseRevoker(offered=revocation.revocation_offered, run=revoke_case),
    account_actions=[revoke_access],
    order_events_url=order_events_url,
)
