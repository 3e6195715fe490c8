"""The client sends the order system's credential on every call."""

from __future__ import annotations

import httpx
import pytest

from reconciliation.client import OrderSystemClient
from reconciliation.exceptions import ProtocolViolation

from .conftest import TIMEOUTS


def _capture(seen: list[httpx.Request]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"fencing": True})

    return httpx.MockTransport(handler)


def test_from_settings_sends_the_configured_bearer_token(settings):
    settings.ORDER_SYSTEM_TOKEN = "t" * 40
    seen: list[httpx.Request] = []

    with OrderSystemClient.from_settings(transport=_capture(seen)) as client:
        client.capabilities()

    assert seen[0].headers["Authorization"] == f"Bearer {'t' * 40}"


def test_an_explicit_token_wins_and_an_empty_one_sends_none(settings):
    seen: list[httpx.Request] = []

    with OrderSystemClient(
        "http://orders.test", timeouts=TIMEOUTS, transport=_capture(seen), token="x" * 32
    ) as client:
        client.capabilities()
    with OrderSystemClient(
        "http://orders.test", timeouts=TIMEOUTS, transport=_capture(seen), token=""
    ) as client:
        client.capabilities()

    assert seen[0].headers["Authorization"] == f"Bearer {'x' * 32}"
    assert "Authorization" not in seen[1].headers


@pytest.mark.order_system
def test_the_order_system_refuses_a_client_with_the_wrong_token(order_system):
    with (
        OrderSystemClient(order_system.base_url, timeouts=TIMEOUTS, token="wrong" * 8) as client,
        pytest.raises(ProtocolViolation) as refused,
    ):
        client.capabilities()

    assert refused.value.status == 401
