"""The write path's own SQL: the statements the ORM sent for the same calls, written out.

These are what the ORM sent for the write path's calls (same tables, columns, conditions and
lock), without building and compiling a query per statement on every request -- most of a
write's CPU went there. Identifiers are double-quoted, which both SQLite and PostgreSQL read;
values go as parameters, adapted by the model fields exactly as the ORM adapts them
(``db_value``) and read back the same way (``from_db``).

The order update is the one statement whose columns vary: the core always sets the fence and
the version, and a change kind adds the order fields it changes (``order_update_sql``). Only
``UPDATABLE_ORDER_FIELDS`` may be named, so no kind can move an order's identity, account,
version or fence.
"""

from __future__ import annotations

import functools
from typing import Any

from django.db import DatabaseError, connection, models

from orders.models import AppliedOperation, Order, OutboxEvent, Slot

LOCK_SQL = (
    'SELECT "orders_order"."order_id", "orders_order"."account_id", "orders_order"."status", '
    '"orders_order"."delivery_date", "orders_order"."shipping_address", '
    '"orders_order"."extra", "orders_order"."version", "orders_order"."fence_token", '
    '"orders_account"."access_active" FROM "orders_order" INNER JOIN "orders_account" '
    'ON ("orders_order"."account_id" = "orders_account"."account_id") '
    'WHERE "orders_order"."order_id" = %s'
)
# ``select_for_update(of=("self",))``: PostgreSQL locks the order row only; SQLite has no row
# locks (its IMMEDIATE transactions serialise every writer), so the clause is left out there.
LOCK_CLAUSE = ' FOR UPDATE OF "orders_order"'
# PostgreSQL: the order's lock also says whether the row it locked is the one its statement's
# snapshot sees. In READ COMMITTED a lock that waited for another write returns the order as
# that write left it, but the account joined to it as it was before the wait (a loss of access
# committed meanwhile unseen): a row locked since the snapshot is read again, holding the lock.
LOCK_FRESH_SQL = (
    LOCK_SQL.replace(
        ' FROM "orders_order"',
        ', (SELECT v.xmin FROM "orders_order" v WHERE v."order_id" = "orders_order"."order_id")'
        ' = "orders_order".xmin FROM "orders_order"',
        1,
    )
    + LOCK_CLAUSE
)
APPLIED_SQL = (
    'SELECT "body_hash", "result" FROM "orders_appliedoperation" WHERE "operation_key" = %s'
)
SLOT_TAKE_SQL = (
    'UPDATE "orders_slot" SET "taken" = ("orders_slot"."taken" + 1) '
    'WHERE ("orders_slot"."date" = %s AND "orders_slot"."taken" < ("orders_slot"."capacity"))'
)
SLOT_FREE_SQL = (
    'UPDATE "orders_slot" SET "taken" = ("orders_slot"."taken" - 1) '
    'WHERE ("orders_slot"."date" = %s AND "orders_slot"."taken" > 0)'
)
FENCE_UPDATE_SQL = (
    'UPDATE "orders_order" SET "fence_token" = %s WHERE "orders_order"."order_id" = %s'
)
APPLIED_INSERT_SQL = (
    'INSERT INTO "orders_appliedoperation" ("operation_key", "order_id", "body_hash", '
    '"change", "status", "order_version", "fencing_token", "approval_id", "result", '
    '"created_at", "searchable_at") VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)'
)
EVENT_INSERT_SQL = (
    'INSERT INTO "orders_outboxevent" ("event_id", "type", "order_id", "order_version", '
    '"occurred_at", "payload", "delivered_at", "attempts", "next_attempt_at", "last_error") '
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)

# The order fields a change kind may set (``ChangeKind.apply``'s answer).
UPDATABLE_ORDER_FIELDS = frozenset({"status", "delivery_date", "shipping_address", "extra"})

FIELDS: dict[tuple[type[models.Model], str], Any] = {
    (model, field.name): field
    for model in (Order, Slot, AppliedOperation, OutboxEvent)
    for field in model._meta.concrete_fields
}


def db_value(model: type[models.Model], field: str, value: object) -> Any:
    """``value`` as the ORM would send it for ``model.field`` (dates, datetimes, JSON)."""
    return FIELDS[model, field].get_db_prep_save(value, connection)


def from_db(model: type[models.Model], field: str, value: object) -> Any:
    """A column's raw value as the ORM reads it: JSON parsed, SQLite's date text a date."""
    model_field = FIELDS[model, field]
    if hasattr(model_field, "from_db_value"):
        value = model_field.from_db_value(value, None, connection)
    return model_field.to_python(value)


def saved(cursor, what: str) -> None:
    """What ``save(update_fields=...)`` says when the row it updates is gone."""
    if cursor.rowcount != 1:
        raise DatabaseError(f"Save with update_fields did not affect any rows ({what}).")


@functools.lru_cache(maxsize=64)
def order_update_sql(fields: tuple[str, ...]) -> str:
    """``UPDATE`` of one order's fence, version and ``fields`` (in that parameter order)."""
    unknown = set(fields) - UPDATABLE_ORDER_FIELDS
    if unknown:
        raise ValueError(f"A change kind may not set {', '.join(sorted(unknown))} on an order.")
    columns = ["fence_token", "version", *(FIELDS[Order, name].column for name in fields)]
    assignments = ", ".join(f'"{column}" = %s' for column in columns)
    # Only the model's own column names are interpolated; every value is a parameter.
    return f'UPDATE "orders_order" SET {assignments} WHERE "orders_order"."order_id" = %s'  # noqa: S608


def slot_take(day: object) -> bool:
    """Take one place on ``day``'s slot if it has room (one conditional update: the check and
    the take cannot be separated). False when the slot is full or has no row."""
    with connection.cursor() as cursor:
        cursor.execute(SLOT_TAKE_SQL, [db_value(Slot, "date", day)])
        return bool(cursor.rowcount)


def slot_free(day: object) -> None:
    """Give back one place on ``day``'s slot (never below zero)."""
    with connection.cursor() as cursor:
        cursor.execute(SLOT_FREE_SQL, [db_value(Slot, "date", day)])
