"""A change that landed after a withdrawal is done, but nobody told the customer: the case says
so and offers the next step."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from approvals.models import Operation
from cases.actions import action_run, case_actions
from cases.models import Status
from cases.next_action import describe_next_action
from reconciliation.apply import apply_case
from reconciliation.revocation import case_revoke
from reconciliation.settle import case_reconcile

pytestmark = pytest.mark.order_system


@pytest.fixture
def applied_after_withdrawal(approved_case, live_orders, lead):
    """The response was dropped after commit (held), then the customer withdrew; reconciling
    finds the change applied, and no step runs after a revocation: nobody told the customer."""
    case = approved_case()
    live_orders.set_fault("drop_after_commit", path_prefix="/orders/")
    assert apply_case(case_id=case.pk) == "effect_unknown"
    live_orders.clear_faults()
    case_revoke(case=case, actor=lead, reason="customer withdrew")
    assert case_reconcile(case_id=case.pk, actor=lead) == "applied"
    case.refresh_from_db()
    assert case.status == Status.DONE
    assert len(live_orders.state("ORD-7731")["operations"]) == 1
    return case


def test_the_case_says_the_customer_has_not_been_told(applied_after_withdrawal, lead):
    case = applied_after_withdrawal

    action = describe_next_action(case, actor=lead)

    assert action.finished
    assert "the customer has not been told" in action.why_waiting
    assert "customer_told" in {a.name for a in case_actions(case, lead)}
    client = Client()
    client.force_login(lead)
    page = client.get(reverse("admin:cases_case_change", args=[case.pk])).content.decode()
    assert "the customer has not been told" in page
    assert "Record that the customer was told" in page


def test_recording_that_the_customer_was_told_closes_the_gap(applied_after_withdrawal, agent):
    case = applied_after_withdrawal

    message = action_run(
        case=case,
        name="customer_told",
        actor=agent,
        expected_version=case.version,
        reason="Phoned them at 10:05",
    )

    case.refresh_from_db()
    assert "recorded" in message
    assert Operation.objects.get(case=case).notified_at is not None
    assert case.events.last().action == "cases.step.notified"
    assert "Phoned them at 10:05" in case.events.last().reason
    assert "customer_told" not in {a.name for a in case_actions(case, agent)}
    assert "has not been told" not in describe_next_action(case).why_waiting
