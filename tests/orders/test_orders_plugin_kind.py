"""A plug-in change kind (``ORDERS_EXTRA_KINDS``) goes through the same core as the built-ins,
and the registry refuses a bad one at start-up."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from orders import kinds
from orders.models import Order
from tests.orders.helpers import ORDER_ID, operation_body, snapshot
from tests.support.order_system import GIFT_MESSAGE_KIND
from tests.test_production_settings import _env, _setup

pytestmark = pytest.mark.usefixtures("seeded")


@pytest.fixture
def gift_kind(settings):
    settings.ORDERS_EXTRA_KINDS = [GIFT_MESSAGE_KIND]


def gift(message: str = "Happy birthday, Sam!") -> dict:
    return {"kind": "gift_message", "message": message}


@pytest.mark.usefixtures("gift_kind")
def test_a_plug_in_kind_is_listed_applied_replayed_and_shown_on_the_order(api):
    body = operation_body(operation_key="GIFT-1-1", change=gift())

    first = api.apply(body)
    again = api.apply(body)

    assert api.get("/capabilities").json()["change_kinds"] == [
        *("delivery_date", "shipping_address", "order_cancellation", "gift_message")
    ]
    assert first.status_code == 201
    assert again.json() == {**first.json(), "replayed": True}
    order = api.get(f"/orders/{ORDER_ID}").json()
    assert order["gift_message"] == "Happy birthday, Sam!"
    assert order["version"] == 2
    assert Order.objects.get(pk=ORDER_ID).extra == {"gift_message": "Happy birthday, Sam!"}
    assert api.get("/operations/GIFT-1-1").json()["change"] == gift()


@pytest.mark.usefixtures("gift_kind")
def test_a_plug_in_kinds_own_refusals_and_the_generic_ones_hold(api):
    Order.objects.filter(pk=ORDER_ID).update(fence_token=10)
    before = snapshot()

    stale = api.apply(operation_body(operation_key="GIFT-1-1", change=gift(), fencing_token=9))
    bad = api.apply(operation_body(operation_key="GIFT-1-1", change=gift("x" * 201)))
    own = api.apply(
        operation_body(operation_key="GIFT-1-1", change=gift("forbidden words"), fencing_token=10)
    )
    Order.objects.filter(pk=ORDER_ID).update(status="shipped")
    shipped = api.apply(operation_body(operation_key="GIFT-1-1", change=gift(), fencing_token=10))

    assert stale.json()["error"] == "stale_fencing_token"
    assert bad.json()["fields"] == {"change.message": "Must be 1 to 200 characters."}
    assert own.json()["fields"] == {
        "change.message": "This message cannot be printed on a gift card."
    }
    assert shipped.json()["error"] == "order_not_open"
    Order.objects.filter(pk=ORDER_ID).update(status="open")
    assert snapshot() == before


def test_without_the_plug_in_its_kind_is_unsupported(api):
    response = api.apply(operation_body(operation_key="GIFT-1-1", change=gift()))

    assert response.json()["error"] == "unsupported_kind"
    assert "gift_message" not in api.get(f"/orders/{ORDER_ID}").json()


@pytest.mark.parametrize(
    ("paths", "message"),
    [
        (["tests.support.no_such_module"], "cannot import tests.support.no_such_module"),
        (["tests.orders.helpers"], "HANDLER must have a code and parse, check and apply"),
        ([GIFT_MESSAGE_KIND, GIFT_MESSAGE_KIND], "registers gift_message, which is already"),
    ],
)
def test_the_registry_refuses_a_plug_in_it_cannot_use(settings, paths, message):
    settings.ORDERS_EXTRA_KINDS = paths

    with pytest.raises(ImproperlyConfigured, match=message):
        kinds.kinds()


def test_a_plug_in_cannot_take_a_built_in_kinds_code(settings, monkeypatch):
    monkeypatch.setattr(
        "tests.support.orders_gift_message_kind.GiftMessage.code", "order_cancellation"
    )
    settings.ORDERS_EXTRA_KINDS = [GIFT_MESSAGE_KIND]
    kinds._registry.cache_clear()  # handlers are made once per setting; make them again

    with pytest.raises(ImproperlyConfigured, match="order_cancellation, which is already a kind"):
        kinds.kinds()


def test_a_plug_in_may_not_set_an_orders_identity_or_fence(api, settings, monkeypatch):
    """``orders.sql.order_update_sql`` takes only the fields a kind may change."""
    monkeypatch.setattr(
        "tests.support.orders_gift_message_kind.GiftMessage.apply",
        lambda self, order, change: {"fence_token": 0},
    )
    settings.ORDERS_EXTRA_KINDS = [GIFT_MESSAGE_KIND]
    before = snapshot()

    with pytest.raises(ValueError, match="may not set fence_token"):
        api.apply(operation_body(operation_key="GIFT-1-1", change=gift()))

    assert snapshot() == before


# --- settings, read at start-up ---------------------------------------------------------------


def test_production_refuses_plug_in_kinds(tmp_path):
    result = _setup(_env("orders.settings", tmp_path, ORDERS_EXTRA_KINDS=GIFT_MESSAGE_KIND))

    assert result.returncode != 0
    assert "ORDERS_EXTRA_KINDS must be empty when DJANGO_ENV=production" in result.stderr


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("ORDERS_CHANGE_KINDS", "delivery_date,teleport", "ORDERS_CHANGE_KINDS names teleport"),
        ("ORDERS_SHIP_TO_COUNTRIES", "GB,usa", "ORDERS_SHIP_TO_COUNTRIES holds usa"),
        ("ORDERS_EXTRA_KINDS", "tests.support.nothing_here", "cannot import"),
    ],
)
def test_a_bad_kind_setting_stops_the_order_system_at_start_up(tmp_path, name, value, message):
    result = _setup(_env("orders.settings", tmp_path, DJANGO_ENV="test", **{name: value}))

    assert result.returncode != 0
    assert message in result.stderr
