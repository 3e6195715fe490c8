"""The order-system client's classification of writes and fence answers."""

from __future__ import annotations

import json
from types import SimpleNamespace

import httpx
import pytest

from reconciliation.exceptions import EffectUnknown, OrderSystemError
from reconciliation.settle import Unknown, investigate

APPLY_ARGS = {
    "operation_key": "DATE-41-1",
    "change": {"kind": "delivery_date", "delivery_date": "2030-05-17"},
    "expected_version": 3,
    "fencing_token": 12,
    "approval_grant": "v1.x.y",
}


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (
            b"<html><body>upstream connect error or disconnect/reset before headers</body></html>",
            "text/html",
        ),
        (b"", "text/plain"),
        (json.dumps({"error": "upstream_reset"}).encode(), "application/json"),
    ],
)
def test_a_503_that_is_not_the_contracts_unavailable_leaves_a_write_effect_unknown(
    mock_client, body, content_type
):
    """Only the contract's ``503 unavailable`` means "nothing applied". A bare 503 from a
    gateway in front of the receiver (Envoy answers 503 for an upstream reset *after*
    forwarding) may follow an applied write; the client calls it Transient, and apply then
    records "Nothing applied" and schedules a retry (a cancellation would then mark the
    case cancelled although the order may have changed)."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, content=body, headers={"Content-Type": content_type})

    with pytest.raises(EffectUnknown):
        mock_client(handler).apply_operation("ORD-41", **APPLY_ARGS)


def test_an_undecodable_answer_to_a_write_is_classified_effect_unknown(mock_client):
    """A 201 whose body cannot be decoded (a proxy mangling Content-Encoding) raises a raw
    ``httpx.DecodingError``: it is not a ``TransportError`` and escapes every
    ``except OrderSystemError`` in apply and settle, although the write was applied."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            201,
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
            stream=httpx.ByteStream(b"definitely not gzip"),
        )

    with pytest.raises(OrderSystemError) as caught:
        mock_client(handler).apply_operation("ORD-41", **APPLY_ARGS)
    assert isinstance(caught.value, EffectUnknown)


@pytest.mark.parametrize(
    "answer",
    [
        {"order_id": "ORD-41", "min_token": 3},  # the fence is still below the token asked for
        {"order_id": "ORD-OTHER", "min_token": 15},  # another order was fenced
    ],
)
def test_a_fence_answer_that_does_not_close_the_door_is_not_accepted(mock_client, answer):
    """``200 {order_id, min_token}`` is the receiver's word that operations below the token
    are refused from now on. An answer that fences less (or another order) is a contract
    violation, yet the client returns it as a successful fence."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answer)

    with pytest.raises(OrderSystemError):
        mock_client(handler).fence("ORD-41", 15)


def test_settling_does_not_call_absence_proven_after_a_fence_that_did_not_hold(db, mock_client):
    """``investigate`` ignores the fence answer: a 200 whose ``min_token`` stays below the new
    token, followed by ``404 unknown_operation``, is recorded as proof of no effect, so a
    paused worker's older token may still land after the case was settled "absent"."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/fence"):
            return httpx.Response(200, json={"order_id": "ORD-41", "min_token": 0})
        return httpx.Response(404, json={"error": "unknown_operation", "detail": "none"})

    operation = SimpleNamespace(
        order_id="ORD-41",
        key="DATE-41-1",
        change={"kind": "delivery_date", "delivery_date": "2030-05-17"},
    )
    finding = investigate(None, operation, mock_client(handler))

    assert isinstance(finding, Unknown), finding.reason
