"""Test and demo data with kinds: orders seeded with a status and an address, and an order's
status or address changed as the world outside Holdfast would change it."""

from __future__ import annotations

import pytest

from orders.models import Order, OutboxEvent
from orders.services import SEED_ADDRESS
from tests.orders.helpers import ADDRESS, NEW_ADDRESS, ORDER_ID, body_for_kind, snapshot
from tests.support import order_system

pytestmark = pytest.mark.usefixtures("faults_on")


def seed(api, **order) -> object:
    item = {"order_id": "ORD-5", "account_id": "ACC-5", "delivery_date": "2031-04-01", **order}
    return api.post(
        "/_testing/seed",
        {"accounts": [{"account_id": "ACC-5", "name": "Five"}], "orders": [item]},
    )


@pytest.mark.django_db
def test_a_seeded_order_is_open_with_the_seed_address_unless_it_says_otherwise(api):
    assert seed(api).status_code == 200
    plain = Order.objects.get(pk="ORD-5")
    assert (
        seed(api, order_id="ORD-6", status="shipped", shipping_address=ADDRESS).status_code == 200
    )
    assert seed(api, order_id="ORD-7", shipping_address=None).status_code == 200

    assert (plain.status, plain.shipping_address) == ("open", SEED_ADDRESS)
    assert api.get("/orders/ORD-6").json()["status"] == "shipped"
    assert api.get("/orders/ORD-6").json()["shipping_address"] == ADDRESS
    assert api.get("/orders/ORD-7").json()["shipping_address"] is None


@pytest.mark.django_db
def test_seeding_an_existing_order_again_changes_only_what_it_names(api):
    seed(api, shipping_address=ADDRESS, status="shipped")

    seed(api, version=4)

    order = Order.objects.get(pk="ORD-5")
    assert (order.version, order.status, order.shipping_address) == (4, "shipped", ADDRESS)


@pytest.mark.django_db
def test_a_seed_address_missing_line2_is_stored_with_an_empty_one(api):
    seed(api, shipping_address=NEW_ADDRESS)

    assert Order.objects.get(pk="ORD-5").shipping_address == {**NEW_ADDRESS, "line2": ""}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("order", "says"),
    [
        ({"status": "lost"}, "status 'lost' is not one of open, shipped, cancelled"),
        ({"shipping_address": {"name": "x"}}, "shipping_address.line1: Required."),
        ({"shipping_address": "Bristol"}, "is not an object or null"),
    ],
)
def test_a_bad_seed_is_refused_and_writes_nothing(api, order, says):
    response = seed(api, **order)

    assert response.status_code == 422
    assert says in response.json()["fields"]["body"]
    assert not Order.objects.exists()


@pytest.mark.usefixtures("seeded")
def test_setting_an_order_shipped_moves_its_version_and_tells_holdfast(api):
    response = api.post(f"/_testing/orders/{ORDER_ID}", {"status": "shipped"})

    assert response.status_code == 200
    assert response.json()["status"] == "shipped"
    assert response.json()["version"] == 2
    event = OutboxEvent.objects.get()
    assert (event.order_id, event.order_version) == (ORDER_ID, 2)
    refused = api.apply(body_for_kind("ADDR", expected_version=2))
    assert refused.json()["error"] == "order_not_open"


@pytest.mark.usefixtures("seeded")
def test_setting_an_order_without_a_version_bump_changes_only_the_fields(api):
    response = api.post(
        f"/_testing/orders/{ORDER_ID}",
        {"shipping_address": NEW_ADDRESS, "status": "cancelled", "bump_version": False},
    )

    order = Order.objects.get(pk=ORDER_ID)
    assert response.json()["version"] == order.version == 1
    assert (order.status, order.shipping_address) == ("cancelled", {**NEW_ADDRESS, "line2": ""})
    assert not OutboxEvent.objects.exists()


@pytest.mark.usefixtures("seeded")
@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/_testing/orders/ORD-404", {"status": "shipped"}, 404),
        (f"/_testing/orders/{ORDER_ID}", {}, 422),
        (f"/_testing/orders/{ORDER_ID}", {"status": "gone"}, 422),
        (f"/_testing/orders/{ORDER_ID}", {"status": "shipped", "bump_version": "no"}, 422),
    ],
)
def test_a_bad_order_change_is_refused_and_changes_nothing(api, path, body, status):
    before = snapshot()

    response = api.post(path, body)

    assert response.status_code == status
    assert snapshot() == before


@pytest.mark.usefixtures("seeded")
def test_the_order_change_endpoint_is_gated_like_the_faults(api, settings):
    settings.ORDERS_FAULTS_ENABLED = False

    assert api.post(f"/_testing/orders/{ORDER_ID}", {"status": "shipped"}).status_code == 404
    assert Order.objects.get(pk=ORDER_ID).status == "open"


def test_the_harness_knows_the_order_systems_seed_address():
    """``tests/support/order_system.py`` cannot import ``orders``: it keeps a copy."""
    assert order_system.SEED_ADDRESS == SEED_ADDRESS
