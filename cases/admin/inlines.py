"""Read-only inlines: the case page shows its history; nothing is added or changed from one."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from cases import selectors
from cases.codes import AccountAction
from cases.models import AccountEvent, Attempt, CancellationRequest, CaseEvent, EvidenceReference


class ReadOnlyInline(admin.TabularInline):
    """History shown on a page: nothing is added, changed or deleted from an inline."""

    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class CaseEventInline(ReadOnlyInline):
    model = CaseEvent
    verbose_name_plural = "Audit trail (append-only; the same events as 'What happened' above)"
    classes = ["collapse"]
    fields = (
        "created_at",
        "version",
        "action",
        "from_status",
        "to_status",
        "actor_label",
        "reason",
    )
    readonly_fields = fields
    ordering = ["-id"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        visible = selectors.events_for(request.user).values("pk")
        return super().get_queryset(request).filter(pk__in=visible)


class EvidenceInline(ReadOnlyInline):
    model = EvidenceReference
    verbose_name_plural = "Evidence references (pointers to permitted evidence, not copies)"
    fields = (
        "captured_at",
        "source_system",
        "external_reference",
        "kind",
        "permitted_basis",
        "order_version",
        "summary",
        "recorded_by",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        visible = selectors.evidence_for(request.user).values("pk")
        return super().get_queryset(request).filter(pk__in=visible)


class AttemptInline(ReadOnlyInline):
    model = Attempt
    verbose_name_plural = "Attempts (one worker's claim each; tokens only ever grow)"
    fields = (
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
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        visible = selectors.attempts_for(request.user).values("pk")
        return super().get_queryset(request).filter(pk__in=visible)


class CancellationInline(ReadOnlyInline):
    model = CancellationRequest
    verbose_name_plural = "Cancellation requests"
    fields = (
        "requested_at",
        "requested_by_label",
        "via",
        "reason",
        "outcome",
        "settled_at",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        visible = selectors.cancellations_for(request.user).values("pk")
        return super().get_queryset(request).filter(pk__in=visible)


class AccountEventInline(ReadOnlyInline):
    """The account's own audit trail on its page, newest first: whoever may see the account
    sees what was done to it."""

    model = AccountEvent
    verbose_name_plural = "Account history (append-only: created, verified, changed, revoked)"
    fields = ("created_at", "what", "actor_label", "reason", "detail")
    readonly_fields = fields
    ordering = ["-id"]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("cases.view_customeraccount")

    @admin.display(description="What happened")
    def what(self, event: AccountEvent) -> str:
        try:
            return AccountAction(event.action).words
        except ValueError:
            return event.action
