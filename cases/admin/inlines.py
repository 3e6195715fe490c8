"""Read-only inlines: the case page shows its history; nothing is added or changed from one."""

from __future__ import annotations

import re
from typing import Any

from django.contrib import admin
from django.contrib.admin.helpers import AdminReadonlyField, InlineAdminFormSet
from django.contrib.admin.utils import flatten_fieldsets
from django.db.models import QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from cases import selectors
from cases.case_story import event_sentence, status_label
from cases.codes import AccountAction
from cases.models import AccountEvent, Attempt, CancellationRequest, CaseEvent, EvidenceReference


def breakable(code: str, *, at: str = "._:") -> str:
    """``code`` (escaped) with a line-break opportunity after each of the characters ``at``
    (dots, underscores and colons), so that ``reconciliation.manual_settlement_needed`` or
    ``proposer:vm:23017`` wraps at its parts, not inside them."""
    parts = re.split(f"(?<=[{re.escape(at)}])", code)
    return format_html_join(mark_safe("<wbr>"), "{}", ((part,) for part in parts))  # noqa: S308


class EventWords:
    """An audit event's columns in words, for the events' list and the case page's trail."""

    @admin.display(description="From status")
    def from_status_name(self, obj: CaseEvent) -> str:
        return status_label(obj.from_status) or "—"

    @admin.display(description="To status")
    def to_status_name(self, obj: CaseEvent) -> str:
        return status_label(obj.to_status) or "—"

    @admin.display(description="What happened", ordering="action")
    def what_happened(self, obj: CaseEvent) -> str:
        """The event in the words of the case's timeline (``cases.case_story``), with the
        stored code under it, breakable after its dots (``cases.<wbr>case.<wbr>…``): what the
        action filter and an export name it by."""
        return format_html(
            '{}<br><small class="hf-code">{}</small>',
            event_sentence(obj).text,
            breakable(obj.action),
        )

    @admin.display(description="Actor", ordering="actor_label")
    def acted_by(self, obj: CaseEvent) -> str:
        return breakable(obj.actor_label)

    @admin.display(description="When", ordering="created_at")
    def when(self, obj: CaseEvent) -> str:
        return f"{timezone.localtime(obj.created_at):%Y-%m-%d %H:%M:%S %Z}"

    @admin.display(description="Version: status", ordering="version")
    def status_change(self, obj: CaseEvent) -> str:
        """The version the event produced and the status change, if any, in the statuses'
        names (``v2: New → Waiting for the order source``)."""
        before, after = status_label(obj.from_status), status_label(obj.to_status)
        if obj.from_status == obj.to_status:
            return f"v{obj.version}" + (f": {after}" if after else "")
        return f"v{obj.version}: {before or '—'} → {after or '—'}"


class RowsOfThePage(BaseInlineFormSet):
    """A read-only inline's formset holds no form: its rows are shown (:func:`history_rows`),
    never edited, and a form a row (with its hidden inputs, rendered through the form
    templates) was half of the case page's template time. Its management form says so (no
    form, none to add), and what the change form posts back for it is read as that."""

    def initial_form_count(self) -> int:
        return 0

    def total_form_count(self) -> int:
        return 0


def history_rows(admin_formset: InlineAdminFormSet) -> list[dict[str, Any]]:
    """The rows of a read-only inline as Django's tabular inline shows them: the row's name,
    then each field's contents as the admin renders a read-only field (``AdminReadonlyField``:
    a display method's HTML, a related object as a link to its page, an empty value as the
    admin's dash), read from the inline's queryset with one form for all the rows. Each row is
    given the object of the page it is shown on, not left to read it again: a row's name can
    name its parent (an audit event is "D-41 v7: …"), one query per row."""
    formset, inline = admin_formset.formset, admin_formset.opts
    fk = formset.fk
    form = formset.empty_form
    names = [name for name in flatten_fieldsets(admin_formset.fieldsets) if name != fk.name]
    fields = [AdminReadonlyField(form, name, is_first=True, model_admin=inline) for name in names]
    rows = []
    for original in formset.get_queryset():
        fk.set_cached_value(original, formset.instance)
        form.instance = original
        rows.append(
            {
                "original": original,
                "cells": [(field.field["name"], field.contents()) for field in fields],
                "view_on_site_url": inline.get_view_on_site_url(original),
            }
        )
    return rows


class ReadOnlyInline(admin.TabularInline):
    """History shown on a page: nothing is added, changed or deleted from an inline. Shown as
    Django's tabular inline, its rows without forms (``admin/edit_inline/history_table.html``,
    :func:`history_rows`)."""

    formset = RowsOfThePage
    template = "admin/edit_inline/history_table.html"
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class CaseEventInline(EventWords, ReadOnlyInline):
    model = CaseEvent
    verbose_name_plural = "Audit trail (append-only; the same events as 'What happened' above)"
    classes = ["collapse"]
    # In words, each stored code under its sentence, as the events' list shows them: it read
    # "cases.case.transitioned" from "preparing_proposal" to "awaiting_review".
    fields = ("when", "status_change", "what_happened", "acted_by", "reason")
    readonly_fields = fields
    ordering = ["-id"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        visible = selectors.events_for(request.user).values("pk")
        # Each row names who acted (``EventWords``): with the row, not a query per row.
        return super().get_queryset(request).filter(pk__in=visible).select_related("actor")


class EvidenceInline(ReadOnlyInline):
    model = EvidenceReference
    verbose_name_plural = "Evidence references (pointers to permitted evidence, not copies)"
    fields = (
        "captured_at",
        "source_system",
        "external_reference",
        "kind_words",
        "permitted_basis",
        "order_version",
        "summary",
        "recorded_by",
    )
    readonly_fields = fields

    @admin.display(description="Kind")
    def kind_words(self, obj: EvidenceReference) -> str:
        return obj.kind_words

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
