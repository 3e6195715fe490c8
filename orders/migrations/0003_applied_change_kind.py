"""Stored changes carry their kind: every applied operation from before change kinds was a
delivery date change, so ``{"delivery_date": D}`` becomes ``{"kind": "delivery_date",
"delivery_date": D}``.

Holdfast compares the whole change it finds by key with its own (now with ``kind``), so an
operation stored without one would never settle. The body hash moves with it where it can be
proven: the old hash is recomputed from the row (``expected_version`` was ``order_version - 1``,
as every apply bumps the version by one) and, when it matches, replaced by the hash of the
same intent with the kind -- so a replay of such an operation by an upgraded Holdfast is still a
replay. A row whose old hash cannot be reproduced (applied with the version check switched off)
keeps it. Keys, versions, tokens and results are untouched. Runs in batches, outside one long
transaction.
"""

import hashlib
import json

from django.db import migrations

BATCH = 500


def _canonical(data: dict) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _hash(order_id: str, key: str, change: dict, expected_version: int) -> str:
    intent = {
        "order_id": order_id,
        "operation_key": key,
        "change": change,
        "expected_version": expected_version,
    }
    return hashlib.sha256(_canonical(intent).encode("utf-8")).hexdigest()


def _rewrite(apps, convert) -> None:
    """Apply ``convert(change) -> new change | None`` to every stored change, batch by batch,
    moving the body hash along when the old one is reproduced from the row."""
    AppliedOperation = apps.get_model("orders", "AppliedOperation")
    last = 0
    while True:
        batch = list(AppliedOperation.objects.filter(pk__gt=last).order_by("pk")[:BATCH])
        if not batch:
            return
        last = batch[-1].pk
        changed = []
        for operation in batch:
            new = convert(operation.change)
            if new is None:
                continue
            expected = operation.order_version - 1
            key, order_id = operation.operation_key, operation.order_id
            if operation.body_hash == _hash(order_id, key, operation.change, expected):
                operation.body_hash = _hash(order_id, key, new, expected)
            operation.change = new
            changed.append(operation)
        AppliedOperation.objects.bulk_update(changed, ["change", "body_hash"])


def _with_kind(change: object) -> dict | None:
    if not isinstance(change, dict) or "kind" in change:
        return None
    return {"kind": "delivery_date", **change}


def _without_kind(change: object) -> dict | None:
    if not isinstance(change, dict) or change.get("kind") != "delivery_date":
        return None
    return {name: value for name, value in change.items() if name != "kind"}


def add_kind(apps, schema_editor) -> None:
    _rewrite(apps, _with_kind)


def remove_kind(apps, schema_editor) -> None:
    _rewrite(apps, _without_kind)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("orders", "0002_order_status_address_extra"),
    ]

    operations = [
        migrations.RunPython(add_kind, remove_kind, elidable=True),
    ]
