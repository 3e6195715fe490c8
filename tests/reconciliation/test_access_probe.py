"""Review: the admin "Run probe" button moves any order a lead names, outside every case.

The probe makes real changes to the "sandbox" order it is given (DESIGN: approvals are
four-eyes, every query is scoped to the caller's teams). Nothing checks that the order id is a
reserved sandbox order rather than a customer's order belonging to some team's case.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

RUN_PROBE = "admin:reconciliation_ordersystemprofile_run_probe"


@pytest.mark.order_system
def test_lead_of_another_team_cannot_probe_a_customers_order(client, live_orders, case, outsider):
    """``outsider`` leads another team; ORD-7731 is the order of ``case`` (team Deliveries)."""
    before = live_orders.state(case.order_id)
    client.force_login(outsider)

    client.post(reverse(RUN_PROBE), {"sandbox_order_id": case.order_id})

    after = live_orders.state(case.order_id)
    assert after["order"]["delivery_date"] == before["order"]["delivery_date"], (
        "the probe moved a customer's order without a proposal or an approval"
    )
    assert after["operations"] == before["operations"]
