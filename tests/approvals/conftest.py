"""Fixtures for the proposal and approval tests: cases brought to each step through services.

Setup reads the order through ``httpx.MockTransport`` (fast, no process); tests about what the
order system itself says use the reference order system (``order_system``).
"""

from __future__ import annotations

import datetime as dt
import socket

import httpx
import pytest
from django.contrib.auth.models import Group
from django.utils import timezone
from rest_framework.test import APIClient

from approvals import services
from cases.models import Case
from reconciliation.client import OrderSystemClient
from reconciliation.sources import source_check
from tests.support.order_system import DEFAULT_GRANT_KEY

TIMEOUTS = {"connect": 1.0, "read": 2.0, "write": 2.0, "pool": 1.0}
ORDER = "ORD-7731"


def in_days(days: int) -> dt.date:
    return timezone.localdate() + dt.timedelta(days=days)


def reload(case: Case) -> Case:
    return Case.objects.select_related("account", "team", "owner").get(pk=case.pk)


def mock_order_client(*, version: int = 1, account_id: str = "ACC-100") -> OrderSystemClient:
    """A client whose order system answers with ``ORDER`` at ``version`` for ``account_id``."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/orders/"):
            return httpx.Response(
                200,
                json={
                    "order_id": request.url.path.rsplit("/", 1)[-1],
                    "account_id": account_id,
                    "status": "open",
                    "delivery_date": str(in_days(3)),
                    "version": version,
                },
            )
        if request.url.path.startswith("/slots/"):
            return httpx.Response(
                200,
                json={
                    "date": request.url.path.rsplit("/", 1)[-1],
                    "capacity": 5,
                    "taken": 1,
                },
            )
        return httpx.Response(404, json={"error": "not_found", "detail": "no such path"})

    return OrderSystemClient(
        "http://orders.test", timeouts=TIMEOUTS, transport=httpx.MockTransport(handler)
    )


def read_order(case: Case, *, version: int = 1) -> Case:
    """Run the source check against a mock order system; returns the reloaded case."""
    with mock_order_client(version=version, account_id=case.account.reference) as client:
        assert source_check(case_id=case.pk, client=client) in {
            "checked",
            "invalidated",
            "unchanged",
        }
    return reload(case)


@pytest.fixture(autouse=True)
def grant_key(settings) -> str:
    """Holdfast signs with the key the reference order system verifies with."""
    settings.APPROVAL_GRANT_KEY = DEFAULT_GRANT_KEY
    return DEFAULT_GRANT_KEY


@pytest.fixture
def enqueued(monkeypatch) -> list[tuple]:
    """Work handed to django-q2 (``cases.scheduling.enqueue``), recorded instead of queued."""
    calls: list[tuple] = []
    monkeypatch.setattr("cases.scheduling.enqueue", lambda func, *args: calls.append((func, *args)))
    return calls


@pytest.fixture
def closed_port() -> int:
    """A local port with nothing listening on it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def api():
    def client_for(user=None) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_authenticate(user=user)
        return client

    return client_for


@pytest.fixture
def preparer(make_user, team):
    """A lead who also approves: may prepare proposals and decide other people's."""
    user = make_user("pat", "lead", teams=[team])
    user.groups.add(Group.objects.get(name="approver"))
    return user


@pytest.fixture
def far_approver(make_user, other_team):
    """An approver of another team."""
    return make_user("far", "approver", teams=[other_team])


@pytest.fixture
def checked_case(case):
    """The case with its order read at version 1: preparing a proposal."""
    return read_order(case)


@pytest.fixture
def submit():
    """Prepare and submit a proposal for a checked case; returns the proposal."""

    def run(case: Case, actor, **kwargs):
        return services.proposal_prepare(case=reload(case), actor=actor, **kwargs)

    return run


@pytest.fixture
def proposal(checked_case, submit, agent):
    """A proposal prepared by the agent, awaiting review."""
    return submit(checked_case, agent)


@pytest.fixture
def own_proposal(checked_case, submit, preparer):
    """A proposal prepared by a person who is also an approver."""
    return submit(checked_case, preparer)


@pytest.fixture
def approval(proposal, approver):
    return services.proposal_approve(proposal=proposal, actor=approver)


@pytest.fixture
def live_orders(order_system, settings):
    """The reference order system with ACC-100's order at version 1 and free slots."""
    settings.ORDER_SYSTEM_URL = order_system.base_url
    order_system.seed(
        accounts=[{"account_id": "ACC-100", "name": "Northwind Bakery", "access_active": True}],
        orders=[
            {
                "order_id": ORDER,
                "account_id": "ACC-100",
                "delivery_date": str(in_days(3)),
                "version": 1,
            }
        ],
        slots=[{"date": str(in_days(day)), "capacity": 5} for day in range(1, 15)],
    )
    return order_system


@pytest.fixture
def receiver(live_orders):
    """A client to the reference order system (what the apply worker would use)."""
    with OrderSystemClient(live_orders.base_url, timeouts=TIMEOUTS) as client:
        yield client
