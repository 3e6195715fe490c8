"""Read-only work queues over cases (held; needs attention), each row linking to the case page.

A queue's bulk action runs the same case action as the case page's button, on each selected
case, through ``cases.actions.action_run``; it is offered only to those whose permissions admit
that action (the action object says which), and each case is still checked on its own team.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html

from cases import selectors
from cases.actions import action_run, get_action
from cases.admin.extend import EXTENSIONS
from cases.admin.search import IndexedSearchMixin
from cases.admin.views import person
from cases.codes import Action
from cases.exceptions import CaseError
from cases.models import (
    Attempt,
    AttentionCase,
    Case,
    CaseEvent,
    EvidenceReference,
    HeldCase,
    Status,
)
from cases.next_action import error_words
from cases.paging import BoundedCountAdminMixin

QueueAction = Callable[..., None]


def queue_action(name: str, *, admin_name: str, description: str, reason: str = "") -> QueueAction:
    """A bulk action (``admin_name`` in the admin's menu) that runs case action ``name``."""

    def run(
        model_admin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Case]
    ) -> None:
        _run_on_each(model_admin, request, queryset, name, reason)

    run.__name__ = admin_name
    run.case_action = name  # type: ignore[attr-defined]
    return admin.action(description=description)(run)


def _run_on_each(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[Case],
    name: str,
    reason: str,
) -> None:
    """The same checked action as the case page's button, per case."""
    for case in queryset:
        try:
            message = action_run(
                case=case,
                name=name,
                actor=person(request),
                expected_version=case.version,
                reason=reason,
            )
        except CaseError as exc:
            model_admin.message_user(
                request, f"{case.reference}: nothing was done: {exc.detail}", messages.ERROR
            )
        else:
            model_admin.message_user(request, message, messages.SUCCESS)


class _QueueAdmin(IndexedSearchMixin, BoundedCountAdminMixin, admin.ModelAdmin):
    """A read-only work queue over cases; each row links to the case page.

    A page costs the same queries however many rows it shows: what a column reads beyond the
    case's own relations (``list_select_related``) is annotated onto the page's one query
    (``since_at`` here; each queue adds its own), and the page counts its rows once
    (``show_full_result_count``), at most 1,000 past the page (``cases.paging``); the search asks
    each field's index (``cases.admin.search``)."""

    status: str = ""
    # The case column is the row's one link (to the case page): the admin's own link around
    # it would nest two anchors, and the browser splits them into an empty link.
    list_display_links = None
    list_select_related = ["account", "owner__staff_profile", "backup", "team"]
    search_fields = ["reference", "order_id", "account__reference"]
    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Case]:
        entered = CaseEvent.objects.filter(case=OuterRef("pk"), to_status=self.status).order_by(
            "-id"
        )
        return (
            selectors.cases_for(request.user)
            .filter(status=self.status)
            .annotate(since_at=Subquery(entered.values("created_at")[:1]))
            .order_by("updated_at")
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("cases.view_case")

    def get_model_perms(self, request: HttpRequest) -> dict[str, bool]:
        return {"view": self.has_view_permission(request)}

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        """Only the bulk actions whose case action this person's permissions admit (an auditor
        sees none); ``action_run`` checks each case on its own team again."""
        offered = {}
        for key, entry in super().get_actions(request).items():
            name = getattr(entry[0] if entry else None, "case_action", None)
            if name is not None:
                action = get_action(name)
                if action is None or not (
                    action.permission is None or request.user.has_perm(action.permission)
                ):
                    continue
            offered[key] = entry
        return offered

    @admin.display(description="case")
    def case_link(self, case: Case) -> str:
        url = reverse("admin:cases_case_change", args=[case.pk])
        return format_html('<a href="{}">{}</a>', url, case.reference)

    @admin.display(description="responsible now")
    def responsible(self, case: Case) -> Any:
        return case.responsible_now

    @admin.display(description="since")
    def since(self, case: Case) -> str:
        """When the case's latest event brought it to the queue's status (``since_at``)."""
        since_at = getattr(case, "since_at", None)
        return date_format(timezone.localtime(since_at), "DATETIME_FORMAT") if since_at else "—"

    @admin.display(description="why")
    def why(self, case: Case) -> str:
        return error_words(case.last_error) or case.waiting_reason

    @admin.display(description="next check", ordering="next_check_at")
    def next_check(self, case: Case) -> str:
        if case.next_check_at is None:
            return "—"
        return date_format(timezone.localtime(case.next_check_at), "DATETIME_FORMAT")


# The events that record what the order system showed a reconciliation (``cases.codes``).
_FINDINGS = (
    Action.STILL_UNKNOWN,
    Action.RETRIES_EXHAUSTED,
    Action.FINDING_DISCARDED,
    Action.MANUAL_SETTLEMENT_NEEDED,
)


def _at(moment: Any) -> str:
    return date_format(timezone.localtime(moment), "DATETIME_FORMAT") if moment else ""


@admin.register(HeldCase)
class HeldCaseAdmin(_QueueAdmin):
    status = Status.HELD
    list_display = [
        "case_link",
        "owner",
        "responsible",
        "why",
        "since",
        "next_check",
        "order_system_read",
        "evidence_so_far",
    ]
    actions = [
        queue_action(
            "reconcile", admin_name="reconcile_now", description="Reconcile now (fence, then look)"
        )
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Case]:
        evidence = EvidenceReference.objects.filter(case=OuterRef("pk"))
        counted = evidence.order_by().values("case").annotate(n=Count("pk")).values("n")
        latest = evidence.order_by("-captured_at", "-pk")
        findings = CaseEvent.objects.filter(case=OuterRef("pk"), action__in=_FINDINGS).order_by(
            "-id"
        )
        return (
            super()
            .get_queryset(request)
            .annotate(
                evidence_count=Coalesce(Subquery(counted, output_field=IntegerField()), Value(0)),
                latest_evidence=Subquery(latest.values("summary")[:1]),
                latest_evidence_source=Subquery(latest.values("source_system")[:1]),
                latest_evidence_at=Subquery(latest.values("captured_at")[:1]),
                latest_finding=Subquery(findings.values("reason")[:1]),
                latest_finding_at=Subquery(findings.values("created_at")[:1]),
            )
        )

    def get_list_display(self, request: HttpRequest) -> Any:
        """The queue's columns, and the link to the order events about each row's order for
        a person who may see them (none for anyone else: no link that is then refused)."""
        columns = list(super().get_list_display(request))
        url_for = EXTENSIONS.order_events_url
        if url_for is None or url_for(request.user, "") is None:
            return columns

        @admin.display(description="order events")
        def order_events(case: Case) -> str:
            url = url_for(request.user, case.order_id)
            return format_html('<a href="{}">Order events about {}</a>', url, case.order_id)

        return [*columns, order_events]

    @admin.display(description="the order system's read")
    def order_system_read(self, case: Case) -> str:
        """What the last look at the order system found (annotated), in words; the case page
        reads it again now and lists the order's events beside it."""
        finding = getattr(case, "latest_finding", None)
        if finding:
            return f"{_at(getattr(case, 'latest_finding_at', None))}: {finding}"
        if case.last_error:
            return f"Not looked at since the hold; at the hold: {case.last_error}"
        return "Not looked at yet since the hold: open the case to read it now"

    @admin.display(description="why")
    def why(self, case: Case) -> str:
        """Why it is held, short (what the order system said is the next column)."""
        return case.waiting_reason or case.last_error

    @admin.display(description="evidence so far")
    def evidence_so_far(self, case: Case) -> str:
        """How many evidence references the case has, and its latest in words (annotated)."""
        count = getattr(case, "evidence_count", 0)
        summary = getattr(case, "latest_evidence", None)
        if not summary:
            return "none"
        source = dict(EvidenceReference.Source.choices).get(
            getattr(case, "latest_evidence_source", ""), "elsewhere"
        )
        plural = "reference" if count == 1 else "references"
        when = _at(getattr(case, "latest_evidence_at", None))
        return f"{count} {plural}; latest: {summary} ({source}, {when})"


@admin.register(AttentionCase)
class AttentionCaseAdmin(_QueueAdmin):
    status = Status.NEEDS_ATTENTION
    list_display = [
        "case_link",
        "owner",
        "responsible",
        "why",
        "since",
        "confirmed_steps",
        "next_check",
    ]
    actions = [
        queue_action(
            "request_source_check",
            admin_name="check_source_now",
            description="Check the source now (a worker reads the order again)",
            reason="Asked from the needs-attention queue",
        )
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Case]:
        latest = Attempt.objects.filter(case=OuterRef("pk")).order_by("-sequence")
        return (
            super()
            .get_queryset(request)
            .annotate(last_confirmed_step=Subquery(latest.values("last_confirmed_step")[:1]))
        )

    @admin.display(description="confirmed steps")
    def confirmed_steps(self, case: Case) -> str:
        """The last step the case's latest attempt confirmed (annotated), or "none"."""
        step = getattr(case, "last_confirmed_step", None)
        if not step:
            return "none"
        return str(dict(Attempt.Step.choices).get(step, step))
