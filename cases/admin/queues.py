"""Read-only work queues over cases (held; needs attention), each row linking to the case page.

A queue's bulk action runs the same case action as the case page's button, on each selected
case, through ``cases.actions.action_run``; it is offered only to those whose permissions admit
that action (the action object says which), and each case is still checked on its own team.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from cases import selectors
from cases.actions import action_run, get_action
from cases.admin.views import person
from cases.exceptions import CaseError
from cases.models import AttentionCase, Case, HeldCase, Status

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


class _QueueAdmin(admin.ModelAdmin):
    """A read-only work queue over cases; each row links to the case page."""

    status: str = ""
    list_select_related = ["account", "owner__staff_profile", "backup", "team"]
    search_fields = ["reference", "order_id", "account__reference"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Case]:
        return selectors.cases_for(request.user).filter(status=self.status).order_by("updated_at")

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
        event = case.events.filter(to_status=self.status).order_by("-id").first()
        return timezone.localtime(event.created_at).strftime("%Y-%m-%d %H:%M") if event else "—"

    @admin.display(description="why")
    def why(self, case: Case) -> str:
        return case.last_error or case.waiting_reason

    @admin.display(description="next check", ordering="next_check_at")
    def next_check(self, case: Case) -> str:
        if case.next_check_at is None:
            return "—"
        return timezone.localtime(case.next_check_at).strftime("%Y-%m-%d %H:%M")


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
        "evidence_so_far",
    ]
    actions = [
        queue_action(
            "reconcile", admin_name="reconcile_now", description="Reconcile now (fence, then look)"
        )
    ]

    @admin.display(description="evidence so far")
    def evidence_so_far(self, case: Case) -> str:
        latest = case.evidence.order_by("-captured_at").first()
        count = case.evidence.count()
        return f"{count}: latest {latest.external_reference}" if latest else "none"


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

    @admin.display(description="confirmed steps")
    def confirmed_steps(self, case: Case) -> str:
        attempt = case.attempts.order_by("-sequence").first()
        if attempt is None or not attempt.last_confirmed_step:
            return "none"
        return attempt.get_last_confirmed_step_display()
