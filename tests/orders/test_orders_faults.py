"""Fault injection, the testing endpoints and the lagging search index."""

from __future__ import annotations

import time

import pytest

from orders.faults import fault_add
from orders.models import FaultRule, Order
from tests.orders.helpers import FREE_DATE, ORDER_ID, operation_body, snapshot

pytestmark = pytest.mark.usefixtures("seeded")

CONTROL_CALLS = [
    ("get", "/_faults/"),
    ("post", "/_faults/"),
    ("delete", "/_faults/"),
    ("post", "/_faults/search-lag"),
    ("post", "/_testing/reset"),
    ("post", "/_testing/seed"),
    ("post", "/_testing/accounts/ACC-1/access"),
    ("get", f"/_testing/orders/{ORDER_ID}/state"),
    ("get", "/_testing/outbox"),
]


@pytest.mark.parametrize(("method", "path"), CONTROL_CALLS)
def test_fault_and_testing_endpoints_are_404_when_disabled(api, settings, method, path):
    settings.ORDERS_FAULTS_ENABLED = False
    before = snapshot()

    response = getattr(api, method)(path)

    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
    assert snapshot() == before


def test_stored_rules_do_nothing_while_disabled(api, settings):
    settings.ORDERS_FAULTS_ENABLED = False
    FaultRule.objects.create(kind="unavailable", remaining=None)
    FaultRule.objects.create(kind="fail_before_commit", remaining=None)

    assert api.get(f"/orders/{ORDER_ID}").status_code == 200
    assert api.apply(operation_body()).status_code == 201


@pytest.mark.usefixtures("faults_on")
def test_fail_before_commit_answers_503_and_applies_nothing(api):
    created = api.post("/_faults/", {"kind": "fail_before_commit", "retry_after": 2})
    body = operation_body()
    before = snapshot()

    failed = api.apply(body)
    after_failure = snapshot()
    retried = api.apply(body)

    assert created.status_code == 201
    assert failed.status_code == 503
    assert failed.json()["error"] == "unavailable"
    assert failed["Retry-After"] == "2"
    assert after_failure == before
    assert retried.status_code == 201  # the rule was used up; the same request now applies


@pytest.mark.usefixtures("faults_on")
def test_unavailable_counts_down_per_matching_call(api):
    api.post("/_faults/", {"kind": "unavailable", "path_prefix": "/orders/", "times": 2})

    statuses = [api.get(f"/orders/{ORDER_ID}").status_code for _ in range(3)]

    assert statuses == [503, 503, 200]
    assert api.get("/capabilities").status_code == 200  # another prefix is untouched
    assert api.get("/_faults/").json()["faults"][0]["times"] == 0


@pytest.mark.usefixtures("faults_on")
def test_a_rule_without_a_count_lasts_until_cleared(api):
    api.post("/_faults/", {"kind": "unavailable", "times": None})
    assert [api.get("/capabilities").status_code for _ in range(3)] == [503] * 3
    assert api.get("/healthz").status_code == 200  # control paths are never faulted

    api.delete("/_faults/")

    assert api.get("/capabilities").status_code == 200


@pytest.mark.usefixtures("faults_on")
def test_latency_and_delay_after_commit_slow_the_answer(api):
    fault_add(kind="latency", path_prefix="/orders/", seconds=0.2)
    started = time.monotonic()
    assert api.get(f"/orders/{ORDER_ID}").status_code == 200
    assert time.monotonic() - started >= 0.2

    fault_add(kind="delay_after_commit", seconds=0.2)
    started = time.monotonic()
    assert api.apply(operation_body()).status_code == 201
    assert time.monotonic() - started >= 0.2
    assert Order.objects.get(pk=ORDER_ID).version == 2


@pytest.mark.usefixtures("faults_on")
def test_commit_faults_do_not_touch_reads(api):
    api.post("/_faults/", {"kind": "fail_before_commit", "times": None})
    assert api.get(f"/orders/{ORDER_ID}").status_code == 200


@pytest.mark.usefixtures("faults_on")
@pytest.mark.parametrize(
    "body",
    [
        {"kind": "explode"},
        {"kind": "search_lag", "seconds": 1},
        {"kind": "latency"},
        {"kind": "unavailable", "times": 0},
        {"kind": "unavailable", "path_prefix": "orders"},
    ],
)
def test_a_bad_rule_is_invalid_field(api, body):
    response = api.post("/_faults/", body)
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_field"
    assert not FaultRule.objects.exists()


@pytest.mark.usefixtures("faults_on")
def test_lagging_search_is_404_while_the_consistent_lookup_finds_the_operation(api):
    api.post("/_faults/search-lag", {"seconds": 0.4})
    api.apply(operation_body())

    lookup = api.get("/operations/DATE-1-1")
    search = api.get("/search/operations", key="DATE-1-1")

    assert lookup.status_code == 200
    assert lookup.json()["change"] == {
        "kind": "delivery_date",
        "delivery_date": FREE_DATE.isoformat(),
    }
    assert search.status_code == 404
    assert search.json()["error"] == "unknown_operation"
    time.sleep(0.45)
    caught_up = api.get("/search/operations", key="DATE-1-1")
    assert caught_up.status_code == 200
    assert caught_up.json() == lookup.json()


def test_search_lag_from_settings_applies_without_faults(api, settings):
    settings.ORDERS_SEARCH_LAG_SECONDS = 60
    api.apply(operation_body())
    assert api.get("/operations/DATE-1-1").status_code == 200
    assert api.get("/search/operations", key="DATE-1-1").status_code == 404
    assert api.get("/search/operations").json()["error"] == "invalid_field"


@pytest.mark.usefixtures("faults_on")
def test_testing_endpoints_seed_reset_and_report_state(api):
    seeded = api.post(
        "/_testing/seed",
        {
            "accounts": [{"account_id": "ACC-2", "name": "B", "access_active": True}],
            "orders": [{"order_id": "ORD-2", "account_id": "ACC-2", "delivery_date": "2031-04-01"}],
            "slots": [{"date": "2031-04-01", "capacity": 2, "taken": 1}],
        },
    )
    revoked = api.post("/_testing/accounts/ACC-2/access", {"active": False})
    state = api.get("/_testing/orders/ORD-2/state").json()

    assert seeded.json() == {"accounts": 2, "orders": 2, "slots": 4}
    assert revoked.json() == {"account_id": "ACC-2", "access_active": False}
    assert state["order"]["version"] == 1
    assert state["access_active"] is False
    assert state["fence_token"] == 0
    assert state["operations"] == state["events"] == []
    assert api.post("/_testing/seed", {"orders": [{"order_id": "x"}]}).status_code == 422

    api.post("/_testing/reset")

    assert snapshot() == {"accounts": [], "orders": [], "slots": [], "operations": [], "events": []}


@pytest.mark.usefixtures("faults_on")
def test_the_fault_rules_are_read_once_before_and_once_after_the_view(api):
    """With fault injection on, a write reads the rules twice (those acting before the view,
    those acting after it), not once per kind of fault; a read asks only for the kinds that
    touch reads. A rule still takes effect, and only as often as it says."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def fault_reads(call) -> tuple[int, object]:
        with CaptureQueriesContext(connection) as queries:
            response = call()
        # The middleware's reads of live rules (the view reads the search lag on its own).
        live = '"orders_faultrule"."remaining" IS NULL'
        reads = [q["sql"] for q in queries.captured_queries if live in q["sql"]]
        return len(reads), response

    reads, written = fault_reads(lambda: api.apply(operation_body()))
    assert written.status_code == 201
    assert reads == 2  # before: 5, one per kind
    reads, read = fault_reads(lambda: api.get(f"/orders/{ORDER_ID}"))
    assert read.status_code == 200
    assert reads == 1

    fault_add(kind="unavailable", path_prefix="/orders/", times=1)
    _, refused = fault_reads(lambda: api.get(f"/orders/{ORDER_ID}"))
    _, served = fault_reads(lambda: api.get(f"/orders/{ORDER_ID}"))
    assert (refused.status_code, served.status_code) == (503, 200)
