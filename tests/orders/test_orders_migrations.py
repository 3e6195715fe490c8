"""The change-kinds migrations keep every existing row: orders become open with no address, and
stored changes gain their kind with a body hash that still makes the same request a replay."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, date, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from orders.services import operation_request_parse
from tests.orders.helpers import make_grant

BEFORE = [("orders", "0001_initial")]
AFTER = [("orders", "0003_applied_change_kind")]
NOW = datetime(2031, 3, 3, 12, 0, tzinfo=UTC)


def _old_hash(order_id: str, key: str, change: dict, expected_version: int) -> str:
    """The body hash as the order system computed it before change kinds."""
    intent = {
        "order_id": order_id,
        "operation_key": key,
        "change": change,
        "expected_version": expected_version,
    }
    canonical = json.dumps(intent, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor


@pytest.mark.django_db(transaction=True)
def test_existing_orders_and_operations_keep_everything_and_gain_the_new_shape():
    old = _migrate(BEFORE).loader.project_state(BEFORE).apps
    account = old.get_model("orders", "Account").objects.create(account_id="ACC-1", name="N")
    Order = old.get_model("orders", "Order")
    Order.objects.create(
        order_id="ORD-1", account=account, delivery_date=date(2031, 3, 8), version=3, fence_token=9
    )
    Applied = old.get_model("orders", "AppliedOperation")
    change = {"delivery_date": "2031-03-08"}
    rows = {
        # Applied at version 2 -> 3: its old hash is reproduced from the row and moves along.
        "DATE-1-2": _old_hash("ORD-1", "DATE-1-2", change, 2),
        # Applied with the version check off: its old hash cannot be reproduced and stays.
        "DATE-1-1": "f" * 64,
    }
    for index, (key, body_hash) in enumerate(sorted(rows.items())):
        Applied.objects.create(
            operation_key=key,
            order_id="ORD-1",
            body_hash=body_hash,
            change=change,
            order_version=2 + index,
            fencing_token=7 + index,
            approval_id="AP-9",
            result={"operation_key": key, "status": "applied", "order_version": 2 + index},
            created_at=NOW,
            searchable_at=NOW,
        )

    new = _migrate(AFTER).loader.project_state(AFTER).apps

    order = new.get_model("orders", "Order").objects.get(pk="ORD-1")
    assert (order.status, order.shipping_address, order.extra) == ("open", None, {})
    assert (order.delivery_date, order.version, order.fence_token) == (date(2031, 3, 8), 3, 9)
    stored = {
        op.operation_key: op for op in new.get_model("orders", "AppliedOperation").objects.all()
    }
    assert {key: op.change for key, op in stored.items()} == dict.fromkeys(
        rows, {"kind": "delivery_date", "delivery_date": "2031-03-08"}
    )
    assert {key: (op.order_version, op.fencing_token) for key, op in stored.items()} == {
        "DATE-1-1": (2, 7),
        "DATE-1-2": (3, 8),
    }
    assert stored["DATE-1-1"].body_hash == "f" * 64
    # An upgraded Holdfast resending DATE-1-2 (with its kind) is recognised as the same body.
    resent = operation_request_parse(
        order_id="ORD-1",
        body={
            "operation_key": "DATE-1-2",
            "change": {"kind": "delivery_date", "delivery_date": "2031-03-08"},
            "expected_version": 2,
            "fencing_token": 12,
            "approval_grant": make_grant(operation_key="DATE-1-2", order_id="ORD-1"),
        },
    )
    assert stored["DATE-1-2"].body_hash == resent.body_hash


@pytest.mark.django_db(transaction=True)
def test_the_stored_change_migration_reverses():
    new = _migrate(AFTER).loader.project_state(AFTER).apps
    account = new.get_model("orders", "Account").objects.create(account_id="ACC-1", name="N")
    new.get_model("orders", "Order").objects.create(
        order_id="ORD-1", account=account, delivery_date=date(2031, 3, 8)
    )
    change = {"kind": "delivery_date", "delivery_date": "2031-03-08"}
    new.get_model("orders", "AppliedOperation").objects.create(
        operation_key="DATE-1-1",
        order_id="ORD-1",
        body_hash=_old_hash("ORD-1", "DATE-1-1", change, 1),
        change=change,
        order_version=2,
        fencing_token=7,
        approval_id="AP-9",
        result={},
        created_at=NOW,
        searchable_at=NOW,
    )

    old = _migrate(BEFORE).loader.project_state(BEFORE).apps

    operation = old.get_model("orders", "AppliedOperation").objects.get()
    assert operation.change == {"delivery_date": "2031-03-08"}
    assert operation.body_hash == _old_hash("ORD-1", "DATE-1-1", operation.change, 1)
    _migrate(AFTER)
