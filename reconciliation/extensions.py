"""What reconciliation plugs into the kernel's extension points (``cases.extensions``).

Registered once from ``ReconciliationConfig.ready``: the order system's autonomy badge on the
admin home, and its count of the inbound events whose processing failed.
"""

from __future__ import annotations

from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.safestring import SafeString

from cases import extensions, kinds
from cases.paging import BoundedCountPaginator
from reconciliation.models import Autonomy, InboundEvent
from reconciliation.selectors import (
    current_autonomy,
    current_profile,
    inbound_events_for,
    kinds_autonomy,
    may_see_inbound_events,
)


def autonomy_panel(request: HttpRequest) -> SafeString:
    """The badge of what workers may do against the configured order system, and the autonomy
    the probe proved for each change kind (read only)."""
    return render_to_string(
        "reconciliation/autonomy_panel.html",
        {"autonomy_status": current_autonomy(), "kind_statuses": kinds_autonomy()},
    )


def workers_may_settle(case) -> bool:
    """A worker settles a held case only where the order system is autonomous for its kind
    (``reconciliation.settle.case_reconcile``); otherwise a person records the settlement."""
    return current_autonomy(kind=case.kind).is_autonomous


def self_settling_kinds() -> list[str]:
    """The change kinds the order system is autonomous for (one read of the latest profile):
    ``workers_may_settle`` as a filter."""
    profile = current_profile()
    if profile is None:
        return []
    return [code for code in kinds.codes() if profile.autonomy_of(code) == Autonomy.AUTONOMOUS]


def failed_inbound_count(user) -> int:
    """The failed inbound events ``user``'s inbound events page lists (an operator's include
    those no team owns yet), counted at most 1,000 ("1,000+") like the page itself."""
    failed = inbound_events_for(user, unowned=True).filter(
        processing=InboundEvent.Processing.FAILED
    )
    return BoundedCountPaginator(failed, 1).count


def failed_inbound_url() -> str:
    url = reverse("admin:reconciliation_inboundevent_changelist")
    return f"{url}?processing__exact={InboundEvent.Processing.FAILED}"


def register() -> None:
    extensions.register_panel(extensions.DashboardPanel("Order system autonomy", autonomy_panel))
    extensions.register_tile(
        extensions.DashboardTile(
            "Order events that failed",
            failed_inbound_count,
            failed_inbound_url,
            order=60,
            shown=may_see_inbound_events,
        )
    )
    extensions.register_self_settling(workers_may_settle, self_settling_kinds)
    extensions.register_on_case_opened(_inbound_events_on_case)


def _inbound_events_on_case(case) -> int:
    from reconciliation.inbound import inbound_events_on_case

    return inbound_events_on_case(order_id=case.order_id, account_id=case.account_id)
