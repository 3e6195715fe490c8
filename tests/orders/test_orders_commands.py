"""Management commands of the order system: demo data and a delivery pass."""

from __future__ import annotations

import io
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from orders.models import Account, Order, OutboxEvent, Slot
from orders.services import SEED_ADDRESS
from tests.orders.helpers import ADDRESS, Receiver, operation_body, seed_rows

DEMO_ORDERS = ("ORD-7731", "ORD-7732", "ORD-7733", "ORD-7734", "ORD-PROBE")


@pytest.mark.django_db
def test_seed_demo_creates_the_demo_orders_once():
    call_command("seed_demo", stdout=io.StringIO())
    Order.objects.filter(pk="ORD-7731").update(version=4)  # the demo moved on

    call_command("seed_demo", stdout=io.StringIO())

    today = timezone.localdate()
    order = Order.objects.get(pk="ORD-7731")
    assert (order.version, order.delivery_date) == (4, today + timedelta(days=3))
    assert Account.objects.get(pk="ACC-100").name == "Northwind Traders"
    assert Slot.objects.count() == 28
    assert set(Slot.objects.values_list("capacity", flat=True)) == {5}
    orders = {order.order_id: order for order in Order.objects.all()}
    assert set(orders) == set(DEMO_ORDERS)
    for order in orders.values():
        # Every demo order holds its delivery slot place and has an address on record.
        assert Slot.objects.get(date=order.delivery_date).taken == 1
        assert set(order.shipping_address) == {
            *("name", "line1", "line2", "city", "postal_code", "country")
        }
    assert orders["ORD-7732"].shipping_address == ADDRESS  # KINDS-CONTRACT's Dana Whitfield
    assert {order_id: order.status for order_id, order in orders.items()} == {
        **dict.fromkeys(DEMO_ORDERS, "open"),
        "ORD-7734": "shipped",
    }
    assert {order.account_id for order in orders.values()} == {"ACC-100", "ACC-PROBE"}
    assert orders["ORD-PROBE"].account_id == "ACC-PROBE"


@pytest.mark.django_db
def test_seed_demo_gives_an_order_from_before_addresses_its_address_and_nothing_else():
    call_command("seed_demo", stdout=io.StringIO())
    Order.objects.filter(pk="ORD-7731").update(shipping_address=None, version=3)

    call_command("seed_demo", stdout=io.StringIO())

    order = Order.objects.get(pk="ORD-7731")
    assert order.shipping_address["line1"] == "4 Wapping Wharf"
    assert order.version == 3
    assert Slot.objects.get(date=order.delivery_date).taken == 1


@pytest.mark.django_db
def test_deliver_events_command_runs_one_pass(client, settings):
    seed_rows()
    client.post(
        "/orders/ORD-1/operations",
        operation_body(),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {settings.ORDERS_API_TOKEN}",
    )
    with Receiver(fail_first=0) as receiver:
        settings.ORDERS_WEBHOOK_URL = receiver.url
        out = io.StringIO()
        call_command("orders_deliver_events", stdout=out)

    assert out.getvalue().strip() == "Delivered 1, failed 0."
    assert OutboxEvent.objects.get().delivered_at is not None
    assert len(receiver.received) == 1


@pytest.mark.django_db
def test_seed_data_upserts_a_document_without_the_testing_endpoints(tmp_path, settings):
    settings.ORDERS_FAULTS_ENABLED = False  # as deployed: /_testing/seed answers 404
    document = tmp_path / "seed.json"
    document.write_text(
        '{"accounts": [{"account_id": "ACC-9", "name": "Nine"}],'
        ' "orders": [{"order_id": "ORD-9", "account_id": "ACC-9", "delivery_date": "2026-12-20"}],'
        ' "slots": [{"date": "2026-12-24", "capacity": 3}]}'
    )
    out = io.StringIO()
    call_command("seed_data", str(document), stdout=out)
    call_command("seed_data", str(document), stdout=out)  # again: upserted, not duplicated

    assert out.getvalue().splitlines()[-1] == "1 accounts, 1 orders, 1 slots."
    order = Order.objects.get(pk="ORD-9")
    assert (order.account_id, str(order.delivery_date), order.version) == ("ACC-9", "2026-12-20", 1)
    assert (order.status, order.shipping_address) == ("open", SEED_ADDRESS)
    assert Slot.objects.get().capacity == 3


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "Cannot read a JSON document"),
        ('{"orders": [{"order_id": "ORD-9"}]}', "Cannot seed: KeyError('account_id')"),
        ("[]", "Must be a JSON object."),
    ],
)
def test_seed_data_refuses_a_bad_document_and_writes_nothing(tmp_path, text, message):
    from django.core.management import CommandError

    document = tmp_path / "seed.json"
    document.write_text(text)
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("seed_data", str(document), stdout=io.StringIO())
    assert not Order.objects.exists()
