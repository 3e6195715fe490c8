"""The order-system client: strict parsing and error classification (no network)."""

from __future__ import annotations

import datetime as dt
import email.utils
import json

import httpx
import pytest

from reconciliation.client import OrderSystemClient
from reconciliation.exceptions import (
    ApprovalRefused,
    Conflict,
    EffectUnknown,
    InvalidInput,
    KeyReused,
    PermissionRevoked,
    ProtocolViolation,
    Transient,
    UnknownOperation,
    UnknownOrder,
)

ADDRESS = {
    "name": "Dana Whitfield",
    "line1": "12 Harbour Street",
    "line2": "",
    "city": "Bristol",
    "postal_code": "BS1 4DJ",
    "country": "GB",
}
ORDER = {
    "order_id": "ORD-41",
    "account_id": "ACC-7",
    "version": 3,
    "status": "open",
    "delivery_date": "2030-05-16",
    "shipping_address": ADDRESS,
}
CHANGE = {"kind": "delivery_date", "delivery_date": "2030-05-17"}
RECORD = {
    "operation_key": "DATE-41-1",
    "order_id": "ORD-41",
    "status": "applied",
    "order_version": 4,
    "change": CHANGE,
}


def answer(status: int, body: object = None, **headers: str):
    """A handler that answers every request with ``status`` and a JSON ``body``."""

    def handler(request: httpx.Request) -> httpx.Response:
        content = b"" if body is None else json.dumps(body).encode()
        return httpx.Response(status, content=content, headers=headers)

    return handler


def raising(exc_class: type[Exception]):
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc_class("simulated", request=request)

    return handler


APPLY_ARGS = {
    "operation_key": "DATE-41-1",
    "change": CHANGE,
    "expected_version": 3,
    "fencing_token": 12,
    "approval_grant": "v1.x.y",
}


def test_built_client_has_every_timeout_explicit_and_follows_no_redirects():
    timeouts = {"connect": 1.5, "read": 7.0, "write": 8.0, "pool": 2.5}
    with OrderSystemClient("http://orders.test/", timeouts=timeouts) as client:
        timeout = client._client.timeout
        assert (timeout.connect, timeout.read, timeout.write, timeout.pool) == (1.5, 7.0, 8.0, 2.5)
        assert client._client.follow_redirects is False
        assert client.base_url == "http://orders.test"


def test_client_from_settings_uses_configured_url_and_timeouts(settings):
    settings.ORDER_SYSTEM_URL = "http://orders.example:9000"
    settings.ORDER_SYSTEM_TIMEOUTS = {"connect": 0.5, "read": 4.0, "write": 5.0, "pool": 0.7}
    with OrderSystemClient.from_settings() as client:
        timeout = client._client.timeout
        assert client.base_url == "http://orders.example:9000"
        assert (timeout.connect, timeout.read, timeout.write, timeout.pool) == (0.5, 4.0, 5.0, 0.7)


def test_client_refuses_to_be_built_without_every_timeout():
    with pytest.raises(ValueError, match="pool"):
        OrderSystemClient("http://orders.test", timeouts={"connect": 1, "read": 1, "write": 1})


def test_get_order_parses_the_generic_fields_and_keeps_the_others_for_the_kinds(mock_client):
    seen = []

    def handler(request):
        seen.append(request)
        return httpx.Response(200, json={**ORDER, "gift_message": "Happy birthday"})

    order = mock_client(handler).get_order("ORD-41")
    assert (order.order_id, order.account_id, order.version, order.status) == (
        "ORD-41",
        "ACC-7",
        3,
        "open",
    )
    assert order.fields == {
        "delivery_date": "2030-05-16",
        "shipping_address": ADDRESS,
        "gift_message": "Happy birthday",
    }
    assert seen[0].method == "GET"
    assert seen[0].url.path == "/orders/ORD-41"
    with pytest.raises(AttributeError):
        order.version = 4


def test_order_id_cannot_escape_its_path_segment(mock_client):
    seen = []

    def handler(request):
        seen.append(request.url.raw_path)
        return httpx.Response(200, json=ORDER)

    mock_client(handler).get_order("../fence?x=1")
    assert seen == [b"/orders/..%2Ffence%3Fx%3D1"]


@pytest.mark.parametrize(
    "body",
    [
        {k: v for k, v in ORDER.items() if k != "version"},
        {**ORDER, "version": "3"},
        {**ORDER, "version": True},
        {k: v for k, v in ORDER.items() if k != "status"},
        {**ORDER, "status": "lost"},
        ["not", "an", "object"],
    ],
    ids=[
        "missing-field",
        "string-version",
        "bool-version",
        "missing-status",
        "unknown-status",
        "json-list",
    ],
)
def test_malformed_read_answer_is_a_protocol_violation(mock_client, body):
    with pytest.raises(ProtocolViolation):
        mock_client(answer(200, body)).get_order("ORD-41")


def test_non_json_read_answer_is_a_protocol_violation(mock_client):
    client = mock_client(lambda request: httpx.Response(200, text="<html>ok</html>"))
    with pytest.raises(ProtocolViolation):
        client.get_order("ORD-41")


def test_apply_sends_the_contract_body_and_reports_a_fresh_application(mock_client):
    seen = []

    def handler(request):
        seen.append(json.loads(request.content))
        body = {"operation_key": "DATE-41-1", "status": "applied", "order_version": 4}
        return httpx.Response(201, json=body)

    result = mock_client(handler).apply_operation("ORD-41", **APPLY_ARGS)
    assert result.replayed is False
    assert result.order_version == 4
    assert seen == [
        {
            "operation_key": "DATE-41-1",
            "change": CHANGE,
            "expected_version": 3,
            "fencing_token": 12,
            "approval_grant": "v1.x.y",
        }
    ]


def test_apply_answered_200_is_a_replay_of_the_first_result(mock_client):
    body = {"operation_key": "DATE-41-1", "status": "applied", "order_version": 4, "replayed": True}
    result = mock_client(answer(200, body)).apply_operation("ORD-41", **APPLY_ARGS)
    assert result.replayed is True
    assert result.order_version == 4


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (201, {"operation_key": "DATE-41-1", "status": "applied"}),
        (201, {"operation_key": "OTHER-KEY", "status": "applied", "order_version": 4}),
        (201, {"operation_key": "DATE-41-1", "status": "pending", "order_version": 4}),
        (201, "not json"),
        (500, {"error": "server_error", "detail": "Internal error."}),
        (502, None),
        (504, None),
        (409, {"error": "something_new", "detail": "?"}),
        (404, {"error": "not_found", "detail": "No such endpoint."}),
        (302, None),
    ],
    ids=[
        "missing-version",
        "other-key",
        "not-applied",
        "not-json",
        "500",
        "502",
        "504",
        "unknown-409",
        "404-without-contract-code",
        "redirect",
    ],
)
def test_unusable_answer_to_a_write_is_effect_unknown(mock_client, status, body):
    def handler(request):
        if body == "not json":
            return httpx.Response(status, text="oops")
        return httpx.Response(status, json=body) if body is not None else httpx.Response(status)

    with pytest.raises(EffectUnknown) as caught:
        mock_client(handler).apply_operation("ORD-41", **APPLY_ARGS)
    assert caught.value.status in (None, status)


@pytest.mark.parametrize(
    ("status", "code", "error_class"),
    [
        (409, "version_conflict", Conflict),
        (409, "stale_fencing_token", Conflict),
        (409, "slot_unavailable", Conflict),
        (409, "order_not_open", Conflict),
        (422, "unsupported_kind", InvalidInput),
        (403, "approval_invalid", ApprovalRefused),
        (403, "approval_expired", ApprovalRefused),
        (403, "permission_revoked", PermissionRevoked),
        (422, "key_reused", KeyReused),
        (422, "invalid_field", InvalidInput),
        (404, "unknown_order", UnknownOrder),
    ],
)
def test_each_refusal_code_raises_its_own_error(mock_client, status, code, error_class):
    handler = answer(status, {"error": code, "detail": f"refused: {code}"})
    with pytest.raises(error_class) as caught:
        mock_client(handler).apply_operation("ORD-41", **APPLY_ARGS)
    assert caught.value.error == code
    assert caught.value.status == status
    assert caught.value.detail == f"refused: {code}"
    if error_class in (Conflict, ApprovalRefused):
        assert caught.value.kind == code


def test_invalid_field_carries_the_field_errors(mock_client):
    body = {
        "error": "invalid_field",
        "detail": "bad",
        "fields": {"change.address.country": "We do not ship to US."},
    }
    with pytest.raises(InvalidInput) as caught:
        mock_client(answer(422, body)).apply_operation("ORD-41", **APPLY_ARGS)
    assert caught.value.fields == {"change.address.country": ["We do not ship to US."]}


def test_unavailable_is_transient_with_retry_after_seconds(mock_client):
    handler = answer(503, {"error": "unavailable", "detail": "later"}, **{"Retry-After": "7"})
    with pytest.raises(Transient) as caught:
        mock_client(handler).apply_operation("ORD-41", **APPLY_ARGS)
    assert caught.value.error == "unavailable"
    assert caught.value.status == 503
    assert caught.value.retry_after == 7.0


def test_retry_after_as_an_http_date_becomes_seconds_from_now(mock_client):
    when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=90)
    header = email.utils.format_datetime(when, usegmt=True)
    handler = answer(503, {"error": "unavailable"}, **{"Retry-After": header})
    with pytest.raises(Transient) as caught:
        mock_client(handler).get_order("ORD-41")
    assert 80 <= caught.value.retry_after <= 90


def test_unavailable_without_retry_after_has_none(mock_client):
    with pytest.raises(Transient) as caught:
        mock_client(answer(503, {"error": "unavailable"})).fence("ORD-41", 5)
    assert caught.value.retry_after is None


@pytest.mark.parametrize("exc_class", [httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout])
def test_failure_before_sending_a_write_is_transient(mock_client, exc_class):
    with pytest.raises(Transient) as caught:
        mock_client(raising(exc_class)).apply_operation("ORD-41", **APPLY_ARGS)
    assert caught.value.status is None
    assert isinstance(caught.value.__cause__, exc_class)


@pytest.mark.parametrize(
    "exc_class",
    [httpx.ReadTimeout, httpx.WriteTimeout, httpx.RemoteProtocolError, httpx.ReadError],
)
def test_failure_after_sending_a_write_is_effect_unknown(mock_client, exc_class):
    with pytest.raises(EffectUnknown):
        mock_client(raising(exc_class)).apply_operation("ORD-41", **APPLY_ARGS)
    with pytest.raises(EffectUnknown):
        mock_client(raising(exc_class)).fence("ORD-41", 9)


@pytest.mark.parametrize(
    "exc_class", [httpx.ReadTimeout, httpx.RemoteProtocolError, httpx.ConnectError]
)
def test_failure_of_a_read_is_transient_because_a_get_changes_nothing(mock_client, exc_class):
    with pytest.raises(Transient):
        mock_client(raising(exc_class)).get_order("ORD-41")


def test_fence_parses_the_new_minimum(mock_client):
    seen = []

    def handler(request):
        seen.append((request.url.path, json.loads(request.content)))
        return httpx.Response(200, json={"order_id": "ORD-41", "min_token": 15})

    result = mock_client(handler).fence("ORD-41", 15)
    assert result.min_token == 15
    assert seen == [("/orders/ORD-41/fence", {"fencing_token": 15})]


def test_stale_fence_is_a_conflict(mock_client):
    handler = answer(409, {"error": "stale_fencing_token", "detail": "below 20"})
    with pytest.raises(Conflict) as caught:
        mock_client(handler).fence("ORD-41", 15)
    assert caught.value.kind == "stale_fencing_token"


def test_consistent_lookup_parses_the_operation_record(mock_client):
    record = mock_client(answer(200, RECORD)).get_operation("DATE-41-1")
    assert record.change == CHANGE
    assert record.order_version == 4
    assert record.status == "applied"


def test_consistent_lookup_404_unknown_operation_is_a_definite_answer(mock_client):
    handler = answer(404, {"error": "unknown_operation", "detail": "never seen"})
    with pytest.raises(UnknownOperation):
        mock_client(handler).get_operation("DATE-41-1")


def test_consistent_lookup_404_without_the_contract_code_is_not_proof_of_absence(mock_client):
    with pytest.raises(ProtocolViolation):
        mock_client(answer(404, {"error": "not_found"})).get_operation("DATE-41-1")
    with pytest.raises(ProtocolViolation):
        mock_client(lambda request: httpx.Response(404, text="Not Found")).get_operation("K")


def test_lagging_search_answers_none_on_404_and_the_record_when_found(mock_client):
    seen = []

    def handler(request):
        seen.append(request.url.params["key"])
        if len(seen) == 1:
            return httpx.Response(404, json={"error": "unknown_operation"})
        return httpx.Response(200, json=RECORD)

    client = mock_client(handler)
    assert client.search_operation("DATE-41-1") is None
    assert client.search_operation("DATE-41-1").order_version == 4
    assert seen == ["DATE-41-1", "DATE-41-1"]


def test_slot_parses_capacity_and_free_places(mock_client):
    slot = mock_client(answer(200, {"date": "2030-05-17", "capacity": 3, "taken": 1})).get_slot(
        dt.date(2030, 5, 17)
    )
    assert slot.free == 2


def test_capabilities_returns_the_claims_as_they_are(mock_client):
    claims = {"fencing": True, "idempotency_keys": True}
    assert mock_client(answer(200, claims)).capabilities() == claims


def test_client_sends_each_write_exactly_once_on_failure(mock_client):
    calls = []

    def handler(request):
        calls.append(request)
        raise httpx.ReadTimeout("simulated", request=request)

    with pytest.raises(EffectUnknown):
        mock_client(handler).apply_operation("ORD-41", **APPLY_ARGS)
    assert len(calls) == 1


def test_client_module_never_imports_a_model():
    import ast
    import pathlib

    import reconciliation.client as module

    tree = ast.parse(pathlib.Path(module.__file__).read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not any(name.endswith("models") or name.startswith("django.db") for name in imported)
    assert "django.conf" in imported  # only inside from_settings


def test_a_kinds_own_refusal_is_classified_for_that_kind_only(mock_client):
    """slot_unavailable is the delivery date kind's conflict; sent back for another kind of
    change it is nothing the contract names: the write's outcome is unknown."""
    handler = answer(409, {"error": "slot_unavailable", "detail": "full"})
    address = {"kind": "shipping_address", "address": {k: v for k, v in ADDRESS.items() if v}}
    with pytest.raises(EffectUnknown):
        mock_client(handler).apply_operation("ORD-41", **{**APPLY_ARGS, "change": address})
