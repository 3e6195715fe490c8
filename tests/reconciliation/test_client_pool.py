"""``OrderSystemClient.from_settings()`` reuses one connection pool per process and configuration,
and the order system keeps the connection alive between calls."""

from __future__ import annotations

import httpx
import pytest

from reconciliation.client import OrderSystemClient
from reconciliation.exceptions import EffectUnknown


@pytest.fixture
def configured(settings):
    settings.ORDER_SYSTEM_URL = "http://orders.pool.test:9000"
    settings.ORDER_SYSTEM_TOKEN = "pool-test-token" * 3
    return settings


def test_two_uses_of_from_settings_share_one_httpx_client_that_the_with_block_leaves_open(
    configured,
):
    with OrderSystemClient.from_settings() as first:
        pool = first._client
    with OrderSystemClient.from_settings() as second:
        assert second._client is pool
    first.close()

    assert not pool.is_closed
    assert first.shared
    assert second.shared


def test_a_changed_configuration_gets_its_own_pool(configured):
    before = OrderSystemClient.from_settings()._client
    configured.ORDER_SYSTEM_TOKEN = "another-pool-token" * 3
    after = OrderSystemClient.from_settings()
    assert after._client is not before
    assert after._client.headers["Authorization"] == f"Bearer {'another-pool-token' * 3}"
    assert OrderSystemClient.from_settings()._client is after._client


def test_a_closed_shared_pool_is_replaced(configured):
    pool = OrderSystemClient.from_settings()._client
    pool.close()
    assert OrderSystemClient.from_settings()._client is not pool


def test_a_test_transport_gets_a_private_client_that_the_with_block_closes(configured):
    seen = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"fencing": True})

    shared = OrderSystemClient.from_settings()._client
    with OrderSystemClient.from_settings(transport=httpx.MockTransport(answer)) as client:
        assert client.capabilities() == {"fencing": True}
        private = client._client

    assert private is not shared
    assert private.is_closed
    assert not shared.is_closed
    assert not client.shared
    assert str(seen[0].url) == "http://orders.pool.test:9000/capabilities"


def test_a_directly_built_client_owns_its_pool():
    timeouts = {"connect": 1, "read": 1, "write": 1, "pool": 1}
    with OrderSystemClient("http://orders.pool.test", timeouts=timeouts, token="") as client:
        pool = client._client
    assert pool.is_closed


def _port_of_next_call(client: OrderSystemClient) -> int:
    response = client._client.get("/capabilities")
    assert response.status_code == 200
    return response.extensions["network_stream"].get_extra_info("client_addr")[1]


@pytest.mark.order_system
def test_two_from_settings_clients_reach_the_order_system_over_one_tcp_connection(
    order_system, settings
):
    settings.ORDER_SYSTEM_URL = order_system.base_url
    with OrderSystemClient.from_settings() as first:
        first.capabilities()
        first_port = _port_of_next_call(first)
    with OrderSystemClient.from_settings() as second:
        second.capabilities()
        second_port = _port_of_next_call(second)

    assert first_port == second_port


@pytest.mark.order_system
def test_a_dropped_write_on_the_shared_pool_is_effect_unknown_and_the_next_call_reconnects(
    order_system, settings
):
    settings.ORDER_SYSTEM_URL = order_system.base_url
    order_system.set_fault("drop_after_commit", path_prefix="/orders/ORD-NOPE/operations")
    with OrderSystemClient.from_settings() as client:
        before = _port_of_next_call(client)
        with pytest.raises(EffectUnknown):
            client._write("/orders/ORD-NOPE/operations", {"operation_key": "K-1"})
    with OrderSystemClient.from_settings() as client:
        after = _port_of_next_call(client)

    assert before != after
