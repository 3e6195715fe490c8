"""The client sends the order system's credential on every call."""

from __future__ import annotations

import httpx
import pytest

from reconciliation.client import OrderSystemClient
from reconciliation.exceptions import CredentialRefused

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
        pytest.raises(CredentialRefused) as refused,
    ):
        client.capabilities()

    assert (refused.value.status, refused.value.error) == (401, "unauthorized")


def test_a_bare_401_to_a_write_is_not_read_as_a_refusal():
    """Only the order system's own ``401 unauthorized`` says nothing was applied; a 401 without
    that code came from something else, after which the write may have gone on."""
    from reconciliation.exceptions import EffectUnknown

    bare = httpx.MockTransport(lambda request: httpx.Response(401, text="Unauthorized"))
    with (
        OrderSystemClient("http://orders.test", timeouts=TIMEOUTS, transport=bare) as client,
        pytest.raises(EffectUnknown),
    ):
        client.fence("ORD-1", 3)
