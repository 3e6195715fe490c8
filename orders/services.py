"""The order system's business rules: the only code that changes orders, slots and fences.

``operation_apply`` is the receiving contract's heart (KINDS-CONTRACT "POST
/orders/{id}/operations"). It never names a change kind's field: the request's ``change`` is
parsed by the handler of its ``kind`` (``orders.kinds``), and then, in the one transaction that
would apply it and in this order, it locks the order row and checks the operation key (a replay
-- answered only once its grant verifies for this key, order and change, expiry aside -- or
``key_reused``), the fencing token against the order's fence, the approval grant (the whole
change), the expected order version, the account's access and that the order is open; then the
kind's own check and its apply. Every refusal raises ``Refused`` and rolls the transaction back,
so a refusal changes nothing -- not even the fence or a slot a kind's check took. A successful
apply raises the fence to the token used, writes the kind's order fields, bumps the version,
records the operation (its change exactly as received) with its first answer and writes the
outbox event, all in that transaction.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Max
from django.utils import timezone

from orders import sql
from orders.exceptions import Refused, invalid
from orders.faults import search_lag_seconds
from orders.grants import Grant, canonical, grant_verify
from orders.kinds import ADDRESS_FIELDS, OPEN, address_errors, exact_date, kind_for, kinds
from orders.models import (
    Account,
    AppliedOperation,
    FaultRule,
    Order,
    OutboxEvent,
    Slot,
    TestingReset,
)

MAX_KEY_LENGTH = 200
CAPABILITIES = {
    "idempotency_keys": True,
    "fencing": True,
    "version_check": True,
    "approval_grants": True,
    "consistent_lookup": True,
    "fence_endpoint": True,
}


def isoformat_z(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _int_at_least(value: object, minimum: int) -> int | None:
    """``value`` when it is a JSON integer (never a boolean) of at least ``minimum``, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        return None
    return value


@dataclass(frozen=True)
class OperationRequest:
    """A well-formed request: ``change`` exactly as received, ``parsed`` its kind's reading."""

    order_id: str
    operation_key: str
    change: dict
    kind: Any
    parsed: dict
    expected_version: int
    fencing_token: int
    approval_grant: str

    @property
    def body_hash(self) -> str:
        """The hash of the operation's intent: order, key, the whole change and the expected
        version.

        The fencing token and the grant identify the attempt and its authority, not the
        operation, so a later attempt that resends the same operation gets the first result.
        """
        intent = {
            "order_id": self.order_id,
            "operation_key": self.operation_key,
            "change": self.change,
            "expected_version": self.expected_version,
        }
        return hashlib.sha256(canonical(intent).encode("utf-8")).hexdigest()


OPERATION_KEY_PATTERN = re.compile(r"[A-Za-z0-9._:-]+")


def _change_parse(change: object, fields: dict[str, str]) -> tuple[Any, dict] | None:
    """The change's handler and parsed fields; a bad field is added to ``fields`` (``None``).

    A kind this system does not accept is ``unsupported_kind`` at once: without its handler
    nothing else of the change can be judged.
    """
    if not isinstance(change, dict):
        fields["change"] = "Must be an object with a kind and that kind's fields."
        return None
    code = change.get("kind")
    if not isinstance(code, str) or not code:
        fields["change.kind"] = "Must be the change's kind (a string)."
        return None
    handler = kind_for(code)
    try:
        return handler, handler.parse(change)
    except Refused as refusal:
        if refusal.code != "invalid_field":
            raise
        fields.update(refusal.fields or {"change": refusal.detail})
        return None


def operation_request_parse(*, order_id: str, body: object) -> OperationRequest:
    """A well-formed request, or ``Refused``: ``unsupported_kind``, or ``invalid_field`` naming
    every bad field (dotted: ``change.address.country``)."""
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
    kind_and_parsed = _change_parse(change, fields)
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
        or kind_and_parsed is None
        or not isinstance(change, dict)
        or expected_version is None
        or token is None
        or grant is None
    ):
        raise invalid(fields)
    handler, parsed = kind_and_parsed
    return OperationRequest(
        order_id=order_id,
        operation_key=key,
        change=change,
        kind=handler,
        parsed=parsed,
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


@dataclass(frozen=True)
class LockedOrder:
    """The order row ``_lock_order`` read (and locked), with its account's access; what a
    change kind's ``check`` and ``apply`` see (``orders.kinds.OrderRow``)."""

    order_id: str
    account_id: str
    status: str
    delivery_date: date
    shipping_address: dict | None
    extra: dict
    version: int
    fence_token: int
    access_active: bool


def _lock_order(order_id: str) -> LockedOrder:
    """The order row, locked until the transaction ends, with its account's access."""
    with connection.cursor() as cursor:
        if connection.features.has_select_for_update_of:
            # Read again when the first read waited for the lock (``sql.LOCK_FRESH_SQL``) or
            # found nothing (an order whose account changed meanwhile is not joined): the
            # second read holds the lock, so it cannot wait and reads what is committed now.
            cursor.execute(sql.LOCK_FRESH_SQL, [order_id])
            row = cursor.fetchone()
            if row is None or not row[-1]:
                cursor.execute(sql.LOCK_FRESH_SQL, [order_id])
                row = cursor.fetchone()
            row = None if row is None else row[:-1]
        else:
            cursor.execute(sql.LOCK_SQL, [order_id])
            row = cursor.fetchone()
    if row is None:
        raise _unknown_order(order_id)
    oid, account_id, status, delivery_date, address, extra, version, fence_token, active = row
    return LockedOrder(
        order_id=oid,
        account_id=account_id,
        status=status,
        delivery_date=sql.from_db(Order, "delivery_date", delivery_date),
        shipping_address=sql.from_db(Order, "shipping_address", address),
        extra=sql.from_db(Order, "extra", extra) or {},
        version=version,
        fence_token=fence_token,
        access_active=bool(active),
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


def _grant_check(request: OperationRequest, *, now: datetime | None) -> Grant:
    """The request's grant, verified against this key, order and whole change (and its expiry
    at ``now`` unless ``None``), or ``Refused`` ``approval_invalid`` / ``approval_expired``."""
    return grant_verify(
        request.approval_grant,
        key=settings.APPROVAL_GRANT_KEY,
        operation_key=request.operation_key,
        order_id=request.order_id,
        change=request.change,
        now=now,
    )


def _operation_apply_locked(request: OperationRequest) -> Outcome:
    order = _lock_order(request.order_id)
    # The clock is read once the lock is held: a request that waited on the lock is judged
    # (grant expiry included) at the moment it can actually apply.
    now = timezone.now()
    idempotent = not settings.ORDERS_DISABLE_IDEMPOTENCY
    fencing = not settings.ORDERS_DISABLE_FENCING

    if idempotent:
        with connection.cursor() as cursor:
            cursor.execute(sql.APPLIED_SQL, [request.operation_key])
            existing = cursor.fetchone()
        if existing is not None:
            body_hash, result = existing
            if body_hash != request.body_hash:
                raise _key_reused(request.operation_key)
            # A replay answers only to the authority that could have applied it: the grant
            # must verify and name this key, order and change. Not its expiry: the operation
            # was applied while the grant was valid, and a resend may come after.
            _grant_check(request, now=None)
            first = sql.from_db(AppliedOperation, "result", result)
            return Outcome(200, {**first, "replayed": True})

    if fencing and request.fencing_token < order.fence_token:
        raise Refused(
            409,
            "stale_fencing_token",
            f"Fencing token {request.fencing_token} is below this order's fence "
            f"({order.fence_token}).",
        )
    # Unsafe test mode: the grant's expiry is not judged (signature and change still are).
    grant = _grant_check(request, now=None if settings.ORDERS_UNSAFE_SKIP_APPROVAL_CHECK else now)
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
    if order.status != OPEN:
        raise Refused(
            409,
            "order_not_open",
            f"Order {order.order_id} is {order.status}: only an open order can be changed.",
        )
    request.kind.check(order, request.parsed)
    updates = request.kind.apply(order, request.parsed)

    fence_token = max(order.fence_token, request.fencing_token) if fencing else order.fence_token
    version = order.version + 1
    names = tuple(updates)
    with connection.cursor() as cursor:
        cursor.execute(
            sql.order_update_sql(names),
            [
                fence_token,
                version,
                *(sql.db_value(Order, name, updates[name]) for name in names),
                order.order_id,
            ],
        )
        sql.saved(cursor, order.order_id)

        result = {
            "operation_key": request.operation_key,
            "status": "applied",
            "order_version": version,
        }
        if idempotent:
            searchable_at = now + timedelta(seconds=search_lag_seconds())
            cursor.execute(
                sql.APPLIED_INSERT_SQL,
                [
                    request.operation_key,
                    order.order_id,
                    request.body_hash,
                    sql.db_value(AppliedOperation, "change", request.change),
                    "applied",
                    version,
                    request.fencing_token,
                    grant.approval_id,
                    sql.db_value(AppliedOperation, "result", result),
                    sql.db_value(AppliedOperation, "created_at", now),
                    sql.db_value(AppliedOperation, "searchable_at", searchable_at),
                ],
            )
        _event_record(cursor, order_id=order.order_id, order_version=version, now=now)
    return Outcome(201, result)


def _event_record(cursor, *, order_id: str, order_version: int, now: datetime) -> None:
    """The outbox event of a changed order, written in its transaction (``cursor``)."""
    event_id = str(uuid.uuid4())
    payload = {
        "event_id": event_id,
        "type": "order.updated",
        "order_id": order_id,
        "order_version": order_version,
        "occurred_at": isoformat_z(now),
    }
    cursor.execute(
        sql.EVENT_INSERT_SQL,
        [
            event_id,
            "order.updated",
            order_id,
            order_version,
            sql.db_value(OutboxEvent, "occurred_at", now),
            sql.db_value(OutboxEvent, "payload", payload),
            None,
            0,
            sql.db_value(OutboxEvent, "next_attempt_at", now),
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
                cursor.execute(sql.FENCE_UPDATE_SQL, [token, order.order_id])
                sql.saved(cursor, order.order_id)
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


def order_json(*, order_id: str) -> dict:
    """``GET /orders/{id}``: the contract's fields, plus each plug-in kind's own fields (which
    never replace a contract field)."""
    order = order_get(order_id=order_id)
    added: dict[str, Any] = {}
    for handler in kinds().values():
        order_fields = getattr(handler, "order_fields", None)
        if order_fields is not None:
            added.update(order_fields(order))
    return {**added, **order.as_json()}


def capabilities_json() -> dict:
    """What this receiver claims (Holdfast probes each claim): the safeguards, the change kinds
    it accepts (in a stable order) and the countries it ships to."""
    return {
        **CAPABILITIES,
        "change_kinds": list(kinds()),
        "ship_to_countries": sorted(settings.ORDERS_SHIP_TO_COUNTRIES),
    }


def slot_get(*, day: str) -> dict:
    """The slot for a date; a date without a slot row has capacity 0 (nothing can move there)."""
    parsed = exact_date(day)
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
    """Delete every row this system holds, and mark the reset (``TestingReset``): a request an
    injected latency still holds from before it is refused when it wakes (``faults``)."""
    with transaction.atomic():
        OutboxEvent.objects.all().delete()
        AppliedOperation.objects.all().delete()
        Order.objects.all().delete()
        Account.objects.all().delete()
        Slot.objects.all().delete()
        FaultRule.objects.all().delete()
        TestingReset.objects.all().delete()
        TestingReset.objects.create()  # a new id: ids are never reused


# Every seeded order has an address unless the seed says ``"shipping_address": null``.
SEED_ADDRESS = {
    "name": "Goods In",
    "line1": "1 Dock Road",
    "line2": "",
    "city": "Bristol",
    "postal_code": "BS1 6XX",
    "country": "GB",
}


def _seed_address(value: object) -> dict | None:
    """A stored address (``line2`` "" when absent) from a seed, or ``ValueError``."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"shipping_address {value!r} is not an object or null")
    errors = address_errors(value, "shipping_address")
    if errors:
        raise ValueError("; ".join(f"{name}: {text}" for name, text in errors.items()))
    return {name: value.get(name, "") for name in ADDRESS_FIELDS}


def _seed_status(value: object) -> str:
    if value not in Order.Status.values:
        raise ValueError(f"status {value!r} is not one of {', '.join(Order.Status.values)}")
    return str(value)


def testing_seed(*, data: object) -> dict:
    """Upsert ``{"accounts": [...], "orders": [...], "slots": [...]}`` (each list optional).

    An order is ``{order_id, account_id, delivery_date, version?, status?, shipping_address?}``:
    a new order is ``open`` with ``SEED_ADDRESS`` unless it says otherwise; an existing one
    changes only what the item names. Nothing here bumps a version or writes an event.
    """
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
                defaults: dict[str, Any] = {
                    "account_id": item["account_id"],
                    "delivery_date": _required_date(item["delivery_date"]),
                }
                if "version" in item:
                    defaults["version"] = int(item["version"])
                if "status" in item:
                    defaults["status"] = _seed_status(item["status"])
                if "shipping_address" in item:
                    defaults["shipping_address"] = _seed_address(item["shipping_address"])
                Order.objects.update_or_create(
                    order_id=item["order_id"],
                    defaults=defaults,
                    create_defaults={"shipping_address": dict(SEED_ADDRESS), **defaults},
                )
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


def testing_order_set(*, order_id: str, data: object) -> Order:
    """Change an order as the world outside Holdfast would: ``{status?, shipping_address?,
    bump_version?}``. By default the version moves on by one and an ``order.updated`` event is
    written, like any change at the source; ``"bump_version": false`` changes the fields only
    (to reach the receiver's own refusals, e.g. ``order_not_open``, at an unchanged version)."""
    if not isinstance(data, dict):
        raise invalid({"body": "Must be a JSON object."})
    updates: dict[str, Any] = {}
    try:
        if "status" in data:
            updates["status"] = _seed_status(data["status"])
        if "shipping_address" in data:
            updates["shipping_address"] = _seed_address(data["shipping_address"])
    except ValueError as error:
        raise invalid({"body": str(error)}) from None
    bump = data.get("bump_version", True)
    if not updates or not isinstance(bump, bool):
        raise invalid({"body": "Name status and/or shipping_address; bump_version is a boolean."})
    with transaction.atomic():
        order = Order.objects.select_for_update().filter(pk=order_id).first()
        if order is None:
            raise _unknown_order(order_id)
        for name, value in updates.items():
            setattr(order, name, value)
        if bump:
            order.version += 1
            with connection.cursor() as cursor:
                _event_record(
                    cursor, order_id=order_id, order_version=order.version, now=timezone.now()
                )
        order.save(update_fields=[*updates, "version"])
    return order


def _required_date(value: object) -> date:
    parsed = exact_date(value)
    if parsed is None:
        raise ValueError(f"{value!r} is not a YYYY-MM-DD date")
    return parsed


DEMO_ACCOUNT = ("ACC-100", "Northwind Traders")
# (order, days from today to its delivery, status, address): KINDS-CONTRACT "Demo data".
DEMO_ORDERS = (
    (
        "ORD-7731",
        3,
        "open",
        {
            "name": "Northwind Traders",
            "line1": "4 Wapping Wharf",
            "line2": "",
            "city": "Bristol",
            "postal_code": "BS1 6WP",
            "country": "GB",
        },
    ),
    (
        "ORD-7732",
        4,
        "open",
        {
            "name": "Dana Whitfield",
            "line1": "12 Harbour Street",
            "line2": "",
            "city": "Bristol",
            "postal_code": "BS1 4DJ",
            "country": "GB",
        },
    ),
    (
        "ORD-7733",
        5,
        "open",
        {
            "name": "Northwind Traders",
            "line1": "4 Wapping Wharf",
            "line2": "Loading bay 2",
            "city": "Bristol",
            "postal_code": "BS1 6WP",
            "country": "GB",
        },
    ),
    (
        "ORD-7734",
        6,
        "shipped",
        {
            "name": "Sam Okafor",
            "line1": "7 Canal Row",
            "line2": "",
            "city": "Bath",
            "postal_code": "BA1 1AA",
            "country": "GB",
        },
    ),
)
PROBE_ORDER = ("ORD-PROBE", "ACC-PROBE", 27)


def _demo_order(*, order_id: str, account: Account, delivery: date, status: str, address: dict):
    """Create the order (taking its slot place) if missing; give an old one its address."""
    order, created = Order.objects.get_or_create(
        order_id=order_id,
        defaults={
            "account": account,
            "delivery_date": delivery,
            "version": 1,
            "status": status,
            "shipping_address": address,
        },
    )
    if created:
        Slot.objects.filter(date=delivery, taken__lt=F("capacity")).update(taken=F("taken") + 1)
    elif order.shipping_address is None:
        # An order seeded before orders carried addresses: every demo order has one.
        Order.objects.filter(pk=order_id).update(shipping_address=address)


def demo_seed(*, today: date) -> None:
    """The demo's data (KINDS-CONTRACT "Demo data"), created only where missing: running it
    again changes nothing a demo did."""
    with transaction.atomic():
        account, _ = Account.objects.get_or_create(
            account_id=DEMO_ACCOUNT[0], defaults={"name": DEMO_ACCOUNT[1], "access_active": True}
        )
        for offset in range(1, 29):
            day = today + timedelta(days=offset)
            Slot.objects.get_or_create(date=day, defaults={"capacity": 5})
        for order_id, days, status, address in DEMO_ORDERS:
            _demo_order(
                order_id=order_id,
                account=account,
                delivery=today + timedelta(days=days),
                status=status,
                address=address,
            )
        # A sandbox order the operator names to Holdfast's capability probe.
        probe_id, probe_account_id, probe_days = PROBE_ORDER
        probe_account, _ = Account.objects.get_or_create(
            account_id=probe_account_id, defaults={"name": "Probe sandbox", "access_active": True}
        )
        _demo_order(
            order_id=probe_id,
            account=probe_account,
            delivery=today + timedelta(days=probe_days),
            status="open",
            address={**SEED_ADDRESS, "name": "Probe sandbox"},
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
