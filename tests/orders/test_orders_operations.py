"""The receiving contract (CONTRACT §1) through the order system's HTTP views."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest

from orders.models import Account, AppliedOperation, Order, OutboxEvent, Slot
from tests.orders.helpers import (
    ADDRESS,
    CURRENT_DATE,
    FREE_DATE,
    FULL_DATE,
    INITIAL_FENCE,
    ORDER_ID,
    date_change,
    make_grant,
    operation_body,
    snapshot,
)

pytestmark = pytest.mark.usefixtures("seeded")


def test_operation_applies_once_and_moves_everything_in_one_step(api):
    response = api.apply(operation_body(fencing_token=7))

    assert response.status_code == 201
    assert response.json() == {"operation_key": "DATE-1-1", "status": "applied", "order_version": 2}
    order = Order.objects.get(pk=ORDER_ID)
    assert (order.delivery_date, order.version, order.fence_token) == (FREE_DATE, 2, 7)
    assert Slot.objects.get(date=CURRENT_DATE).taken == 0
    assert Slot.objects.get(date=FREE_DATE).taken == 1
    operation = AppliedOperation.objects.get()
    assert operation.approval_id == "AP-9"
    assert operation.change == {"kind": "delivery_date", "delivery_date": FREE_DATE.isoformat()}
    event = OutboxEvent.objects.get()
    assert (event.order_id, event.order_version, event.delivered_at) == (ORDER_ID, 2, None)
    assert set(event.payload) == {"event_id", "type", "order_id", "order_version", "occurred_at"}
    assert api.get(f"/orders/{ORDER_ID}").json() == {
        "order_id": ORDER_ID,
        "account_id": "ACC-1",
        "version": 2,
        "status": "open",
        "delivery_date": FREE_DATE.isoformat(),
        "shipping_address": ADDRESS,
    }


def test_replay_returns_the_first_result_and_changes_nothing(api):
    body = operation_body()
    first = api.apply(body)
    before = snapshot()

    again = api.apply(body)

    assert first.status_code == 201
    assert again.status_code == 200
    assert again.json() == {**first.json(), "replayed": True}
    assert snapshot() == before


def test_replay_by_a_later_attempt_with_a_higher_token_returns_the_first_result(api):
    """The token and grant belong to the attempt; the key and intent are the operation."""
    first = api.apply(operation_body(fencing_token=7))
    before = snapshot()

    again = api.apply(operation_body(fencing_token=9))

    assert again.status_code == 200
    assert again.json() == {**first.json(), "replayed": True}
    assert snapshot() == before


def test_same_key_with_another_change_is_key_reused_and_changes_nothing(api):
    assert api.apply(operation_body(delivery_date=FREE_DATE)).status_code == 201
    before = snapshot()
    other_date = CURRENT_DATE  # another intent under the same key

    response = api.apply(operation_body(delivery_date=other_date, expected_version=2))

    assert response.status_code == 422
    assert response.json()["error"] == "key_reused"
    assert snapshot() == before


def _fence_to(token: int) -> None:
    Order.objects.filter(pk=ORDER_ID).update(fence_token=token)


def _revoke_access() -> None:
    Account.objects.update(access_active=False)


# Each case: (arrange before the snapshot, request body, status, error code). The valid tokens
# are above the initial fence, so an implementation that raised the fence before refusing
# would change the snapshot.
REFUSALS = {
    "stale_fencing_token": (
        lambda: _fence_to(10),
        lambda: operation_body(fencing_token=9),
        409,
    ),
    "version_conflict": (None, lambda: operation_body(expected_version=2), 409),
    "slot_unavailable": (None, lambda: operation_body(delivery_date=FULL_DATE), 409),
    "slot_unavailable_without_slot_row": (
        None,
        lambda: operation_body(delivery_date=FREE_DATE + timedelta(days=30)),
        409,
    ),
    "approval_invalid": (
        None,
        lambda: operation_body(grant=make_grant(operation_key="DATE-1-1", key="another-key")),
        403,
    ),
    "approval_expired": (
        None,
        lambda: operation_body(
            grant=make_grant(
                operation_key="DATE-1-1", expires_at=datetime.now(UTC) - timedelta(seconds=1)
            )
        ),
        403,
    ),
    "permission_revoked": (_revoke_access, lambda: operation_body(), 403),
    "invalid_field": (
        None,
        lambda: {
            **operation_body(),
            "change": {"kind": "delivery_date", "delivery_date": "2031-13-40"},
        },
        422,
    ),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_each_refusal_answers_its_code_and_changes_nothing(api, case):
    arrange, make_body, status = REFUSALS[case]
    if arrange:
        arrange()
    body = make_body()
    before = snapshot()

    response = api.apply(body)

    assert response.status_code == status
    assert response.json()["error"] == case.removesuffix("_without_slot_row")
    assert response.json()["detail"]
    assert snapshot() == before
    # A refused key is not burnt: the lookup still knows nothing about it.
    assert api.get(f"/operations/{body['operation_key']}").status_code == 404


def test_invalid_field_names_every_bad_field(api):
    response = api.apply(
        {
            "operation_key": "",
            "change": {"kind": "delivery_date", "delivery_date": "tomorrow", "note": "x"},
            "expected_version": True,
            "fencing_token": -1,
        }
    )

    assert response.status_code == 422
    assert set(response.json()["fields"]) == {
        "operation_key",
        "change.delivery_date",
        "change.note",
        "expected_version",
        "fencing_token",
        "approval_grant",
    }


def test_unknown_order_is_404_and_changes_nothing(api):
    before = snapshot()

    response = api.apply(operation_body(order_id="ORD-404"), order_id="ORD-404")

    assert response.status_code == 404
    assert response.json()["error"] == "unknown_order"
    assert api.get("/orders/ORD-404").json()["error"] == "unknown_order"
    assert snapshot() == before


def test_refusal_order_key_before_fence_before_grant_before_version(api):
    """Checks run in the contract's order: a request wrong in several ways gets the first."""
    _fence_to(10)
    bad_everything = operation_body(
        fencing_token=1, expected_version=5, grant=make_grant(operation_key="x", key="k")
    )
    assert api.apply(bad_everything).json()["error"] == "stale_fencing_token"
    bad_grant_and_version = {**bad_everything, "fencing_token": 10}
    assert api.apply(bad_grant_and_version).json()["error"] == "approval_invalid"
    bad_version = operation_body(fencing_token=10, expected_version=5)
    assert api.apply(bad_version).json()["error"] == "version_conflict"


def test_after_a_fence_an_old_token_with_a_valid_grant_is_refused(api):
    fenced = api.post(f"/orders/{ORDER_ID}/fence", {"fencing_token": 8})
    before = snapshot()

    old_attempt = api.apply(operation_body(fencing_token=7))
    after_old_attempt = snapshot()
    new_attempt = api.apply(operation_body(fencing_token=8))

    assert fenced.json() == {"order_id": ORDER_ID, "min_token": 8}
    assert old_attempt.status_code == 409
    assert old_attempt.json()["error"] == "stale_fencing_token"
    assert after_old_attempt == before
    assert new_attempt.status_code == 201


def test_fence_is_monotonic_and_idempotent(api):
    path = f"/orders/{ORDER_ID}/fence"
    assert api.post(path, {"fencing_token": 8}).json()["min_token"] == 8
    assert api.post(path, {"fencing_token": 8}).status_code == 200
    below = api.post(path, {"fencing_token": 7})
    assert below.status_code == 409
    assert below.json()["error"] == "stale_fencing_token"
    assert Order.objects.get(pk=ORDER_ID).fence_token == 8
    assert api.post(path, {"fencing_token": "8"}).json()["error"] == "invalid_field"
    assert api.post("/orders/ORD-404/fence", {"fencing_token": 9}).status_code == 404


def test_a_successful_apply_raises_the_fence_to_its_token(api):
    assert api.apply(operation_body(fencing_token=20)).status_code == 201
    assert Order.objects.get(pk=ORDER_ID).fence_token == 20
    later = api.post(f"/orders/{ORDER_ID}/fence", {"fencing_token": 19})
    assert later.json()["error"] == "stale_fencing_token"


def _tampered_payload(token: str, field: str, value: object) -> str:
    """The grant with one payload field changed and the original signature kept."""
    prefix, payload_b64, signature = token.split(".")
    payload = json.loads(base64.urlsafe_b64decode(payload_b64 + "=" * (-len(payload_b64) % 4)))
    payload[field] = value
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    tampered = base64.urlsafe_b64encode(canonical).rstrip(b"=").decode()
    return f"{prefix}.{tampered}.{signature}"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("approval_id", "AP-10"),
        ("operation_key", "DATE-1-2"),
        ("order_id", "ORD-2"),
        ("change", {"kind": "delivery_date", "delivery_date": FULL_DATE.isoformat()}),
        ("expires_at", "2099-01-01T00:00:00Z"),
    ],
)
def test_a_tampered_grant_is_refused(api, field, value):
    valid = operation_body()
    body = {**valid, "approval_grant": _tampered_payload(valid["approval_grant"], field, value)}
    before = snapshot()

    response = api.apply(body)

    assert response.status_code == 403
    assert response.json()["error"] == "approval_invalid"
    assert snapshot() == before


@pytest.mark.parametrize(
    ("name", "grant_overrides"),
    [
        ("another operation", {"operation_key": "DATE-1-2"}),
        ("another order", {"order_id": "ORD-2"}),
        ("another change", {"change": date_change(FULL_DATE)}),
    ],
)
def test_a_validly_signed_grant_for_something_else_is_refused(api, name, grant_overrides):
    grant = make_grant(**{"operation_key": "DATE-1-1", **grant_overrides})
    response = api.apply(operation_body(grant=grant))
    assert response.json()["error"] == "approval_invalid", name


@pytest.mark.parametrize(
    "grant",
    ["", "v1.abc", "v2.abc.def", "v1..sig", "v1.@@@.sig", "v1.é.sig", "not a grant at all"],
)
def test_a_malformed_grant_is_approval_invalid_or_invalid_field(api, grant):
    response = api.apply(operation_body(grant=grant))
    assert response.json()["error"] == ("invalid_field" if grant == "" else "approval_invalid")


def test_a_grant_expiring_now_is_expired_by_the_receivers_clock(api):
    grant = make_grant(operation_key="DATE-1-1", expires_at=datetime.now(UTC))
    response = api.apply(operation_body(grant=grant))
    assert response.json()["error"] == "approval_expired"


def test_moving_to_the_same_date_keeps_the_slot_count(api):
    response = api.apply(operation_body(delivery_date=CURRENT_DATE))
    assert response.status_code == 201
    assert Slot.objects.get(date=CURRENT_DATE).taken == 1


def test_consistent_lookup_and_capabilities(api):
    assert api.get("/operations/DATE-1-1").json()["error"] == "unknown_operation"
    api.apply(operation_body())
    assert api.get("/operations/DATE-1-1").json() == {
        "operation_key": "DATE-1-1",
        "order_id": ORDER_ID,
        "status": "applied",
        "order_version": 2,
        "change": date_change(FREE_DATE),
    }
    assert api.get("/capabilities").json() == {
        "idempotency_keys": True,
        "fencing": True,
        "version_check": True,
        "approval_grants": True,
        "consistent_lookup": True,
        "fence_endpoint": True,
        "change_kinds": ["delivery_date", "shipping_address", "order_cancellation"],
        "ship_to_countries": [
            *("AT", "BE", "CH", "DE", "DK", "ES", "FI", "FR"),
            *("GB", "IE", "IT", "LU", "NL", "NO", "PT", "SE"),
        ],
    }
    assert api.get("/healthz").status_code == 200
    assert api.get(f"/slots/{FULL_DATE}").json() == {
        "date": FULL_DATE.isoformat(),
        "capacity": 1,
        "taken": 1,
    }


def test_initial_fence_is_seeded(api):
    """Guards the refusal table's premise: valid tokens (7) sit above the fence (3)."""
    assert Order.objects.get(pk=ORDER_ID).fence_token == INITIAL_FENCE < 7


def test_crippled_fencing_neither_checks_nor_raises_the_fence(api, settings):
    settings.ORDERS_DISABLE_FENCING = True
    _fence_to(10)

    fence = api.post(f"/orders/{ORDER_ID}/fence", {"fencing_token": 2})
    stale = api.apply(operation_body(fencing_token=1))

    assert fence.json() == {"order_id": ORDER_ID, "min_token": 2}
    assert stale.status_code == 201
    assert Order.objects.get(pk=ORDER_ID).fence_token == 10


def test_crippled_idempotency_applies_a_repeated_key_again(api, settings):
    settings.ORDERS_DISABLE_IDEMPOTENCY = True
    assert api.apply(operation_body(delivery_date=FREE_DATE)).status_code == 201

    again = api.apply(operation_body(delivery_date=CURRENT_DATE, expected_version=2))

    assert again.status_code == 201
    assert Order.objects.get(pk=ORDER_ID).version == 3
    assert not AppliedOperation.objects.exists()


# --- a replay still checks the grant it came with (issue 25) ----------------------------------


@pytest.mark.parametrize(
    ("name", "grant_kwargs"),
    [
        ("forged signature", {"key": "another-key"}),
        ("another operation", {"operation_key": "DATE-1-2"}),
        ("another order", {"order_id": "ORD-2"}),
        ("another change", {"change": date_change(FULL_DATE)}),
    ],
)
def test_a_replay_with_a_grant_that_does_not_verify_is_approval_invalid(api, name, grant_kwargs):
    """Before: a replay answered ``replayed: true`` whatever grant it carried."""
    assert api.apply(operation_body()).status_code == 201
    before = snapshot()
    grant = make_grant(**{"operation_key": "DATE-1-1", **grant_kwargs})

    response = api.apply(operation_body(grant=grant, fencing_token=9))

    assert response.status_code == 403, name
    assert response.json()["error"] == "approval_invalid"
    assert "replayed" not in response.json()
    assert snapshot() == before


def test_a_replay_with_its_expired_grant_still_answers_the_first_result(api):
    """The operation was applied while the grant was valid: its expiry is not judged again."""
    first = api.apply(operation_body())
    expired = make_grant(operation_key="DATE-1-1", expires_at=datetime.now(UTC) - timedelta(1))

    again = api.apply(operation_body(grant=expired, fencing_token=9))

    assert again.status_code == 200
    assert again.json() == {**first.json(), "replayed": True}
