"""A fourth change kind, added without changing a core file (README "Change kinds").

The kind lives in ``tests/support/gift_message_kind.py`` (Holdfast's side: the kind, its form,
its serializer) and ``tests/support/orders_gift_message_kind.py`` (the receiver's handler, which
the order system loads through ``ORDERS_EXTRA_KINDS``). Registered, it goes through the whole
safety core: intake, source check, proposal, approval, the probe proving it, claim, apply, an
answer dropped after commit (held, effect unknown), settlement from evidence, done -- one
write at the order system.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from approvals.grants import grant_issue
from approvals.models import Operation, Proposal
from approvals.services import proposal_approve
from cases import kinds
from cases.fencing import next_fencing_token
from cases.models import Case, Status
from reconciliation.apply import apply_case
from reconciliation.client import OrderSystemClient
from reconciliation.probe import order_system_probe
from reconciliation.settle import case_reconcile
from reconciliation.sources import source_check
from reconciliation.tasks import prepare_proposal
from tests.support.fixtures import days_ahead
from tests.support.gift_message_kind import GiftMessage
from tests.support.order_system import GIFT_MESSAGE_KIND, OrderSystemProcess

pytestmark = pytest.mark.order_system

PROBE_ORDER = "ORD-PROBE"


@pytest.fixture(scope="module")
def order_system_process():
    """This module's order system: it also accepts the gift message kind."""
    process = OrderSystemProcess(extra_kinds=[GIFT_MESSAGE_KIND]).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def gift_message():
    """The fourth kind, registered for this test only (a deployment names it in
    ``HOLDFAST_CHANGE_KINDS``)."""
    kind = kinds.register(GiftMessage())
    yield kind
    kinds.unregister(kind.code)


def _apply_directly(order_id: str, change: dict, version: int) -> None:
    """A change made at the order system outside any case (as its own staff would)."""
    key = f"STAFF-{order_id}-{version}"
    with OrderSystemClient.from_settings() as client:
        client.apply_operation(
            order_id,
            operation_key=key,
            change=change,
            expected_version=version,
            fencing_token=next_fencing_token(),
            approval_grant=grant_issue(
                operation_key=key,
                order_id=order_id,
                change=change,
                approval_id="AP-STAFF",
                expires_at=timezone.now() + dt.timedelta(hours=1),
            ),
        )


@pytest.fixture
def proven(live_orders, gift_message):
    """The probe proves the gift message on the sandbox order (which has one to go back to)."""
    live_orders.seed(
        accounts=[{"account_id": "ACC-PROBE", "name": "Probe", "access_active": True}],
        orders=[
            {
                "order_id": PROBE_ORDER,
                "account_id": "ACC-PROBE",
                "delivery_date": str(days_ahead(40)),
            }
        ],
        slots=[{"date": str(days_ahead(d)), "capacity": 5} for d in range(1, 15)],
    )
    _apply_directly(PROBE_ORDER, {"kind": "gift_message", "message": "Thank you!"}, 1)
    profile = order_system_probe(sandbox_order_id=PROBE_ORDER)
    assert profile.autonomy == "autonomous", profile.evidence
    assert profile.autonomy_of("gift_message") == "autonomous", profile.evidence["kinds"]
    assert live_orders.order(PROBE_ORDER)["gift_message"] == "Thank you!"  # changed back
    return profile


def test_a_fourth_kind_goes_through_claim_apply_hold_settle_and_done(
    live_orders, gift_message, proven, make_case, approver
):
    assert type(gift_message).__module__ == "tests.support.gift_message_kind"
    case = make_case(change={"kind": "gift_message", "message": "  Happy birthday, Ana!"})
    assert case.change == {"kind": "gift_message", "message": "  Happy birthday, Ana!"}
    assert source_check(case_id=case.pk) == "checked"
    assert prepare_proposal(case.pk) == "submitted"
    proposal = Proposal.objects.get(case=case, status=Proposal.Status.AWAITING_REVIEW)
    assert proposal.operation.key == f"GIFT-{case.number}-1"
    proposal_approve(proposal=proposal, actor=approver)

    live_orders.set_fault("drop_after_commit", path_prefix="/orders/")
    assert apply_case(case_id=case.pk) == "effect_unknown"
    assert Case.objects.get(pk=case.pk).status == Status.HELD

    assert case_reconcile(case_id=case.pk) == "applied"
    assert apply_case(case_id=case.pk) == "done"

    operation = Operation.objects.get(case=case)
    records = live_orders.state(case.order_id)["operations"]
    assert [(r["operation_key"], r["change"]) for r in records] == [(operation.key, case.change)]
    assert live_orders.order(case.order_id)["gift_message"] == "  Happy birthday, Ana!"
    assert Case.objects.get(pk=case.pk).status == Status.DONE


def test_a_fourth_kinds_refusal_needs_a_person(
    live_orders, gift_message, proven, make_case, approver
):
    """The receiver's handler refuses a message it cannot print (422 invalid_field): a definite
    refusal, so the case goes to a person and nothing is retried or written."""
    case = make_case(change={"kind": "gift_message", "message": "A forbidden word"})
    assert source_check(case_id=case.pk) == "checked"
    assert prepare_proposal(case.pk) == "submitted"
    proposal_approve(
        proposal=Proposal.objects.get(case=case, status=Proposal.Status.AWAITING_REVIEW),
        actor=approver,
    )

    assert apply_case(case_id=case.pk) == "needs_attention"

    assert "invalid_field" in Case.objects.get(pk=case.pk).last_error
    assert live_orders.state(case.order_id)["operations"] == []


def test_without_the_kind_registered_intake_refuses_it(make_case):
    from cases.exceptions import InvalidCaseInput

    with pytest.raises(InvalidCaseInput):
        make_case(change={"kind": "gift_message", "message": "Hello"})
