"""The approver's queue: one exact proposal, its evidence, Approve and Reject via services."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils import timezone
from django.utils.formats import date_format

from approvals import selectors, services
from approvals.models import Approval, Operation, Proposal
from cases import selectors as case_selectors
from cases.admin import (
    CaseForm,
    ReadOnlyInline,
    case_admin_extend,
    change_url,
    person,
    timeline_url,
)
from cases.admin.forms import errors_in_words
from cases.exceptions import CaseError
from cases.models import Case
from cases.next_action import person_here_or_away
from cases.paging import BoundedCountAdminMixin


class ProposalInline(ReadOnlyInline):
    model = Proposal
    verbose_name_plural = "Proposal history"
    fields = readonly_fields = (
        "created_at",
        "description",
        "evidence_order_version",
        "operation",
        "prepared_by_label",
        "status",
        "status_reason",
    )
    ordering = ["-created_at"]
    show_change_link = True

    def get_queryset(self, request):
        visible = selectors.proposals_for(request.user).values("pk")
        return super().get_queryset(request).filter(pk__in=visible)


class OperationInline(ReadOnlyInline):
    model = Operation
    verbose_name_plural = "Operations (idempotency keys at the order system)"
    fields = readonly_fields = (
        "key",
        "order_id",
        "description",
        "created_at",
        "confirmed_at",
        "result_order_version",
    )

    def get_queryset(self, request):
        visible = selectors.operations_for(request.user).values("pk")
        return super().get_queryset(request).filter(pk__in=visible)


class ApprovalInline(ReadOnlyInline):
    model = Approval
    fk_name = "proposal"
    fields = readonly_fields = (
        "reference",
        "decision",
        "decided_by",
        "decided_at",
        "expires_at",
        "revoked_at",
        "revoked_reason",
        "reason",
    )

    def get_queryset(self, request):
        visible = selectors.approvals_for(request.user).values("pk")
        return super().get_queryset(request).filter(pk__in=visible)


class ApproveForm(forms.Form):
    expires_at = forms.DateTimeField(
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    reason = forms.CharField(required=False, max_length=2000)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The browser's picker has no zone: the time typed is read in the server's (TIME_ZONE).
        zone = timezone.get_current_timezone_name()
        self.fields["expires_at"].label = f"Expires at ({zone})"
        self.fields[
            "expires_at"
        ].help_text = f"A date and time in {zone}. Leave empty for the policy default."


class RejectForm(forms.Form):
    reason = forms.CharField(max_length=2000, help_text="Required: the owner reads it.")


class StatusFilter(admin.SimpleListFilter):
    """The proposals by status; the list opens on the approvers' queue (``changelist_view``),
    so "All" is a value of its own (``status=all``): without the parameter the list would open
    the queue again, and every proposal at once could never be listed."""

    title = "status"
    parameter_name = "status"
    ALL = "all"

    def lookups(self, request, model_admin):
        return Proposal.Status.choices

    def choices(self, changelist):
        first, *rest = super().choices(changelist)
        yield {
            **first,
            "selected": self.value() == self.ALL,
            "query_string": changelist.get_query_string({self.parameter_name: self.ALL}),
        }
        yield from rest

    def queryset(self, request, queryset):
        if self.value() == Proposal.Status.AWAITING_REVIEW:
            return selectors.awaiting_review(queryset)  # the approvers' queue
        if self.value() in (None, self.ALL):
            return queryset
        return queryset.filter(status=self.value())


def _applied_version(proposal: Proposal) -> int | None:
    """The order version this proposal's own confirmed write made, or None."""
    operation = proposal.operation
    if operation is None or operation.confirmed_at is None:
        return None
    return operation.result_order_version


@admin.register(Proposal)
class ProposalAdmin(BoundedCountAdminMixin, admin.ModelAdmin):
    """Proposals awaiting review for the approver's teams, oldest first."""

    change_form_template = "admin/approvals/proposal/change_form.html"
    # The row's link names the proposal and its case; the exact change follows in words, once
    # (the proposal's own name repeats it, and broke the queue's first column into a letter
    # strip beside it on a desktop).
    list_display = [
        "proposal_and_case",
        "change_display",
        "evidence_version",
        "operation",
        "preparer",
        "status",
        "submitted_at",
        "expiry_if_approved",
    ]
    list_filter = [StatusFilter]
    search_fields = ["case__reference", "order_id", "operation__key"]
    ordering = ["submitted_at", "pk"]
    # The page counts its filtered rows once; no second COUNT(*) over every visible proposal,
    # and at most 1,000 past the page (``cases.paging``).
    show_full_result_count = False
    # The rows' relations, as ``selectors.queue_rows`` reads them (not every foreign key).
    list_select_related = ["case", "operation"]
    readonly_fields = fields = (
        "case",
        "order_id",
        "description",
        "evidence_order_version",
        # Not "evidence_ids" ([5], the rows' ids): the page lists the evidence in words.
        "advisory_note",
        "content_hash",
        "operation",
        "prepared_by_label",
        "status",
        "status_reason",
        "created_at",
        "submitted_at",
        "outcome",
    )
    inlines = [ApprovalInline]
    actions = None

    def get_queryset(self, request):
        proposals = selectors.proposals_for(request.user)
        match = request.resolver_match
        if match is not None and match.url_name == "approvals_proposal_changelist":
            # A page of rows, as the API's queue reads them (``selectors.queue_rows``); the
            # decision page reads its proposal whole.
            proposals = selectors.queue_rows(proposals)
        return proposals

    def history_view(self, request, object_id, extra_context=None):
        """A proposal's history is its case's timeline (prepared, submitted, decided, applied,
        each from the audit trail): Django's history page read "This object doesn't have a
        change history" for every proposal, since none is edited through this form."""
        proposal = self.get_object(request, unquote(object_id))
        if proposal is None:  # Django's answer for an id this person may not open
            return super().history_view(request, object_id, extra_context)
        return HttpResponseRedirect(timeline_url(proposal.case))

    def changelist_view(self, request, extra_context=None):
        if "status" not in request.GET and not request.GET.get("q"):
            query = request.GET.copy()
            query["status"] = Proposal.Status.AWAITING_REVIEW
            return HttpResponseRedirect(f"{request.path}?{query.urlencode()}")
        return super().changelist_view(request, extra_context)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="outcome")
    def outcome(self, proposal):
        """What became of it. It was "Closed at: –" for an applied proposal: a proposal is
        closed only when it ends unapplied (rejected, superseded, invalidated, withdrawn)."""
        when = "%Y-%m-%d %H:%M:%S %Z"
        operation = proposal.operation
        if proposal.closed_at is not None:
            closed = timezone.localtime(proposal.closed_at)
            return f"{proposal.get_status_display()} at {closed:{when}}."
        if operation is not None and operation.confirmed_at is not None:
            confirmed = timezone.localtime(operation.confirmed_at)
            version = operation.result_order_version
            made = f", which made order version {version}" if version else ""
            return (
                f"Applied to the order by operation {operation.key}, confirmed at "
                f"{confirmed:{when}}{made}."
            )
        if proposal.status == Proposal.Status.APPROVED:
            return "Approved; not confirmed as applied yet (the case page says where it is)."
        return "Open: not decided yet."

    @admin.display(description="proposal", ordering="pk")
    def proposal_and_case(self, proposal):
        return f"Proposal #{proposal.pk} for {proposal.case.reference}"

    # Not ``prepared_by``: a model field of that name (the preparing person, empty for a
    # worker) would be shown instead of this method.
    @admin.display(description="prepared by", ordering="prepared_by_label")
    def preparer(self, proposal):
        return proposal.prepared_by_label

    @admin.display(description="evidence version", ordering="evidence_order_version")
    def evidence_version(self, proposal):
        """The order's version the proposal was prepared from (a short heading: the field's
        own name took a column's width for a one-digit number)."""
        return proposal.evidence_order_version

    @admin.display(description="exact change")
    def change_display(self, proposal):
        return f"{proposal.order_id}: {proposal.description}"

    @admin.display(description="expiry if approved now")
    def expiry_if_approved(self, proposal):
        if proposal.status != Proposal.Status.AWAITING_REVIEW:
            return "—"
        expiry = services.approval_expiry_bounds()[0]
        # The zone named, as every date the desk writes (config/formats).
        return date_format(timezone.localtime(expiry), "DATETIME_FORMAT")

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            default_expiry, max_expiry = services.approval_expiry_bounds()
            case = obj.case
            # The case's seen value belongs to its last source check; it is the value of the
            # proposal's evidence only while that check read the same order version.
            seen_is_evidence = case.last_checked_order_version == obj.evidence_order_version
            kind = obj.kind
            context.update(
                {
                    "kind": kind,
                    "current_value": (
                        kind.describe_seen(case.order_seen)
                        if seen_is_evidence and case.order_seen is not None
                        else None
                    ),
                    # A case with no read of the order on record has not read it "again".
                    "order_read_since": (
                        not seen_is_evidence and case.last_checked_order_version is not None
                    ),
                    # This proposal's own write moved the order on: said so, not "read again".
                    "applied_version": _applied_version(obj),
                    "evidence": selectors.evidence_of(obj),
                    "same_order": case_selectors.open_cases_on_order(case, request.user),
                    "up_for_decision": selectors.awaits_decision(obj),
                    "eligible_approvers": [
                        person_here_or_away(p) for p in selectors.eligible_approvers(obj)
                    ],
                    "why_not": selectors.why_cannot_decide(obj, request.user),
                    # A refused decision's own form (``_decide``), with what was typed.
                    "approve_form": context.get("approve_form") or ApproveForm(prefix="approve"),
                    "reject_form": context.get("reject_form") or RejectForm(prefix="reject"),
                    "approve_url": reverse("admin:approvals_proposal_approve", args=[obj.pk]),
                    "reject_url": reverse("admin:approvals_proposal_reject", args=[obj.pk]),
                    "default_expiry": default_expiry,
                    "max_expiry": max_expiry,
                    "proposal": obj,
                }
            )
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_urls(self):
        return [
            path(
                "<int:pk>/approve/",
                self.admin_site.admin_view(self.approve_view),
                name="approvals_proposal_approve",
            ),
            path(
                "<int:pk>/reject/",
                self.admin_site.admin_view(self.reject_view),
                name="approvals_proposal_reject",
            ),
            *super().get_urls(),
        ]

    def _decide(self, request, pk, form_class, prefix, call):
        proposal = get_object_or_404(self.get_queryset(request), pk=pk)
        back = reverse("admin:approvals_proposal_change", args=[pk])
        if request.method != "POST":
            return HttpResponseRedirect(back)
        form = form_class(request.POST, prefix=prefix)
        if not form.is_valid():
            self.message_user(
                request,
                f"Check the form: {errors_in_words(form)}",
                messages.ERROR,
            )
            return self._page_again(request, pk, prefix, form)
        try:
            message = call(proposal, form.cleaned_data)
        except CaseError as exc:
            self.message_user(request, exc.detail, messages.ERROR)
            return self._page_again(request, pk, prefix, form)
        self.message_user(request, message, messages.SUCCESS)
        return HttpResponseRedirect(back)

    def _page_again(self, request, pk, prefix: str, form: forms.Form) -> HttpResponse:
        """The proposal's page as it is now, the refused form showing what was typed (a
        redirect emptied the expiry and the reason)."""
        request.method = "GET"  # shown, not submitted: the change view only reads
        return self.change_view(request, str(pk), extra_context={f"{prefix}_form": form})

    def approve_view(self, request, pk):
        def call(proposal, data):
            approval = services.proposal_approve(
                proposal=proposal,
                actor=request.user,
                expires_at=data.get("expires_at"),
                reason=data.get("reason", ""),
            )
            return (
                f"{approval.reference} approves {proposal.case.reference} until "
                f"{timezone.localtime(approval.expires_at):%Y-%m-%d %H:%M %Z}."
            )

        return self._decide(request, pk, ApproveForm, "approve", call)

    def reject_view(self, request, pk):
        def call(proposal, data):
            services.proposal_reject(proposal=proposal, actor=request.user, reason=data["reason"])
            return f"Proposal #{proposal.pk} rejected; the owner prepares another."

        return self._decide(request, pk, RejectForm, "reject", call)


# --- what approvals add to the case page (``cases.admin.case_admin_extend``) --------------------


class PrepareFields(forms.Form):
    """A proposal prepared by hand (``services.proposal_prepare_by_hand``): these fields and
    the case's kind's own (``prepare_form``)."""

    expected_version = forms.IntegerField(widget=forms.HiddenInput)
    reason = forms.CharField(
        required=False,
        max_length=300,
        help_text="Why (e.g. the customer confirmed another change by phone). To submit "
        "again, unchanged, a proposal an approver rejected: what changed since.",
    )


def prepare_form(case: Case, data: Any = None) -> forms.Form:
    """The prepare-by-hand form for ``case``: its kind's form with the fields above."""
    kind = case.change_kind
    form_class = type(f"Prepare{type(kind).__name__}Form", (PrepareFields, kind.form), {})
    initial = {"expected_version": case.version, **kind.form_initial(case.change)}
    return form_class(data, initial=initial, prefix="prepare")


def prepare_view(
    model_admin: admin.ModelAdmin[Case], request: HttpRequest, case: Case
) -> HttpResponse:
    """A person prepares the proposal by hand, e.g. with a change the customer confirmed."""
    back = change_url(case)
    form = prepare_form(case, request.POST or None)
    if request.method != "POST" or not form.is_valid():
        problems = "; ".join(f"{k}: {' '.join(map(str, v))}" for k, v in form.errors.items())
        model_admin.message_user(
            request, f"Proposal not prepared: {problems or 'give the change'}.", messages.ERROR
        )
        return HttpResponseRedirect(back)
    data = form.cleaned_data
    try:
        proposal = services.proposal_prepare_by_hand(
            case=case,
            actor=person(request),
            change=case.change_kind.from_form(data),
            reason=data["reason"],
            expected_version=data["expected_version"],
        )
    except CaseError as exc:
        model_admin.message_user(request, exc.detail, messages.ERROR)
    else:
        assert proposal.operation is not None  # a proposal submitted for review has its key
        model_admin.message_user(
            request,
            f"Proposal #{proposal.pk} submitted for review as "
            f"{proposal.operation.key}; an approver who did not ask for it or prepare it "
            "decides it.",
            messages.SUCCESS,
        )
    return HttpResponseRedirect(back)


def _decision_for(request: HttpRequest, case: Case) -> dict[str, str] | None:
    """The decision the person viewing the case may make now: its proposal up for decision,
    when they may decide it (``selectors.why_cannot_decide``), as a link to its page. An
    approver was told "Nothing for you to do here: it waits on" themselves."""
    proposal = selectors.awaiting_review(selectors.proposals_for(request.user).filter(case=case))
    found = proposal.first()
    if found is None or selectors.why_cannot_decide(found, request.user):
        return None
    return {
        "url": reverse("admin:approvals_proposal_change", args=[found.pk]),
        "label": f"Decide proposal #{found.pk}",
        "words": f"decide proposal #{found.pk}: approve or reject the exact change",
    }


def case_page_context(request: HttpRequest, case: Case) -> Mapping[str, Any]:
    """The case's live approval (while the case is open) and its operations: the one that
    counts (the applied one, else the latest) and the earlier ones, named apart (a page that
    listed every key beside "the same key across re-approval" contradicted itself)."""
    operations = list(case.operations.order_by("sequence").values_list("key", "confirmed_at"))
    applied = [key for key, confirmed_at in operations if confirmed_at is not None]
    current = applied[-1] if applied else (operations[-1][0] if operations else None)
    return {
        "approval": services.live_approval(case) if not case.is_terminal else None,
        "decision": _decision_for(request, case),
        "operation_keys": [key for key, _ in operations],
        "operation_current": current,
        "operation_applied": bool(applied),
        "operation_earlier": [key for key, _ in operations if key != current],
    }


case_admin_extend(
    inlines=[(10, ProposalInline), (20, OperationInline)],
    forms=[CaseForm(name="prepare", build=prepare_form, view=prepare_view)],
    context=case_page_context,
)
