"""Fixtures for the reconciliation tests (the order-system fixtures come from tests/conftest.py)."""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Callable, Iterator

import httpx
import pytest
from django.utils import timezone

from reconciliation.client import OrderSystemClient
from tests.support.order_system import DEFAULT_GRANT_KEY

TIMEOUTS = {"connect": 1.0, "read": 2.0, "write": 2.0, "pool": 1.0}


@pytest.fixture
def grant_key(settings) -> str:
    """Holdfast signs with the same key the test order system verifies with."""
    settings.APPROVAL_GRANT_KEY = DEFAULT_GRANT_KEY
    return DEFAULT_GRANT_KEY


@pytest.fixture
def mock_client() -> Callable[..., OrderSystemClient]:
    """A client whose every request is answered by ``handler`` (an ``httpx.MockTransport``)."""
    clients = []

    def build(handler: Callable[[httpx.Request], httpx.Response]) -> OrderSystemClient:
        client = OrderSystemClient(
            "http://orders.test", timeouts=TIMEOUTS, transport=httpx.MockTransport(handler)
        )
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()


def future(days: int) -> dt.date:
    return timezone.localdate() + dt.timedelta(days=days)


SANDBOX = "ORD-SANDBOX"


def seed_sandbox(system, *, order_id: str = SANDBOX) -> None:
    """An order 30 days out and free slots for each of the next 14 days (what the probe uses)."""
    system.seed(
        accounts=[{"account_id": "ACC-PROBE", "name": "Probe account", "access_active": True}],
        orders=[
            {"order_id": order_id, "account_id": "ACC-PROBE", "delivery_date": str(future(30))}
        ],
        slots=[{"date": str(future(day)), "capacity": 5} for day in (*range(1, 15), 30)],
    )


@pytest.fixture
def live_client(order_system) -> OrderSystemClient:
    """A client to the test order system with a short read timeout (1 s)."""
    timeouts = {"connect": 2.0, "read": 1.0, "write": 2.0, "pool": 2.0}
    with OrderSystemClient(order_system.base_url, timeouts=timeouts) as client:
        yield client


@pytest.fixture
def free_port() -> int:
    """A local port with nothing listening on it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# The Redis database the worker-process tests put django-q2 on (emptied before and after).
REDIS_TEST_DB = os.environ.get("HOLDFAST_TEST_REDIS_DB", "13")


@pytest.fixture
def broker_env(broker: str) -> Iterator[dict[str, str]]:
    """The environment that puts a worker process on ``broker`` (a test's parameter): "orm",
    the test database's own queue (emptied with it); "redis", database ``REDIS_TEST_DB``,
    emptied before and after; skipped when no Redis answers."""
    if broker == "orm":
        yield {}
        return
    redis = pytest.importorskip("redis")
    url = f"redis://127.0.0.1:6379/{REDIS_TEST_DB}"
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.RedisError:
        pytest.skip("no Redis server on 127.0.0.1:6379")
    client.flushdb()
    try:
        yield {"REDIS_URL": url}
    finally:
        client.flushdb()
