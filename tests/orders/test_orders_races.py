"""Concurrent submissions on PostgreSQL: real threads, real row locks, exactly one change.

The main thread holds the order's row lock while the workers start, and releases it only once
PostgreSQL reports every worker waiting on a lock -- so each run proves the submissions
overlapped and were serialised by the lock (a missing ``select_for_update`` fails the wait).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from django.db import connection, connections, transaction

from orders.exceptions import Refused
from orders.models import AppliedOperation, Order, OutboxEvent, Slot
from orders.services import operation_apply, operation_request_parse
from tests.orders.helpers import (
    ADDRESS,
    CHANGES,
    CURRENT_DATE,
    FREE_DATE,
    NEW_ADDRESS,
    ORDER_ID,
    operation_body,
    seed_rows,
)

WORKERS = 8

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="Row-lock races need PostgreSQL: SQLite ignores select_for_update and "
        "serialises every writer, so a race there proves nothing.",
    ),
]


def _submit(body: dict) -> tuple[int, str]:
    request = operation_request_parse(order_id=ORDER_ID, body=body)
    try:
        outcome = operation_apply(request=request)
    except Refused as refusal:
        return refusal.status, refusal.code
    return outcome.status, "replayed" if outcome.body.get("replayed") else "applied"


def _waiting_on_locks() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def race(bodies: list[dict]) -> tuple[list[tuple[int, str]], int]:
    """Submit every body from its own thread at once; return the answers and the most
    workers seen waiting on a lock together."""
    results: list[tuple[int, str] | BaseException] = [None] * len(bodies)
    barrier = threading.Barrier(len(bodies) + 1)

    def work(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[index] = _submit(bodies[index])
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            results[index] = error
        finally:
            connections.close_all()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    most_waiting = 0
    with transaction.atomic():
        Order.objects.select_for_update().get(pk=ORDER_ID)
        barrier.wait(timeout=10)
        deadline = time.monotonic() + 15
        while most_waiting < len(bodies) and time.monotonic() < deadline:
            most_waiting = max(most_waiting, _waiting_on_locks())
            time.sleep(0.02)
    for thread in threads:
        thread.join(timeout=30)
    errors = [result for result in results if isinstance(result, BaseException)]
    assert not errors, errors
    return results, most_waiting


@pytest.mark.django_db(transaction=True)
def test_same_operation_with_different_tokens_applies_exactly_once():
    seed_rows()
    bodies = [operation_body(fencing_token=10 + i) for i in range(WORKERS)]

    results, most_waiting = race(bodies)

    assert most_waiting == WORKERS  # every worker was blocked on the row lock at once
    assert Counter(results) == {(201, "applied"): 1, (200, "replayed"): WORKERS - 1}
    order = Order.objects.get(pk=ORDER_ID)
    operation = AppliedOperation.objects.get()
    assert (order.version, order.delivery_date) == (2, FREE_DATE)
    assert order.fence_token == operation.fencing_token
    assert OutboxEvent.objects.count() == 1
    assert Slot.objects.get(date=FREE_DATE).taken == 1
    assert Slot.objects.get(date=CURRENT_DATE).taken == 0


@pytest.mark.django_db(transaction=True)
def test_different_operations_against_one_order_version_apply_exactly_once():
    seed_rows()
    # One token for all, so every loser meets the version check rather than the fence.
    bodies = [operation_body(operation_key=f"DATE-1-{i}", fencing_token=10) for i in range(WORKERS)]

    results, most_waiting = race(bodies)

    assert most_waiting == WORKERS
    assert Counter(results) == {(201, "applied"): 1, (409, "version_conflict"): WORKERS - 1}
    assert Order.objects.get(pk=ORDER_ID).version == 2
    assert AppliedOperation.objects.count() == 1
    assert OutboxEvent.objects.count() == 1
    assert Slot.objects.get(date=FREE_DATE).taken == 1


def _reset_order() -> None:
    Order.objects.filter(pk=ORDER_ID).update(
        version=1, status="open", delivery_date=CURRENT_DATE, shipping_address=ADDRESS
    )
    AppliedOperation.objects.all().delete()
    OutboxEvent.objects.all().delete()
    Slot.objects.filter(date=CURRENT_DATE).update(taken=1)
    Slot.objects.filter(date=FREE_DATE).update(taken=0)


@pytest.mark.django_db(transaction=True)
def test_two_kinds_racing_on_one_order_apply_exactly_one():
    """An address change and a cancellation for the same order version, in five rounds: each
    round both were blocked on the row lock together, one applied, the other is a version
    conflict, and the order shows the winner's change alone."""
    seed_rows()
    for round_number in range(5):
        _reset_order()
        bodies = [
            operation_body(
                operation_key=f"ADDR-1-{round_number}", change=CHANGES["ADDR"], fencing_token=10
            ),
            operation_body(
                operation_key=f"CANCEL-1-{round_number}",
                change=CHANGES["CANCEL"],
                fencing_token=10,
            ),
        ]

        results, most_waiting = race(bodies)

        assert most_waiting == 2
        assert sorted(results) == [(201, "applied"), (409, "version_conflict")]
        order = Order.objects.get(pk=ORDER_ID)
        operation = AppliedOperation.objects.get()
        assert order.version == 2
        if operation.change["kind"] == "order_cancellation":
            assert (order.status, order.shipping_address) == ("cancelled", ADDRESS)
            assert Slot.objects.get(date=CURRENT_DATE).taken == 0
        else:
            assert (order.status, order.shipping_address) == ("open", {**NEW_ADDRESS, "line2": ""})
            assert Slot.objects.get(date=CURRENT_DATE).taken == 1
        assert OutboxEvent.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_every_kind_racing_on_one_order_version_applies_exactly_once():
    seed_rows()
    prefixes = list(CHANGES)
    bodies = [
        operation_body(
            operation_key=f"{prefixes[i % 3]}-1-{i}",
            change=CHANGES[prefixes[i % 3]],
            fencing_token=10,
        )
        for i in range(WORKERS)
    ]

    results, most_waiting = race(bodies)

    assert most_waiting == WORKERS
    assert Counter(results) == {(201, "applied"): 1, (409, "version_conflict"): WORKERS - 1}
    assert Order.objects.get(pk=ORDER_ID).version == 2
    assert AppliedOperation.objects.count() == OutboxEvent.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_an_apply_that_waited_for_the_order_judges_the_access_the_customer_has_then():
    """The order's lock reads the account's access in the same statement: an apply that waited
    for another write's lock got the order as that write left it but the account from before
    the wait, so a loss of access committed meanwhile went unseen (201 applied; an apply that
    did not wait is refused). It is judged when it can apply, as the grant's expiry is."""
    from orders.models import Account
    from orders.services import account_set_access
    from tests.orders.helpers import ACCOUNT_ID, address_change

    seed_rows()
    first = operation_body(operation_key="DATE-1-1", delivery_date=FREE_DATE, expected_version=1)
    second = operation_body(
        operation_key="ADDR-1-1", change=address_change(), expected_version=2, fencing_token=8
    )
    answers: list[object] = []
    waiting = threading.Event()

    def apply_second() -> None:
        try:
            waiting.set()
            answers.append(_submit(second))
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            answers.append(error)
        finally:
            connections.close_all()

    def revoke() -> None:
        try:
            account_set_access(account_id=ACCOUNT_ID, active=False)
        finally:
            connections.close_all()

    thread = threading.Thread(target=apply_second)
    most_waiting = 0
    with transaction.atomic():
        assert _submit(first) == (201, "applied")  # holds the order's lock until it commits
        thread.start()
        assert waiting.wait(timeout=10)
        deadline = time.monotonic() + 10
        while not most_waiting and time.monotonic() < deadline:
            most_waiting = _waiting_on_locks()
            time.sleep(0.01)
        other = threading.Thread(target=revoke)  # commits at once: it locks no order
        other.start()
        other.join(timeout=10)
    thread.join(timeout=30)

    assert most_waiting == 1, "the second apply never waited for the first one's lock"
    assert not Account.objects.get(pk=ACCOUNT_ID).access_active
    assert answers == [(403, "permission_revoked")]
    assert list(AppliedOperation.objects.values_list("operation_key", flat=True)) == ["DATE-1-1"]
    assert Order.objects.get(pk=ORDER_ID).version == 2
