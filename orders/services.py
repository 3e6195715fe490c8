"""The order system's business rules: the only code that changes orders, slots and fences.

``operation_apply`` is the receiving contract's heart. It locks the order row and, in the one
transaction that would apply the change, checks in this order: the operation key (replay or
``key_reused``), the fencing token against the order's fence, the approval grant, the expected
order version, the account's access and the slot's capacity. Every refusal raises ``Refused``
before anything is written, so a refusal changes nothing -- not even the fence. A successful
apply raises the fence to the token used, moves the slot, bumps the version, records the
operation with its first answer and writes the outbox event, all in that transaction.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, models, transaction
from django.db.models import F, Max
from django.utils import timezone

from orders.exceptions import Refused, invalid
from orders.faults import search_lag_seconds
from orders.grants import grant_verify
from orders.models import Account, AppliedOperation, FaultRule, Order, OutboxEvent, Slot

MAX_KEY_LENGTH = 200


def isoformat_z(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _canonical(data: dict) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _parse_date(value: object) -> date | None:
    """A date only from its exact ``YYYY-MM-DD`` spelling."""
    if not isinstance(value, str):
        return None
    try:
        parsed = date.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.isoformat() == value else None


def _int_at_least(value: object, minimum: int) -> int | None:
    """``value`` when it is a JSON integer (never a boolean) of at least ``minimum``, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        return None
    return value


@dataclass(frozen=True)
class OperationRequest:
    order_id: str
    operation_key: str
    delivery_date: date
    expected_version: int
    fencing_token: int
    approval_grant: str

    @property
    def change(self) -> dict:
        return {"delivery_date": self.delivery_date.isoformat()}

    @property
    def body_hash(self) -> str:
        """The hash of the operation's intent: order, key, exact change and expected version.

        The fencing token and the grant identify the attempt and its authority, not the
        operation, so a later attempt that resends the same operation gets the first result.
        """
        intent = {
            "order_id": self.order_id,
            "operation_key": self.operation_key,
            "change": self.change,
            "expected_version": self.expected_version,
        }
        return hashlib.sha256(_canonical(intent).encode("utf-8")).hexdigest()


OPERATION_KEY_PATTERN = re.compile(r"[A-Za-z0-9._:-]+")


def operation_request_parse(*, order_id: str, body: object) -> OperationRequest:
    """A well-formed request, or ``Refused`` ``invalid_field`` naming every bad field."""
    if not isinstance(body, dict):
        raise invalid({"body": "Must be a JSON object."})
    fields: dict[str, str] = {}
    raw_key = body.get("operation_key")
    key = (
        raw_key
        if isinstance(raw_key, str)
        and len(raw_key) <= MAX_KEY_LENGTH
        and OPERATION_KEY_PATTERN.fullmatch(raw_key)
        else None
    )
    if key is None:
        # Keys are looked up by URL (GET /operations/{key}): only characters a path segment
        # carries unchanged, so an applied operation can always be found by its key.
        fields["operation_key"] = (
            f"Must be 1 to {MAX_KEY_LENGTH} characters of letters, digits, '.', '_', ':' or '-'."
        )
    change = body.get("change")
    delivery_date = None
    if not isinstance(change, dict) or set(change) != {"delivery_date"}:
        fields["change"] = "Must be an object with exactly one field, delivery_date."
    else:
        delivery_date = _parse_date(change["delivery_date"])
        if delivery_date is None:
            fields["change.delivery_date"] = "Must be a date written YYYY-MM-DD."
    expected_version = _int_at_least(body.get("expected_version"), 1)
    if expected_version is None:
        fields["expected_version"] = "Must be a positive integer."
    token = _int_at_least(body.get("fencing_token"), 0)
    if token is None:
        fields["fencing_token"] = "Must be a non-negative integer."  # noqa: S105
    raw_grant = body.get("approval_grant")
    grant = raw_grant if isinstance(raw_grant, str) and raw_grant else None
    if grant is None:
        fields["approval_grant"] = "Must be a non-empty string."
    # Every None above named its field, so this is exactly ``if fields``, spelled so the
    # checker sees each value narrowed.
    if (
        fields
        or key is None
        or delivery_date is None
        or expected_version is None
        or token is None
        or grant is None
    ):
        raise invalid(fields)
    return OperationRequest(
        order_id=order_id,
        operation_key=key,
        delivery_date=delivery_date,
        expected_version=expected_version,
        fencing_token=token,
        approval_grant=grant,
    )


@dataclass(frozen=True)
class Outcome:
    status: int
    body: dict


def _unknown_order(order_id: str) -> Refused:
    return Refused(404, "unknown_order", f"There is no order {order_id}.")


class LockedOrder(NamedTuple):
    """The order row ``_lock_order`` read (and locked), with its account's access."""

    order_id: str
    account_id: str
    delivery_date: date
    version: int
    fence_token: int
    access_active: bool


# The write path speaks SQL of its own: these few statements are what the ORM sent for the
# same calls (same tables, columns, conditions and lock), without building and compiling a
# query per statement on every request -- most of a write's CPU went there. Identifiers are
# double-quoted, which both SQLite and PostgreSQL read; values go as parameters, adapted by
# the model fields exactly as the ORM adapts them (``_db``).
_LOCK_SQL = (
    'SELECT "orders_order"."order_id", "orders_order"."account_id", '
    '"orders_order"."delivery_date", "orders_order"."version", "orders_order"."fence_token", '
    '"orders_account"."access_active" FROM "orders_order" INNER JOIN "orders_account" '
    'ON ("orders_order"."account_id" = "orders_account"."account_id") '
    'WHERE "orders_order"."order_id" = %s'
)
# ``select_for_update(of=("self",))``: PostgreSQL locks the order row only; SQLite has no row
# locks (its IMMEDIATE transactions serialise every writer), so the clause is left out there.
_LOCK_CLAUSE = ' FOR UPDATE OF "orders_order"'
_APPLIED_SQL = (
    'SELECT "body_hash", "result" FROM "orders_appliedoperation" WHERE "operation_key" = %s'
)
_SLOT_TAKE_SQL = (
    'UPDATE "orders_slot" SET "taken" = ("orders_slot"."taken" + 1) '
    'WHERE ("orders_slot"."date" = %s AND "orders_slot"."taken" < ("orders_slot"."capacity"))'
)
_SLOT_FREE_SQL = (
    'UPDATE "orders_slot" SET "taken" = ("orders_slot"."taken" - 1) '
    'WHERE ("orders_slot"."date" = %s AND "orders_slot"."taken" > 0)'
)
_ORDER_UPDATE_SQL = (
    'UPDATE "orders_order" SET "fence_token" = %s, "delivery_date" = %s, "version" = %s '
    'WHERE "orders_order"."order_id" = %s'
)
_FENCE_UPDATE_SQL = (
    'UPDATE "orders_order" SET "fence_token" = %s WHERE "orders_order"."order_id" = %s'
)
_APPLIED_INSERT_SQL = (
    'INSERT INTO "orders_appliedoperation" ("operation_key", "order_id", "body_hash", '
    '"change", "status", "order_version", "fencing_token", "approval_id", "result", '
    '"created_at", "searchable_at") VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)'
)
_EVENT_INSERT_SQL = (
    'INSERT INTO "orders_outboxevent" ("event_id", "type", "order_id", "order_version", '
    '"occurred_at", "payload", "delivered_at", "attempts", "next_attempt_at", "last_error") '
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


def _db(model: type[models.Model], field: str, value: object) -> Any:
    """``value`` as the ORM would send it for ``model.field`` (dates, datetimes, JSON)."""
    return _FIELDS[model, field].get_db_prep_save(value, connection)


_FIELDS: dict[tuple[type[models.Model], str], Any] = {
    (model, field.name): field
    for model in (Order, Slot, AppliedOperation, OutboxEvent)
    for field in model._meta.concrete_fields
}


def _saved(cursor, what: str) -> None:
    """What ``save(update_fields=...)`` says when the row it updates is gone."""
    if cursor.rowcount != 1:
        raise DatabaseError(f"Save with update_fields did not affect any rows ({what}).")


def _lock_order(order_id: str) -> LockedOrder:
    """The order row, locked until the transaction ends, with its account's access."""
    sql = _LOCK_SQL + (_LOCK_CLAUSE if connection.features.has_select_for_update_of else "")
    with connection.cursor() as cursor:
        cursor.execute(sql, [order_id])
        row = cursor.fetchone()
    if row is None:
        raise _unknown_order(order_id)
    oid, account_id, delivery_date, version, fence_token, access_active = row
    return LockedOrder(
        order_id=oid,
        account_id=account_id,
        # SQLite hands back the date's text; DateField reads it as the ORM does.
        delivery_date=_FIELDS[Order, "delivery_date"].to_python(delivery_date),
        version=version,
        fence_token=fence_token,
        access_active=bool(access_active),
    )


def operation_apply(*, request: OperationRequest) -> Outcome:
    """Apply one operation exactly once, or refuse it having changed nothing (see module doc).

    ``201`` for the first apply, ``200`` with ``replayed: true`` for the same key and intent.
    """
    try:
        with transaction.atomic():
            return _operation_apply_locked(request)
    except IntegrityError:
        # Only a key first used on another order can collide here (same-order requests are
        # serialised by the row lock); that is a reuse of the key for another body.
        if AppliedOperation.objects.filter(operation_key=request.operation_key).exists():
            raise _key_reused(request.operation_key) from None
        raise


def _key_reused(key: str) -> Refused:
    return Refused(422, "key_reused", f"Operation key {key} was already used for another body.")


def _operation_apply_locked(request: OperationRequest) -> Outcome:
    order = _lock_order(request.order_id)
    # The clock is read once the lock is held: a request that waited on the lock is judged
    # (grant expiry included) at the moment it can actually apply.
    now = timezone.now()
    idempotent = not settings.ORDERS_DISABLE_IDEMPOTENCY
    fencing = not settings.ORDERS_DISABLE_FENCING

    if idempotent:
        with connection.cursor() as cursor:
            cursor.execute(_APPLIED_SQL, [request.operation_key])
            existing = cursor.fetchone()
        if existing is not None:
            body_hash, result = existing
            if body_hash != request.body_hash:
                raise _key_reused(request.operation_key)
            first = _FIELDS[AppliedOperation, "result"].from_db_value(result, None, connection)
            return Outcome(200, {**first, "replayed": True})

    if fencing and request.fencing_token < order.fence_token:
        raise Refused(
            409,
            "stale_fencing_token",
            f"Fencing token {request.fencing_token} is below this order's fence "
            f"({order.fence_token}).",
        )
    grant = grant_verify(
        request.approval_grant,
        key=settings.APPROVAL_GRANT_KEY,
        operation_key=request.operation_key,
        order_id=request.order_id,
        change=request.change,
        # Unsafe test mode: judged as of the epoch, so an expired grant still verifies.
        now=datetime.min.replace(tzinfo=UTC) if settings.ORDERS_UNSAFE_SKIP_APPROVAL_CHECK else now,
    )
    if not settings.ORDERS_UNSAFE_SKIP_VERSION_CHECK and request.expected_version != order.version:
        raise Refused(
            409,
            "version_conflict",
            f"Expected order version {request.expected_version}, it is {order.version}.",
        )
    if not settings.ORDERS_UNSAFE_SKIP_ACCESS_CHECK and not order.access_active:
        raise Refused(
            403, "permission_revoked", f"Account {order.account_id} no longer has access."
        )
    with connection.cursor() as cursor:
        old_date = order.delivery_date
        if request.delivery_date != old_date:
            cursor.execute(_SLOT_TAKE_SQL, [_db(Slot, "date", request.delivery_date)])
            if not cursor.rowcount:
                raise Refused(
                    409,
                    "slot_unavailable",
                    f"No delivery slot is free on {request.delivery_date}.",
                )
            cursor.execute(_SLOT_FREE_SQL, [_db(Slot, "date", old_date)])

        fence_token = (
            max(order.fence_token, request.fencing_token) if fencing else order.fence_token
        )
        version = order.version + 1
        cursor.execute(
            _ORDER_UPDATE_SQL,
            [
                fence_token,
                _db(Order, "delivery_date", request.delivery_date),
                version,
                order.order_id,
            ],
        )
        _saved(cursor, order.order_id)

        result = {
            "operation_key": request.operation_key,
            "status": "applied",
            "order_version": version,
        }
        if idempotent:
            change = request.change
            searchable_at = now + timedelta(seconds=search_lag_seconds())
            cursor.execute(
                _APPLIED_INSERT_SQL,
                [
                    request.operation_key,
                    order.order_id,
                    request.body_hash,
                    _db(AppliedOperation, "change", change),
                    "applied",
                    version,
                    request.fencing_token,
                    grant.approval_id,
                    _db(AppliedOperation, "result", result),
                    _db(AppliedOperation, "created_at", now),
                    _db(AppliedOperation, "searchable_at", searchable_at),
                ],
            )
        _event_record(cursor, order_id=order.order_id, order_version=version, now=now)
    return Outcome(201, result)


def _event_record(cursor, *, order_id: str, order_version: int, now: datetime) -> None:
    """The outbox event of an applied change, written in its transaction (``cursor``)."""
    event_id = str(uuid.uuid4())
    payload = {
        "event_id": event_id,
        "type": "order.updated",
        "order_id": order_id,
        "order_version": order_version,
        "occurred_at": isoformat_z(now),
    }
    cursor.execute(
        _EVENT_INSERT_SQL,
        [
            event_id,
            "order.updated",
            order_id,
            order_version,
            _db(OutboxEvent, "occurred_at", now),
            _db(OutboxEvent, "payload", payload),
            None,
            0,
            _db(OutboxEvent, "next_attempt_at", now),
            "",
        ],
    )


def fence_raise(*, order_id: str, body: object) -> dict:
    """Raise the order's fence to ``fencing_token`` without changing the order.

    Equal tokens are accepted (idempotent); a token below the fence is ``stale_fencing_token``
    and changes nothing. The answer's ``min_token`` is the fence after the call.
    """
    token = _int_at_least(body.get("fencing_token"), 0) if isinstance(body, dict) else None
    if token is None:
        raise invalid({"fencing_token": "Must be a non-negative integer."})
    with transaction.atomic():
        order = _lock_order(order_id)
        if settings.ORDERS_DISABLE_FENCING:
            return {"order_id": order_id, "min_token": token}
        if token < order.fence_token:
            raise Refused(
                409,
                "stale_fencing_token",
                f"Fencing token {token} is below this order's fence ({order.fence_token}).",
            )
        if token > order.fence_token:
            with connection.cursor() as cursor:
                cursor.execute(_FENCE_UPDATE_SQL, [token, order.order_id])
                _saved(cursor, order.order_id)
            return {"order_id": order_id, "min_token": token}
        return {"order_id": order_id, "min_token": order.fence_token}


FENCES_MAX_OPERATIONS = 200


def fences_max(*, order_id: str = "", above: str | int | None = None) -> dict:
    """What a client needs to tell whether its own records are older than this system's: the
    highest fencing token seen (for one order, or over every order) and the operations applied
    with a token above ``above`` (oldest first, at most ``FENCES_MAX_OPERATIONS``).

    A read: it changes nothing. ``truncated`` says more operations matched than were listed.
    """
    floor = 0
    if above not in (None, ""):
        try:
            floor = int(above)
        except (TypeError, ValueError):
            raise invalid({"above": "Must be a non-negative integer."}) from None
        if floor < 0:
            raise invalid({"above": "Must be a non-negative integer."})
    orders, applied = Order.objects.all(), AppliedOperation.objects.all()
    if order_id:
        orders, applied = orders.filter(pk=order_id), applied.filter(order_id=order_id)
        if not orders.exists():
            raise _unknown_order(order_id)
    # The fence holds the highest token of every apply and fence call; the operations' own
    # tokens count too (with fencing switched off the fence does not move).
    highest = max(
        orders.aggregate(m=Max("fence_token"))["m"] or 0,
        applied.aggregate(m=Max("fencing_token"))["m"] or 0,
    )
    listed = list(
        applied.filter(fencing_token__gt=floor).order_by("fencing_token", "id")[
            : FENCES_MAX_OPERATIONS + 1
        ]
    )
    return {
        "order_id": order_id or None,
        "max_token": highest,
        "operations": [
            {
                "operation_key": op.operation_key,
                "order_id": op.order_id,
                "fencing_token": op.fencing_token,
                "approval_id": op.approval_id,
            }
            for op in listed[:FENCES_MAX_OPERATIONS]
        ],
        "truncated": len(listed) > FENCES_MAX_OPERATIONS,
    }


def order_get(*, order_id: str) -> Order:
    order = Order.objects.filter(pk=order_id).first()
    if order is None:
        raise _unknown_order(order_id)
    return order


def slot_get(*, day: str) -> dict:
    """The slot for a date; a date without a slot row has capacity 0 (nothing can move there)."""
    parsed = _parse_date(day)
    if parsed is None:
        raise invalid({"date": "Must be a date written YYYY-MM-DD."})
    slot = Slot.objects.filter(date=parsed).first()
    return slot.as_json() if slot else {"date": parsed.isoformat(), "capacity": 0, "taken": 0}


def _unknown_operation(key: str) -> Refused:
    return Refused(404, "unknown_operation", f"No operation {key} has been applied.")


def operation_get(*, operation_key: str) -> AppliedOperation:
    """The consistent lookup: an applied operation is visible as soon as it commits."""
    operation = AppliedOperation.objects.filter(operation_key=operation_key).first()
    if operation is None:
        raise _unknown_operation(operation_key)
    return operation


def operation_search(*, operation_key: str) -> AppliedOperation:
    """The lagging index: an operation shows only once its ``searchable_at`` has passed.

    A 404 here is never proof that the operation did not happen.
    """
    operation = AppliedOperation.objects.filter(
        operation_key=operation_key, searchable_at__lte=timezone.now()
    ).first()
    if operation is None:
        raise _unknown_operation(operation_key)
    return operation


# --- Test and demo data (the /_testing/ endpoints are gated like the faults) ---------------


def testing_reset() -> None:
    """Delete every row this system holds."""
    with transaction.atomic():
        OutboxEvent.objects.all().delete()
        AppliedOperation.objects.all().delete()
        Order.objects.all().delete()
        Account.objects.all().delete()
        Slot.objects.all().delete()
        FaultRule.objects.all().delete()


def testing_seed(*, data: object) -> dict:
    """Upsert ``{"accounts": [...], "orders": [...], "slots": [...]}`` (each list optional)."""
    if not isinstance(data, dict):
        raise invalid({"body": "Must be a JSON object."})
    try:
        with transaction.atomic():
            for item in data.get("accounts", []):
                Account.objects.update_or_create(
                    account_id=item["account_id"],
                    defaults={
                        "name": item.get("name", item["account_id"]),
                        "access_active": bool(item.get("access_active", True)),
                    },
                )
            for item in data.get("orders", []):
                defaults = {
                    "account_id": item["account_id"],
                    "delivery_date": _required_date(item["delivery_date"]),
                }
                if "version" in item:
                    defaults["version"] = int(item["version"])
                Order.objects.update_or_create(order_id=item["order_id"], defaults=defaults)
            for item in data.get("slots", []):
                defaults = {"capacity": int(item["capacity"])}
                if "taken" in item:
                    defaults["taken"] = int(item["taken"])
                Slot.objects.update_or_create(date=_required_date(item["date"]), defaults=defaults)
    except (KeyError, TypeError, ValueError, IntegrityError) as error:
        raise invalid({"body": f"Cannot seed: {error!r}"}) from None
    return {
        "accounts": Account.objects.count(),
        "orders": Order.objects.count(),
        "slots": Slot.objects.count(),
    }


def _required_date(value: object) -> date:
    parsed = _parse_date(value)
    if parsed is None:
        raise ValueError(f"{value!r} is not a YYYY-MM-DD date")
    return parsed


def demo_seed(*, today: date) -> None:
    """The demo's data, created only where missing (running it again changes nothing)."""
    with transaction.atomic():
        account, _ = Account.objects.get_or_create(
            account_id="ACC-100", defaults={"name": "Northwind Bakery", "access_active": True}
        )
        delivery = today + timedelta(days=3)
        for offset in range(1, 29):
            day = today + timedelta(days=offset)
            Slot.objects.get_or_create(date=day, defaults={"capacity": 5})
        _, created = Order.objects.get_or_create(
            order_id="ORD-7731",
            defaults={"account": account, "delivery_date": delivery, "version": 1},
        )
        if created:
            Slot.objects.filter(date=delivery, taken__lt=F("capacity")).update(taken=F("taken") + 1)
        # A sandbox order the operator names to Holdfast's capability probe.
        probe_account, _ = Account.objects.get_or_create(
            account_id="ACC-PROBE", defaults={"name": "Probe sandbox", "access_active": True}
        )
        Order.objects.get_or_create(
            order_id="ORD-PROBE",
            defaults={
                "account": probe_account,
                "delivery_date": today + timedelta(days=27),
                "version": 1,
            },
        )


def account_set_access(*, account_id: str, active: bool) -> Account:
    updated = Account.objects.filter(pk=account_id).update(access_active=active)
    if not updated:
        raise Refused(404, "unknown_account", f"There is no account {account_id}.")
    return Account.objects.get(pk=account_id)


def outbox_events() -> list[OutboxEvent]:
    return list(OutboxEvent.objects.all())


def order_state(*, order_id: str) -> dict:
    """Everything a test needs to assert what one order went through."""
    order = order_get(order_id=order_id)
    return {
        "order": order.as_json(),
        "fence_token": order.fence_token,
        "access_active": order.account.access_active,
        "operations": [
            {
                **operation.as_json(),
                "fencing_token": operation.fencing_token,
                "approval_id": operation.approval_id,
                "result": operation.result,
                "created_at": isoformat_z(operation.created_at),
                "searchable_at": isoformat_z(operation.searchable_at),
            }
            for operation in order.operations.all()
        ],
        "events": [event.as_json() for event in OutboxEvent.objects.filter(order_id=order_id)],
        "slots": [slot.as_json() for slot in Slot.objects.all()],
    }
