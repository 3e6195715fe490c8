"""The case admin's one extension point: what apps built on the kernel add to the support desk.

The kernel's admin knows nothing of approvals or reconciliation. They add to it here, from their
own ``admin`` modules (imported by admin autodiscovery after ``cases.admin``), by calling
:func:`case_admin_extend`. The admin reads these registrations when it answers a request, never
at import, so the order in which apps register does not matter.

What may be added, and nothing else:

- ``inlines``: read-only inlines on the case page, each with a position (the kernel's own are at
  30-60; lower comes first).
- ``forms``: the form a case action with ``CaseAction.form == name`` shows on the case page, and
  the view that takes its POST (see :class:`CaseForm`).
- ``context``: values for the case page's template (e.g. the live approval).
- ``revoker``: what the admin's "Delete" does, which is revoking a case's authority; without one,
  no case can be deleted from the admin.
- ``account_actions``: bulk actions on customer accounts, after the kernel's own.
- ``order_reader``: how the intake page reads an order's current value from the order system
  (``reader(order_id)`` returns the order, or None and why not, in words: "" when the order
  system has no such order); without one the page says it cannot show it.

No business rule is registered here: each contribution renders, or calls one service.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django import forms
    from django.contrib.admin import ModelAdmin
    from django.contrib.admin.options import InlineModelAdmin
    from django.http import HttpRequest, HttpResponse

    from cases.kinds import OrderView
    from cases.models import Case

    CaseFormView = Callable[[ModelAdmin[Case], HttpRequest, Case], HttpResponse]
    CaseContext = Callable[[HttpRequest, Case], Mapping[str, Any]]
    AccountAction = Callable[..., Any]
    OrderReader = Callable[[str], tuple[OrderView | None, str]]
    OrderEventsUrl = Callable[[Any, str], str | None]


@dataclass(frozen=True)
class CaseForm:
    """A form on the case page for the action whose ``form`` is ``name``.

    The page gets ``<name>_form`` (``build(case)``, only while ``cases.actions.case_actions``
    offers that action to the person; ``None`` otherwise) and ``<name>_url``, the URL
    ``admin:cases_case_<name>`` at ``<pk>/<name>/``. A POST there reaches ``view`` with the case
    already found within the person's teams (404 otherwise); the view calls one service.
    """

    name: str
    build: Callable[[Case], forms.BaseForm]
    view: CaseFormView


@dataclass(frozen=True)
class CaseRevoker:
    """The admin's "Delete" of a case: its authority is revoked, the row stays.

    ``offered(case, actor)`` says whether to show Delete (``case`` is ``None`` for the bulk
    action on the list); ``run(case=, actor=, kind=, reason=)`` revokes through the service and
    returns what happened in words. The service checks the permission again under the lock.
    """

    offered: Callable[[Case | None, Any], bool]
    run: Callable[..., str]


@dataclass
class CaseAdminExtensions:
    """Everything registered so far (see :func:`case_admin_extend`)."""

    inlines: list[tuple[int, type[InlineModelAdmin[Any, Any]]]] = field(default_factory=list)
    forms: dict[str, CaseForm] = field(default_factory=dict)
    context: list[CaseContext] = field(default_factory=list)
    revoker: CaseRevoker | None = None
    account_actions: list[AccountAction] = field(default_factory=list)
    order_reader: OrderReader | None = None
    # The page listing the order events (webhooks) about an order that a person may see, or
    # None when they may see none (reconciliation's inbound events).
    order_events_url: OrderEventsUrl | None = None


EXTENSIONS = CaseAdminExtensions()


def case_admin_extend(
    *,
    inlines: Sequence[tuple[int, type[InlineModelAdmin[Any, Any]]]] = (),
    forms: Sequence[CaseForm] = (),
    context: CaseContext | None = None,
    revoker: CaseRevoker | None = None,
    account_actions: Sequence[AccountAction] = (),
    order_reader: OrderReader | None = None,
    order_events_url: OrderEventsUrl | None = None,
) -> None:
    """Add to the case admin. Registering the same thing twice changes nothing."""
    for position, inline in inlines:
        if all(existing is not inline for _, existing in EXTENSIONS.inlines):
            EXTENSIONS.inlines.append((position, inline))
    for case_form in forms:
        EXTENSIONS.forms[case_form.name] = case_form
    if context is not None and context not in EXTENSIONS.context:
        EXTENSIONS.context.append(context)
    if revoker is not None:
        EXTENSIONS.revoker = revoker
    for action in account_actions:
        if action not in EXTENSIONS.account_actions:
            EXTENSIONS.account_actions.append(action)
    if order_reader is not None:
        EXTENSIONS.order_reader = order_reader
    if order_events_url is not None:
        EXTENSIONS.order_events_url = order_events_url
