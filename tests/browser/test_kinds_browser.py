"""Change kinds from the admin only, as the roles do (issue 23, "Done means").

The agent opens an address change from the home page and a cancellation from the account's
page, on two orders; a second request for the same order and kind is refused with a link to
the open case. The approver approves both (the cancellation's page says it cannot be undone
before anyone approves). The workers' steps run as the worker tasks; the address change's
answer is lost on its way back (the order system applied it): the case is held, its owner
reconciles it from the case page (fence, then the consistent lookup), and the worker finishes
with no second write. Each change is applied exactly once, by the order system's own records.
A delivery date change goes the same way. ``docs_shot`` keeps the role guides' screenshots of
each kind (``make docs-screenshots``).
"""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.urls import reverse
from django.utils import timezone

from approvals.models import Proposal
from cases.models import Case, Status
from reconciliation.apply import apply_case
from reconciliation.sources import source_check
from reconciliation.tasks import prepare_proposal
from tests.browser.conftest import (
    act,
    assert_plain_outcome,
    docs_shot,
    login,
    messages,
    open_case,
    panel_status,
    shot,
    visible_text,
)

pytestmark = [pytest.mark.browser, pytest.mark.order_system]

ADDRESS_ORDER, CANCEL_ORDER, DATE_ORDER = "ORD-7731", "ORD-7731-2", "ORD-7731-3"


def _choose(page, kind_label: str, order_id: str) -> None:
    """Step 1 of the intake page: the kind, the account (ACC-100) and the order."""
    page.get_by_label(kind_label, exact=True).check()
    page.get_by_label("Account").select_option(label="ACC-100 Northwind Bakery")
    page.locator("#id_order_id").fill(order_id)
    page.get_by_role("button", name="Show the order").click()
    page.wait_for_load_state()


def _open_address_change(page, *, city: str = "Bristol") -> None:
    page.get_by_label("Name").fill("Dana Whitfield")
    page.get_by_label("Address line 1").fill("4 Quay Road")
    page.get_by_label("City").fill(city)
    page.get_by_label("Postal code").fill("BS1 5TX")
    page.get_by_label("Country").fill("GB")
    page.get_by_label("Note").fill("New office from Monday.")
    page.get_by_role("button", name="Open the case").click()
    page.wait_for_load_state()


def test_the_agent_opens_an_address_change_and_a_cancellation_the_approver_approves_both(
    open_page, live_orders, autonomous, staff, account
):
    agent = open_page()
    login(agent, "agent")

    # From the home page: an address change on one order.
    agent.goto("/admin/")
    agent.locator("#hf-intake-home").get_by_role("link", name="Open a case").click()
    agent.wait_for_load_state()
    _choose(agent, "Shipping address", ADDRESS_ORDER)
    assert "shipping to Goods In, 1 Dock Road" in agent.locator("#hf-order-now").inner_text()
    docs_shot(agent, "agent", "intake-shipping-address")
    _open_address_change(agent)
    [opened] = messages(agent, "success")
    address = Case.objects.get(order_id=ADDRESS_ORDER, kind="shipping_address")
    assert opened.startswith(f"{address.reference} opened: the shipping address becomes")
    shot(agent, "address-case")

    # From the account's page: a cancellation on another order.
    agent.goto(reverse("admin:cases_customeraccount_change", args=[account.pk]))
    agent.get_by_role("link", name="Open a case for this account").click()
    agent.wait_for_load_state()
    _choose(agent, "Order cancellation", CANCEL_ORDER)
    assert "This cannot be undone." in visible_text(agent)
    agent.get_by_label("Why the order is cancelled").select_option("duplicate")
    docs_shot(agent, "agent", "intake-order-cancellation")
    agent.get_by_role("button", name="Open the case").click()
    agent.wait_for_load_state()
    cancel = Case.objects.get(order_id=CANCEL_ORDER, kind="order_cancellation")
    assert messages(agent, "success")[0].startswith(f"{cancel.reference} opened")

    # A second request for the same order and kind: refused, with a link to the open case.
    agent.goto("/admin/cases/case/add/")
    _choose(agent, "Shipping address", ADDRESS_ORDER)
    _open_address_change(agent, city="Bath")
    refusal = agent.locator("#hf-open-errors")
    assert "already has an open shipping address case" in refusal.inner_text()
    assert agent.get_by_label("City").input_value() == "Bath"  # nothing typed is lost
    docs_shot(agent, "agent", "intake-open-case-exists")
    refusal.get_by_role("link", name=address.reference).click()
    agent.wait_for_load_state()
    assert agent.url.endswith(reverse("admin:cases_case_change", args=[address.pk]))
    assert Case.objects.filter(order_id=ADDRESS_ORDER, kind="shipping_address").count() == 1

    # The workers read each order and prepare the exact proposals.
    for case in (address, cancel):
        assert source_check(case_id=case.pk) == "checked"
        assert prepare_proposal(case.pk) == "submitted"

    approver = open_page()
    login(approver, "approver")
    for case in (address, cancel):
        proposal = Proposal.objects.get(case=case, status=Proposal.Status.AWAITING_REVIEW)
        approver.goto(reverse("admin:approvals_proposal_change", args=[proposal.pk]))
        heading = approver.get_by_role("heading", name=re.compile(r"^Decide: ORD-"))
        assert proposal.description in heading.inner_text()
        irreversible = approver.locator("#hf-irreversible")
        assert irreversible.count() == (1 if case is cancel else 0)
        if case is cancel:
            assert "This cannot be undone." in irreversible.inner_text()
        if case is cancel:
            docs_shot(approver, "approver", "decide-order-cancellation")
        else:
            shot(approver, f"decide-{case.kind}")
        approver.get_by_role("button", name=re.compile(r"^Approve this exact proposal")).click()
        approver.wait_for_load_state()
        assert " approves " in messages(approver, "success")[0]

    # The worker applies the address change; its answer is lost after the order system
    # committed it: effect unknown, the case is held for its owner.
    live_orders.set_fault("drop_after_commit", path_prefix=f"/orders/{ADDRESS_ORDER}/operations")
    assert apply_case(case_id=address.pk) == "effect_unknown"
    live_orders.clear_faults()
    assert Case.objects.get(pk=address.pk).status == Status.HELD
    assert len(live_orders.state(ADDRESS_ORDER)["operations"]) == 1

    # Its owner reconciles it from the case page: fence, then the consistent lookup finds the
    # same change applied; the worker finishes the remaining steps without writing again.
    lead = open_page()
    login(lead, "lead")
    open_case(lead, address)
    assert panel_status(lead).startswith("Held")
    docs_shot(lead, "lead", "held-shipping-address")
    act(lead, "Reconcile now")
    level, text = assert_plain_outcome(lead)
    assert level == "success", text
    assert "applied" in text
    assert "Proven applied" in lead.locator(".hf-panel").first.inner_text()
    docs_shot(lead, "lead", "reconciled-shipping-address")
    assert apply_case(case_id=address.pk) == "done"

    # The cancellation applies on its first try.
    assert apply_case(case_id=cancel.pk) == "done"

    # The order system's own records: each change applied exactly once, with its key.
    for case in (address, cancel):
        operations = live_orders.state(case.order_id)["operations"]
        assert [(op["operation_key"], op["change"]) for op in operations] == [
            (case.operations.get().key, Case.objects.get(pk=case.pk).change)
        ]
        assert len(live_orders.state(case.order_id)["events"]) == 1
    assert live_orders.state(CANCEL_ORDER)["order"]["status"] == "cancelled"
    assert live_orders.state(ADDRESS_ORDER)["order"]["shipping_address"]["line1"] == "4 Quay Road"
    for case in (address, cancel):
        assert Case.objects.get(pk=case.pk).status == Status.DONE

    open_case(lead, address)
    assert panel_status(lead).startswith("Done")
    shot(lead, "address-done")
    agent.goto(reverse("admin:cases_case_change", args=[cancel.pk]))
    assert "this cannot be undone" in visible_text(agent)
    shot(agent, "cancellation-done")


def test_the_agent_opens_a_delivery_date_change_the_approver_approves_it_applied_once(
    open_page, live_orders, autonomous, staff, account
):
    """The first kind goes the same way from the admin: intake, the order's current date
    shown, one exact proposal, four-eyes approval, one effect."""
    day = timezone.localdate() + dt.timedelta(days=9)
    agent = open_page()
    login(agent, "agent")
    agent.goto("/admin/")
    agent.locator("#hf-intake-home").get_by_role("link", name="Open a case").click()
    agent.wait_for_load_state()
    _choose(agent, "Delivery date", DATE_ORDER)
    assert "delivery on" in agent.locator("#hf-order-now").inner_text()
    agent.get_by_label("New delivery date").fill(day.isoformat())
    agent.get_by_label("Note").fill("The customer is away until then.")
    shot(agent, "date-intake")
    agent.get_by_role("button", name="Open the case").click()
    agent.wait_for_load_state()
    case = Case.objects.get(order_id=DATE_ORDER, kind="delivery_date")
    assert messages(agent, "success")[0].startswith(f"{case.reference} opened")

    assert source_check(case_id=case.pk) == "checked"
    assert prepare_proposal(case.pk) == "submitted"

    approver = open_page()
    login(approver, "approver")
    proposal = Proposal.objects.get(case=case, status=Proposal.Status.AWAITING_REVIEW)
    approver.goto(reverse("admin:approvals_proposal_change", args=[proposal.pk]))
    heading = approver.get_by_role("heading", name=re.compile(r"^Decide: ORD-"))
    assert proposal.description in heading.inner_text()
    assert approver.locator("#hf-irreversible").count() == 0
    shot(approver, "decide-delivery-date")
    approver.get_by_role("button", name=re.compile(r"^Approve this exact proposal")).click()
    approver.wait_for_load_state()
    assert " approves " in messages(approver, "success")[0]

    assert apply_case(case_id=case.pk) == "done"
    state = live_orders.state(DATE_ORDER)
    assert [(op["operation_key"], op["change"]) for op in state["operations"]] == [
        (case.operations.get().key, {"kind": "delivery_date", "delivery_date": day.isoformat()})
    ]
    assert state["order"]["delivery_date"] == day.isoformat()
    open_case(agent, case)
    assert panel_status(agent).startswith("Done")
    shot(agent, "date-done")
