"""The order system as its own process (``python -m orders serve``) through the test harness."""

from __future__ import annotations

import signal
import threading
import time

import httpx
import pytest

from tests.orders.helpers import (
    FREE_DATE,
    Receiver,
    assert_signed_at_delivery,
    date_change,
    make_grant,
)
from tests.support.order_system import (
    DEFAULT_GRANT_KEY,
    DEFAULT_WEBHOOK_SECRET,
    GIFT_MESSAGE_KIND,
    SEED_ADDRESS,
    OrderSystemProcess,
)

pytestmark = pytest.mark.order_system

ORDER = "ORD-9"


def seed(system: OrderSystemProcess) -> None:
    system.seed(
        accounts=[{"account_id": "ACC-9", "name": "Bakery", "access_active": True}],
        orders=[{"order_id": ORDER, "account_id": "ACC-9", "delivery_date": "2031-03-06"}],
        slots=[
            {"date": "2031-03-06", "capacity": 5, "taken": 1},
            {"date": FREE_DATE.isoformat(), "capacity": 5},
        ],
    )


def body(key: str = "DATE-9-1", token: int = 5) -> dict:
    change = date_change(FREE_DATE)
    grant = make_grant(operation_key=key, order_id=ORDER, change=change, key=DEFAULT_GRANT_KEY)
    return {
        "operation_key": key,
        "change": change,
        "expected_version": 1,
        "fencing_token": token,
        "approval_grant": grant,
    }


def test_a_response_dropped_after_commit_leaves_the_change_applied(order_system):
    seed(order_system)
    order_system.set_fault("drop_after_commit", path_prefix=f"/orders/{ORDER}/operations")
    request = body()

    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(
            f"{order_system.base_url}/orders/{ORDER}/operations",
            json=request,
            headers=order_system.auth_headers,
            timeout=5,
        )

    state = order_system.state(ORDER)
    assert state["order"]["version"] == 2
    assert [op["operation_key"] for op in state["operations"]] == ["DATE-9-1"]
    # The caller settles the unknown effect: the consistent lookup and a replay both say applied.
    lookup = order_system.client.get("/operations/DATE-9-1")
    replay = order_system.client.post(f"/orders/{ORDER}/operations", json=request)
    assert lookup.json()["order_version"] == 2
    assert replay.status_code == 200
    assert replay.json() == {
        "operation_key": "DATE-9-1",
        "status": "applied",
        "order_version": 2,
        "replayed": True,
    }


def test_a_delay_after_commit_times_the_caller_out_with_the_change_applied(order_system):
    seed(order_system)
    order_system.set_fault("delay_after_commit", seconds=1.0)

    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{order_system.base_url}/orders/{ORDER}/operations",
            json=body(),
            headers=order_system.auth_headers,
            timeout=httpx.Timeout(0.3, connect=2.0),
        )

    assert order_system.state(ORDER)["order"]["version"] == 2


def _delayed_write(system: OrderSystemProcess, answers: list) -> threading.Thread:
    """A write held by a latency fault, sent from a thread; its answer is put in ``answers``
    once the rule has been taken (the request waits inside the order system)."""

    def send() -> None:
        answers.append(
            httpx.post(
                f"{system.base_url}/orders/{ORDER}/operations",
                json=body(),
                headers=system.auth_headers,
                timeout=10,
            )
        )

    thread = threading.Thread(target=send)
    thread.start()
    deadline = time.monotonic() + 5
    while system.client.get("/_faults/").json()["faults"][0]["times"] != 0:
        assert time.monotonic() < deadline, "the write never reached the latency fault"
        time.sleep(0.02)
    return thread


def test_a_write_delayed_across_a_reset_never_runs_on_the_rows_seeded_after_it(order_system):
    """A killed worker's write that a latency fault still holds when its test ends must not
    land in the next test's order (reset and seeded again, the same order id and key): it did,
    and that test found its order changed by nobody it started."""
    seed(order_system)
    order_system.set_fault("latency", seconds=1.0, path_prefix=f"/orders/{ORDER}/operations")
    answers: list[httpx.Response] = []
    thread = _delayed_write(order_system, answers)
    order_system.reset()  # the next test begins
    seed(order_system)
    thread.join(timeout=10)

    [answer] = answers
    assert answer.status_code == 503
    assert answer.json()["detail"] == "Injected fault: the system was reset while this was delayed."
    state = order_system.state(ORDER)
    assert state["order"]["version"] == 1
    assert state["operations"] == []

    # Without a reset the same delayed write lands, late (a slow network, not a lost one).
    order_system.set_fault("latency", seconds=0.5, path_prefix=f"/orders/{ORDER}/operations")
    thread = _delayed_write(order_system, answers)
    thread.join(timeout=10)
    assert answers[1].status_code == 201
    assert order_system.state(ORDER)["order"]["version"] == 2


def test_fail_before_commit_and_unavailable_over_http(order_system):
    seed(order_system)
    order_system.set_fault("fail_before_commit", retry_after=1)
    failed = order_system.client.post(f"/orders/{ORDER}/operations", json=body())
    order_system.set_fault("unavailable", path_prefix="/orders/")
    unavailable = order_system.client.get(f"/orders/{ORDER}")

    assert (failed.status_code, failed.headers["Retry-After"]) == (503, "1")
    assert unavailable.status_code == 503
    assert order_system.state(ORDER)["operations"] == []
    assert order_system.client.post(f"/orders/{ORDER}/operations", json=body()).status_code == 201


def test_the_server_delivers_webhooks_and_retries_a_failed_delivery():
    with (
        Receiver(fail_first=1) as receiver,
        OrderSystemProcess(
            webhook_url=receiver.url,
            extra_env={
                "ORDERS_WEBHOOK_BACKOFF_SECONDS": "0.2",
                "ORDERS_DELIVERY_POLL_SECONDS": "0.1",
            },
        ) as system,
    ):
        seed(system)
        assert system.client.post(f"/orders/{ORDER}/operations", json=body()).status_code == 201
        deadline = time.monotonic() + 10
        events = system.outbox()
        while not events[0]["delivered_at"] and time.monotonic() < deadline:
            time.sleep(0.05)
            events = system.outbox()

    assert len(receiver.received) == 2
    (first_headers, first_body), (second_headers, second_body) = receiver.received
    assert first_body == second_body
    assert first_headers["X-Orders-Event-Id"] == second_headers["X-Orders-Event-Id"]
    assert_signed_at_delivery(
        second_headers, second_body, DEFAULT_WEBHOOK_SECRET, receiver.received_at[1]
    )
    assert events[0]["event_id"] == first_headers["X-Orders-Event-Id"]
    assert events[0]["attempts"] == 2
    assert events[0]["last_error"].startswith("HTTP 500")


def test_sigterm_stops_the_server_cleanly():
    system = OrderSystemProcess().start()
    process = system._process
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0
    system.stop()


def _grant_body(order_id: str, key: str, change: dict, *, version: int = 1) -> dict:
    grant = make_grant(operation_key=key, order_id=order_id, change=change, key=DEFAULT_GRANT_KEY)
    return {
        "operation_key": key,
        "change": change,
        "expected_version": version,
        "fencing_token": 5,
        "approval_grant": grant,
    }


def test_the_harness_starts_a_receiver_with_chosen_kinds_and_a_plug_in():
    """``change_kinds`` and ``extra_kinds`` reach the process; ``seed``, ``set_order`` and
    ``order`` steer and read orders with a status and an address."""
    with OrderSystemProcess(
        change_kinds=["delivery_date", "shipping_address"], extra_kinds=[GIFT_MESSAGE_KIND]
    ) as system:
        seed(system)
        system.seed(
            orders=[
                {
                    "order_id": "ORD-10",
                    "account_id": "ACC-9",
                    "delivery_date": "2031-03-06",
                    "status": "shipped",
                }
            ]
        )
        cancel = {"kind": "order_cancellation", "reason_code": "duplicate"}
        gift = {"kind": "gift_message", "message": "Enjoy!"}

        kinds = system.capabilities()["change_kinds"]
        refused = system.client.post(
            f"/orders/{ORDER}/operations", json=_grant_body(ORDER, "CANCEL-9-1", cancel)
        )
        applied = system.client.post(
            f"/orders/{ORDER}/operations", json=_grant_body(ORDER, "GIFT-9-1", gift)
        )
        shipped = system.client.post(
            "/orders/ORD-10/operations", json=_grant_body("ORD-10", "GIFT-10-1", gift)
        )
        moved_on = system.set_order(ORDER, shipping_address=None)
        held_still = system.set_order("ORD-10", status="open", bump_version=False)

        assert kinds == ["delivery_date", "shipping_address", "gift_message"]
        assert refused.json()["error"] == "unsupported_kind"
        assert applied.status_code == 201
        assert shipped.json()["error"] == "order_not_open"
        assert system.order(ORDER)["gift_message"] == "Enjoy!"
        assert (moved_on["version"], moved_on["shipping_address"]) == (3, None)
        assert (held_still["version"], held_still["status"]) == (1, "open")
        assert system.order("ORD-10")["shipping_address"] == SEED_ADDRESS
        assert [e["order_version"] for e in system.outbox()] == [2, 3]
