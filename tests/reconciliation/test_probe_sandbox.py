"""A case on a sandbox order cannot switch the capability probe off."""

from __future__ import annotations

import pytest

from reconciliation.client import OrderSystemClient
from reconciliation.models import CAPABILITIES, Autonomy
from reconciliation.probe import ProbeRefused, order_system_probe, probe_check_sandbox

from .conftest import SANDBOX, TIMEOUTS, seed_sandbox


@pytest.fixture
def leftover_case(settings, make_case):
    """A case opened on the sandbox order before it was reserved (intake now refuses it)."""
    reserved = settings.ORDER_SYSTEM_SANDBOX_ORDERS
    settings.ORDER_SYSTEM_SANDBOX_ORDERS = []
    case = make_case(order_id=SANDBOX)
    settings.ORDER_SYSTEM_SANDBOX_ORDERS = reserved
    return case


def test_a_case_on_the_sandbox_order_does_not_block_the_probe(leftover_case):
    probe_check_sandbox(SANDBOX)  # does not raise


def test_the_probe_still_refuses_an_order_that_is_not_reserved(case):
    with pytest.raises(ProbeRefused, match="not a reserved sandbox order"):
        probe_check_sandbox(case.order_id)


@pytest.mark.order_system
def test_the_probe_verifies_the_order_system_despite_a_case_on_its_sandbox_order(
    leftover_case, order_system, grant_key
):
    seed_sandbox(order_system)

    with OrderSystemClient(order_system.base_url, timeouts=TIMEOUTS) as client:
        profile = order_system_probe(sandbox_order_id=SANDBOX, client=client)

    assert profile.verified == dict.fromkeys(CAPABILITIES, True), profile.evidence
    assert profile.autonomy == Autonomy.AUTONOMOUS
