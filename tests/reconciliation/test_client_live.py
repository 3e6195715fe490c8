"""The client against the reference order system running as a separate process."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from approvals.grants import grant_issue
from reconciliation.client import OrderSystemClient
from reconciliation.exceptions import (
    ApprovalRefused,
    Conflict,
    EffectUnknown,
    KeyReused,
    Transient,
    UnknownOperation,
    UnknownOrder,
)

from .conftest import future

ORDER = "ORD-41"


@pytest.fixture
def seeded(order_system, grant_key):
    order_system.seed(
        accounts=[{"account_id": "ACC-7", "name": "Customer 7", "access_active": True}],
        orders=[{"order_id": ORDER, "account_id": "ACC-7", "delivery_date": str(future(10))}],
        slots=[{"date": str(future(day)), "capacity": 3} for day in (10, 11, 12)],
    )
    return order_system


def apply_args(key: str = "DATE-41-1", *, days: int = 11, version: int = 1, token: int = 5, **kw):
    change = {"kind": "delivery_date", "delivery_date": future(days).isoformat()}
    grant = kw.pop("grant", None) or grant_issue(
        operation_key=key,
        order_id=ORDER,
        change=change,
        approval_id="AP-9",
        expires_at=kw.pop("expires_at", timezone.now() + dt.timedelta(minutes=10)),
    )
    return {
        "operation_key": key,
        "change": change,
        "expected_version": version,
        "fencing_token": token,
        "approval_grant": grant,
    }


@pytest.mark.order_system
def test_response_dropped_after_commit_is_effect_unknown_and_the_change_is_applied(
    seeded, live_client
):
    seeded.set_fault("drop_after_commit", path_prefix=f"/orders/{ORDER}/operations")
    with pytest.raises(EffectUnknown):
        live_client.apply_operation(ORDER, **apply_args())
    state = seeded.state(ORDER)
    assert state["order"]["delivery_date"] == str(future(11))
    assert state["order"]["version"] == 2
    assert live_client.get_operation("DATE-41-1").order_version == 2


@pytest.mark.order_system
def test_answer_slower_than_the_read_timeout_is_effect_unknown_and_the_change_is_applied(
    seeded, live_client
):
    assert live_client._client.timeout.read == 1.0
    seeded.set_fault("delay_after_commit", seconds=2.5, path_prefix=f"/orders/{ORDER}/operations")
    with pytest.raises(EffectUnknown):
        live_client.apply_operation(ORDER, **apply_args())
    assert seeded.state(ORDER)["order"]["delivery_date"] == str(future(11))


def test_connection_refused_is_transient_for_reads_and_writes(free_port, grant_key):
    timeouts = {"connect": 1.0, "read": 1.0, "write": 1.0, "pool": 1.0}
    with OrderSystemClient(f"http://127.0.0.1:{free_port}", timeouts=timeouts) as client:
        with pytest.raises(Transient) as caught:
            client.apply_operation(ORDER, **apply_args())
        assert caught.value.error == "connect_failed"
        with pytest.raises(Transient):
            client.get_order(ORDER)


@pytest.mark.order_system
def test_failure_before_commit_is_transient_with_retry_after_and_nothing_applied(
    seeded, live_client
):
    seeded.set_fault("fail_before_commit", retry_after=4, path_prefix=f"/orders/{ORDER}/")
    with pytest.raises(Transient) as caught:
        live_client.apply_operation(ORDER, **apply_args())
    assert caught.value.status == 503
    assert caught.value.retry_after == 4.0
    state = seeded.state(ORDER)
    assert state["order"]["version"] == 1
    assert state["order"]["delivery_date"] == str(future(10))
    assert state["operations"] == []
    with pytest.raises(UnknownOperation):
        live_client.get_operation("DATE-41-1")


@pytest.mark.order_system
def test_lagging_search_answers_none_while_the_consistent_lookup_finds_the_operation(
    seeded, live_client
):
    seeded.set_fault("search_lag", seconds=60)
    applied = live_client.apply_operation(ORDER, **apply_args())
    assert live_client.search_operation("DATE-41-1") is None
    record = live_client.get_operation("DATE-41-1")
    assert record.order_version == applied.order_version
    assert record.change == {"kind": "delivery_date", "delivery_date": str(future(11))}


@pytest.mark.order_system
def test_live_refusals_are_classified_and_change_nothing(seeded, live_client):
    first = live_client.apply_operation(ORDER, **apply_args(token=5))
    assert first.replayed is False
    replay = live_client.apply_operation(ORDER, **apply_args(token=5))
    assert (replay.replayed, replay.order_version) == (True, first.order_version)

    with pytest.raises(KeyReused):
        live_client.apply_operation(ORDER, **apply_args(days=12, version=2, token=6))
    with pytest.raises(Conflict) as caught:
        live_client.apply_operation(ORDER, **apply_args("DATE-41-2", days=12, version=1, token=7))
    assert caught.value.kind == "version_conflict"
    assert live_client.fence(ORDER, 50).min_token == 50
    with pytest.raises(Conflict) as caught:
        live_client.apply_operation(ORDER, **apply_args("DATE-41-3", days=12, version=2, token=8))
    assert caught.value.kind == "stale_fencing_token"
    expired = timezone.now() - dt.timedelta(minutes=1)
    with pytest.raises(ApprovalRefused) as caught:
        live_client.apply_operation(
            ORDER, **apply_args("DATE-41-4", days=12, version=2, token=51, expires_at=expired)
        )
    assert caught.value.kind == "approval_expired"
    with pytest.raises(UnknownOrder):
        live_client.get_order("ORD-NOPE")

    state = seeded.state(ORDER)
    assert state["order"]["version"] == 2
    assert state["order"]["delivery_date"] == str(future(11))
    assert [op["operation_key"] for op in state["operations"]] == ["DATE-41-1"]
