"""Management commands of the order system: demo data and a delivery pass."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from orders.models import Account, Order, OutboxEvent, Slot
from tests.orders.helpers import Receiver, operation_body, seed_rows


@pytest.mark.django_db
def test_seed_demo_creates_the_d41_order_once():
    call_command("seed_demo", stdout=io.StringIO())
    Order.objects.filter(pk="ORD-7731").update(version=4)  # the demo moved on

    call_command("seed_demo", stdout=io.StringIO())

    today = timezone.localdate()
    order = Order.objects.get(pk="ORD-7731")
    assert (order.version, order.delivery_date) == (4, today + timedelta(days=3))
    assert Account.objects.get(pk="ACC-100").name == "Northwind Bakery"
    assert Slot.objects.count() == 28
    assert Slot.objects.get(date=today + timedelta(days=3)).taken == 1
    assert set(Slot.objects.values_list("capacity", flat=True)) == {5}


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
