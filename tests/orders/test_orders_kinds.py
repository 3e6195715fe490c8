"""Change kinds at the receiver (KINDS-CONTRACT): every built-in kind through the one core.

Each kind is applied, replayed, refused for key reuse, refused on an order that is not open,
fenced and looked up; each refusal changes nothing (``snapshot``).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from orders.models import AppliedOperation, Order, OutboxEvent, Slot
from tests.orders.helpers import (
    ADDRESS,
    CHANGES,
    CURRENT_DATE,
    FREE_DATE,
    FULL_DATE,
    NEW_ADDRESS,
    ORDER_ID,
    address_change,
    body_for_kind,
    cancellation,
    date_change,
    make_grant,
    operation_body,
    snapshot,
)

pytestmark = pytest.mark.usefixtures("seeded")

KINDS = list(CHANGES)  # the key prefixes DATE, ADDR, CANCEL


def order_fields() -> dict:
    order = Order.objects.get(pk=ORDER_ID)
    return {
        "status": order.status,
        "delivery_date": order.delivery_date,
        "shipping_address": order.shipping_address,
    }


def taken(day) -> int:
    return Slot.objects.get(date=day).taken


# --- apply, replay, key reuse --------------------------------------------------------------------

EXPECTED = {
    "DATE": {"status": "open", "delivery_date": FREE_DATE, "shipping_address": ADDRESS},
    "ADDR": {
        "status": "open",
        "delivery_date": CURRENT_DATE,
        "shipping_address": {**NEW_ADDRESS, "line2": ""},
    },
    "CANCEL": {"status": "cancelled", "delivery_date": CURRENT_DATE, "shipping_address": ADDRESS},
}
# Places taken on (CURRENT_DATE, FREE_DATE) after the apply: seeded (1, 0).
EXPECTED_SLOTS = {"DATE": (0, 1), "ADDR": (1, 0), "CANCEL": (0, 0)}


@pytest.mark.parametrize("prefix", KINDS)
def test_each_kind_applies_once_and_changes_only_its_own_fields(api, prefix):
    response = api.apply(body_for_kind(prefix, fencing_token=7))

    assert response.status_code == 201, response.json()
    assert response.json() == {
        "operation_key": f"{prefix}-1-1",
        "status": "applied",
        "order_version": 2,
    }
    assert order_fields() == EXPECTED[prefix]
    order = Order.objects.get(pk=ORDER_ID)
    assert (order.version, order.fence_token) == (2, 7)
    assert (taken(CURRENT_DATE), taken(FREE_DATE)) == EXPECTED_SLOTS[prefix]
    assert AppliedOperation.objects.get().change == CHANGES[prefix]
    assert OutboxEvent.objects.get().order_version == 2
    shown = api.get(f"/orders/{ORDER_ID}").json()
    assert shown["status"] == EXPECTED[prefix]["status"]
    assert shown["delivery_date"] == EXPECTED[prefix]["delivery_date"].isoformat()
    assert shown["shipping_address"] == EXPECTED[prefix]["shipping_address"]


@pytest.mark.parametrize("prefix", KINDS)
def test_each_kind_replays_its_first_answer_and_changes_nothing(api, prefix):
    first = api.apply(body_for_kind(prefix, fencing_token=7))
    before = snapshot()

    again = api.apply(
        body_for_kind(prefix, fencing_token=9)
    )  # a later attempt of the same operation

    assert first.status_code == 201
    assert again.status_code == 200
    assert again.json() == {**first.json(), "replayed": True}
    assert snapshot() == before


OTHER_CHANGE = {
    "DATE": date_change(CURRENT_DATE + timedelta(days=1)),
    "ADDR": address_change(city="Lyon", postal_code="69001"),
    "CANCEL": cancellation("duplicate"),
}


@pytest.mark.parametrize("prefix", KINDS)
@pytest.mark.parametrize("other", ["same kind", "another kind"])
def test_a_key_reused_with_another_change_is_refused_and_changes_nothing(api, prefix, other):
    assert api.apply(body_for_kind(prefix)).status_code == 201
    before = snapshot()
    change = (
        OTHER_CHANGE[prefix]
        if other == "same kind"
        else CHANGES[KINDS[(KINDS.index(prefix) + 1) % len(KINDS)]]
    )

    response = api.apply(operation_body(operation_key=f"{prefix}-1-1", change=change))

    assert response.status_code == 422
    assert response.json()["error"] == "key_reused"
    assert snapshot() == before


def test_the_body_hash_covers_every_field_of_the_change(api):
    """Same key, same kind, one address field different (line2 present vs absent)."""
    first = api.apply(operation_body(operation_key="ADDR-1-1", change=address_change()))
    assert first.status_code == 201

    response = api.apply(
        operation_body(operation_key="ADDR-1-1", change=address_change(line2="")),
    )

    assert response.json()["error"] == "key_reused"


# --- the order must be open ----------------------------------------------------------------------


@pytest.mark.parametrize("prefix", KINDS)
@pytest.mark.parametrize("status", ["shipped", "cancelled"])
def test_no_kind_changes_an_order_that_is_not_open(api, prefix, status):
    Order.objects.filter(pk=ORDER_ID).update(status=status)
    before = snapshot()

    response = api.apply(body_for_kind(prefix))

    assert response.status_code == 409
    assert response.json()["error"] == "order_not_open"
    assert status in response.json()["detail"]
    assert snapshot() == before
    assert api.get(f"/operations/{prefix}-1-1").status_code == 404


def test_a_cancelled_order_refuses_every_later_change(api):
    assert api.apply(body_for_kind("CANCEL")).status_code == 201

    later = [
        api.apply(
            operation_body(
                operation_key=f"{prefix}-1-2",
                change=CHANGES[prefix],
                expected_version=2,
                fencing_token=8,
            )
        )
        for prefix in KINDS
    ]

    assert [r.json()["error"] for r in later] == ["order_not_open"] * 3
    assert Order.objects.get(pk=ORDER_ID).version == 2


def test_the_generic_checks_come_before_the_order_status(api):
    """Contract order: the version conflict (6) before order_not_open (8)."""
    Order.objects.filter(pk=ORDER_ID).update(status="shipped")

    response = api.apply(body_for_kind("ADDR", expected_version=5))

    assert response.json()["error"] == "version_conflict"


# --- unsupported kinds ---------------------------------------------------------------------------


def test_a_disabled_kind_is_unsupported_and_not_listed(api, settings):
    settings.ORDERS_CHANGE_KINDS = ["delivery_date", "shipping_address"]
    before = snapshot()

    response = api.apply(body_for_kind("CANCEL"))

    assert response.status_code == 422
    assert response.json()["error"] == "unsupported_kind"
    detail = response.json()["detail"]
    assert "'order_cancellation'" in detail
    assert detail.endswith("it accepts: delivery_date, shipping_address.")
    assert snapshot() == before
    assert api.get("/capabilities").json()["change_kinds"] == ["delivery_date", "shipping_address"]
    assert api.apply(body_for_kind("ADDR")).status_code == 201


def test_an_unknown_kind_is_unsupported_even_with_other_bad_fields(api):
    body = {**operation_body(change={"kind": "teleport"}), "expected_version": 0}

    response = api.apply(body)

    assert response.status_code == 422
    assert response.json()["error"] == "unsupported_kind"
    assert "'teleport'" in response.json()["detail"]


@pytest.mark.parametrize(
    "change",
    [
        {"delivery_date": "2031-03-08"},
        {"kind": None, "delivery_date": "2031-03-08"},
        {"kind": 3},
        {"kind": ""},
    ],
)
def test_a_change_without_a_string_kind_is_invalid_field_change_kind(api, change):
    response = api.apply(operation_body(change=change))

    assert response.status_code == 422
    assert response.json()["error"] == "invalid_field"
    assert response.json()["fields"] == {"change.kind": "Must be the change's kind (a string)."}


def test_a_change_that_is_not_an_object_is_invalid_field_change(api):
    response = api.apply(operation_body(change=["delivery_date"]))

    assert set(response.json()["fields"]) == {"change"}


# --- invalid fields, per kind --------------------------------------------------------------------

BAD_ADDRESSES = [
    # (what the address has, the dotted field named)
    ({"name": ""}, "change.address.name"),
    ({"name": "   "}, "change.address.name"),
    ({"name": "x" * 101}, "change.address.name"),
    ({"name": None}, "change.address.name"),  # missing
    ({"line1": 12}, "change.address.line1"),
    ({"line2": "y" * 101}, "change.address.line2"),
    ({"city": "Par\x00is"}, "change.address.city"),
    ({"name": "Dana\nWhitfield"}, "change.address.name"),
    ({"line1": "3 Rue\tde la Paix"}, "change.address.line1"),
    ({"line2": "Flat\x852"}, "change.address.line2"),  # a C1 control character
    ({"city": "Paris\x7f"}, "change.address.city"),
    ({"postal_code": "75#002"}, "change.address.postal_code"),
    ({"postal_code": "1" * 21}, "change.address.postal_code"),
    ({"postal_code": ""}, "change.address.postal_code"),
    ({"country": "fr"}, "change.address.country"),
    ({"country": "FRA"}, "change.address.country"),
    ({"country": None}, "change.address.country"),
    ({"county": "Avon"}, "change.address.county"),
]


@pytest.mark.parametrize(("fields", "named"), BAD_ADDRESSES)
def test_each_bad_address_field_is_named_and_changes_nothing(api, fields, named):
    before = snapshot()

    response = api.apply(body_for_kind("ADDR") | {"change": address_change(**fields)})

    assert response.status_code == 422
    assert response.json()["error"] == "invalid_field"
    assert list(response.json()["fields"]) == [named]
    assert snapshot() == before


def test_an_address_that_is_not_an_object_and_unknown_change_fields_are_named(api):
    response = api.apply(
        operation_body(change={"kind": "shipping_address", "address": "Paris", "note": "x"})
    )

    assert set(response.json()["fields"]) == {"change.address", "change.note"}


def test_an_address_with_every_field_wrong_names_them_all(api):
    change = {
        "kind": "shipping_address",
        "address": {"name": "", "line1": "", "city": 1, "postal_code": "?", "country": "x"},
    }

    response = api.apply(operation_body(change=change))

    assert set(response.json()["fields"]) == {
        *("change.address.name", "change.address.line1", "change.address.city"),
        *("change.address.postal_code", "change.address.country"),
    }


def test_a_country_the_system_does_not_ship_to_is_refused_under_the_lock(api):
    body = body_for_kind("ADDR") | {"change": address_change(country="US")}
    body["approval_grant"] = make_grant(operation_key="ADDR-1-1", change=body["change"])
    before = snapshot()

    response = api.apply(body)

    assert response.status_code == 422
    assert response.json()["error"] == "invalid_field"
    assert response.json()["fields"] == {"change.address.country": "We do not ship to US."}
    assert snapshot() == before


def test_the_unserved_country_is_judged_after_the_generic_checks(api):
    """It is the kind's own check (9): a stale token (4) is refused first."""
    change = address_change(country="US")
    Order.objects.filter(pk=ORDER_ID).update(fence_token=10)

    response = api.apply(operation_body(operation_key="ADDR-1-1", change=change, fencing_token=9))

    assert response.json()["error"] == "stale_fencing_token"


def test_the_countries_shipped_to_come_from_the_settings(api, settings):
    settings.ORDERS_SHIP_TO_COUNTRIES = ["US"]
    change = address_change(country="US")

    response = api.apply(operation_body(operation_key="ADDR-1-1", change=change))

    assert response.status_code == 201
    assert api.get("/capabilities").json()["ship_to_countries"] == ["US"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"kind": "order_cancellation"}, "change.reason_code"),
        ({"kind": "order_cancellation", "reason_code": "bored"}, "change.reason_code"),
        ({"kind": "order_cancellation", "reason_code": "other", "why": "x"}, "change.why"),
        ({"kind": "delivery_date", "delivery_date": "2031-3-8"}, "change.delivery_date"),
        ({"kind": "delivery_date"}, "change.delivery_date"),
        ({"kind": "delivery_date", "delivery_date": "2031-03-08", "slot": 1}, "change.slot"),
    ],
)
def test_bad_fields_of_the_other_kinds_are_named(api, change, named):
    response = api.apply(operation_body(change=change))

    assert response.status_code == 422
    assert list(response.json()["fields"]) == [named]


@pytest.mark.parametrize("reason", ["customer_request", "duplicate", "fraud_suspected", "other"])
def test_every_cancellation_reason_is_accepted(api, reason):
    response = api.apply(operation_body(operation_key="CANCEL-1-1", change=cancellation(reason)))

    assert response.status_code == 201


# --- slots ---------------------------------------------------------------------------------------


def test_a_date_change_to_a_full_slot_is_refused_and_takes_nothing(api):
    before = snapshot()

    response = api.apply(operation_body(change=date_change(FULL_DATE)))

    assert response.json()["error"] == "slot_unavailable"
    assert snapshot() == before


def test_a_cancellation_frees_its_slot_place_for_another_order(api):
    Slot.objects.filter(date=CURRENT_DATE).update(capacity=1, taken=1)
    order = Order.objects.get(pk=ORDER_ID)
    order.pk, order.delivery_date, order.fence_token = "ORD-2", FREE_DATE, 0
    order.save(force_insert=True)
    Slot.objects.filter(date=FREE_DATE).update(taken=1)
    move = operation_body(
        operation_key="DATE-2-1", change=date_change(CURRENT_DATE), order_id="ORD-2"
    )

    full = api.apply(move, order_id="ORD-2")
    cancelled = api.apply(body_for_kind("CANCEL"))
    moved = api.apply(
        operation_body(
            operation_key="DATE-2-2", change=date_change(CURRENT_DATE), order_id="ORD-2"
        ),
        order_id="ORD-2",
    )

    assert full.json()["error"] == "slot_unavailable"
    assert cancelled.status_code == 201
    assert moved.status_code == 201
    assert (taken(CURRENT_DATE), taken(FREE_DATE)) == (1, 0)


def test_an_address_change_or_a_refusal_leaves_the_slots_alone(api):
    before = list(Slot.objects.order_by("date").values_list("taken", flat=True))

    assert api.apply(body_for_kind("ADDR")).status_code == 201
    assert api.apply(body_for_kind("DATE") | {"expected_version": 9}).status_code == 409

    assert list(Slot.objects.order_by("date").values_list("taken", flat=True)) == before


# --- the grant compares the whole change ---------------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "granted"),
    [
        (address_change(), address_change(line2="")),
        (address_change(), address_change(name="Dana  Whitfield")),
        (address_change(), {"kind": "shipping_address", "address": NEW_ADDRESS, "x": 1}),
        (cancellation("other"), cancellation("duplicate")),
        (cancellation(), {"reason_code": "customer_request"}),  # no kind
        (date_change(), address_change()),
    ],
)
def test_a_grant_for_any_other_change_is_approval_invalid(api, sent, granted):
    body = operation_body(
        operation_key="ADDR-1-1",
        change=sent,
        grant=make_grant(operation_key="ADDR-1-1", change=granted),
    )
    before = snapshot()

    response = api.apply(body)

    assert response.status_code == 403
    assert response.json()["error"] == "approval_invalid"
    assert snapshot() == before


def test_a_grant_equal_by_canonical_json_is_accepted_whatever_the_key_order(api):
    sent = {"address": dict(reversed(list(NEW_ADDRESS.items()))), "kind": "shipping_address"}

    response = api.apply(
        operation_body(
            operation_key="ADDR-1-1",
            change=sent,
            grant=make_grant(operation_key="ADDR-1-1", change=address_change()),
        )
    )

    assert response.status_code == 201


# --- fence and lookup, per kind ------------------------------------------------------------------


@pytest.mark.parametrize("prefix", KINDS)
def test_after_a_fence_each_kind_refuses_the_old_token(api, prefix):
    assert api.post(f"/orders/{ORDER_ID}/fence", {"fencing_token": 8}).status_code == 200
    before = snapshot()

    old = api.apply(body_for_kind(prefix, fencing_token=7))
    after_old = snapshot()
    new = api.apply(body_for_kind(prefix, fencing_token=8))

    assert old.json()["error"] == "stale_fencing_token"
    assert after_old == before
    assert new.status_code == 201


@pytest.mark.parametrize("prefix", KINDS)
def test_the_lookup_returns_each_change_exactly_as_received(api, prefix):
    assert api.get(f"/operations/{prefix}-1-1").status_code == 404
    api.apply(body_for_kind(prefix))

    found = api.get(f"/operations/{prefix}-1-1")

    assert found.json() == {
        "operation_key": f"{prefix}-1-1",
        "order_id": ORDER_ID,
        "status": "applied",
        "order_version": 2,
        "change": CHANGES[prefix],
    }


def test_the_receiver_stores_the_change_without_normalising_it(api):
    """Surrounding spaces and a missing line2 stay as sent; the order's own copy has line2."""
    change = address_change(name=" Dana Whitfield ", line2=None)

    assert api.apply(operation_body(operation_key="ADDR-1-1", change=change)).status_code == 201

    assert api.get("/operations/ADDR-1-1").json()["change"] == change
    assert "line2" not in api.get("/operations/ADDR-1-1").json()["change"]["address"]
    assert Order.objects.get(pk=ORDER_ID).shipping_address == {
        **NEW_ADDRESS,
        "name": " Dana Whitfield ",
        "line2": "",
    }


def test_an_order_with_no_address_on_record_shows_null(api):
    Order.objects.filter(pk=ORDER_ID).update(shipping_address=None)

    assert api.get(f"/orders/{ORDER_ID}").json()["shipping_address"] is None
