"""A case whose operation is proven applied finishes, whatever arrives later.

Found from outside: recovery moved D-50 held -> ready ("proven applied: DATE-50-1 found
applied at order version 9"); a later webhook for another change on the same order then
invalidated its approval, and the case was re-proposed "as operation DATE-50-1" and sat
awaiting review. The change is at the order system: nothing is left to decide, only the steps
after the apply (notify, close) remain, and a newer order version says nothing against it.
"""

from __future__ import annotations

import pytest

from approvals.models import Proposal
from cases.models import Status
from reconciliation.apply import apply_case
from reconciliation.settle import case_reconcile
from tests.support.order_system import DEFAULT_WEBHOOK_SECRET
from tests.support.webhooks import post_order_event

pytestmark = pytest.mark.order_system

ORDER = "ORD-7731"


def test_a_later_event_for_another_change_does_not_send_a_proven_applied_case_back_to_review(
    approved_case, live_orders, settings, django_capture_on_commit_callbacks
):
    settings.ORDER_WEBHOOK_SECRET = DEFAULT_WEBHOOK_SECRET
    case = approved_case()
    live_orders.set_fault("drop_after_commit", path_prefix=f"/orders/{ORDER}/operations")
    assert apply_case(case_id=case.pk) == "effect_unknown"  # it landed; the answer was lost
    live_orders.clear_faults()
    case.refresh_from_db()
    assert case.status == Status.HELD
    assert case_reconcile(case_id=case.pk) == "applied"
    case.refresh_from_db()
    assert case.status == Status.READY  # proven applied: the steps after the apply resume
    applied_version = live_orders.state(ORDER)["order"]["version"]

    # Another change on the same order (made elsewhere) arrives before the steps resume.
    post_order_event(ORDER, "evt-other-change", applied_version + 1)

    case.refresh_from_db()
    assert case.status == Status.READY, (case.status, case.waiting_reason)
    proposals = list(Proposal.objects.filter(case=case).values_list("status", flat=True))
    assert proposals == [Proposal.Status.APPROVED]  # not invalidated, nothing re-proposed
    with django_capture_on_commit_callbacks(execute=True):
        apply_case(case_id=case.pk)
    case.refresh_from_db()
    assert case.status == Status.DONE, (case.status, case.waiting_reason)
    assert len(live_orders.state(ORDER)["operations"]) == 1  # applied once, never again
