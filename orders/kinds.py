"""Change kinds: one handler per kind behind one small interface, and the registry of them.

The core (``orders.services.operation_apply``) never names a kind's field. It parses the
request, finds the handler for ``change["kind"]`` and, inside the one applying transaction and
after the generic checks (key, fence, grant, version, access, the order being open), asks it:

- ``parse(change) -> dict``: the change's own fields, validated (``Refused`` ``invalid_field``
  with dotted names such as ``change.address.country``); runs before the order is locked;
- ``check(order, parsed)``: the kind's own refusal, if any (runs under the order's lock);
- ``apply(order, parsed) -> dict``: the order fields it sets (``orders.sql.UPDATABLE_ORDER_FIELDS``;
  a plug-in kind keeps its values under ``extra``). It may touch slots;
- ``order_fields(order) -> dict`` (optional): top-level fields a plug-in kind adds to
  ``GET /orders/{id}``.

``check`` and ``apply`` may write (a slot taken, a slot freed): a refusal anywhere rolls the
whole transaction back, so a refused request still changes nothing.

The registry holds the enabled built-in kinds (``ORDERS_CHANGE_KINDS``) and the plug-in handler
modules named in ``ORDERS_EXTRA_KINDS`` (each module has a ``HANDLER``: an instance, or a class
made with no arguments), in that order; it is read from the settings on each use and cached.
"""

from __future__ import annotations

import functools
import importlib
import re
import unicodedata
from collections.abc import Mapping
from datetime import date
from typing import Any, Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from orders.exceptions import Refused, invalid
from orders.sql import slot_free, slot_take

OPEN = "open"
CANCELLED = "cancelled"


class OrderRow(Protocol):
    """What a handler may read of an order (the locked row, or the model for ``GET``)."""

    order_id: str
    account_id: str
    status: str
    delivery_date: date
    shipping_address: dict | None
    extra: dict
    version: int


class ChangeKind:
    """A change kind's receiver handler. Subclasses set ``code`` and implement ``parse`` and
    ``apply``; ``check`` and ``order_fields`` default to nothing."""

    code: str = ""

    def parse(self, change: Mapping[str, Any]) -> dict:
        raise NotImplementedError

    def check(self, order: OrderRow, change: dict) -> None:
        return None

    def apply(self, order: OrderRow, change: dict) -> dict[str, Any]:
        raise NotImplementedError

    def order_fields(self, order: OrderRow) -> dict[str, Any]:
        return {}


# --- shared validation ---------------------------------------------------------------------


def unknown_fields(data: Mapping[str, Any], allowed: set[str], prefix: str) -> dict[str, str]:
    """``{"<prefix>.<name>": "Unknown field."}`` for every key of ``data`` not in ``allowed``."""
    return {f"{prefix}.{name}": "Unknown field." for name in data if name not in allowed}


def has_control_characters(text: str) -> bool:
    """True when ``text`` holds a control character (Unicode category Cc: C0, DEL, C1)."""
    return any(unicodedata.category(char) == "Cc" for char in text)


def exact_date(value: object) -> date | None:
    """A date only from its exact ``YYYY-MM-DD`` spelling."""
    if not isinstance(value, str):
        return None
    try:
        parsed = date.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.isoformat() == value else None


# --- the built-in kinds ----------------------------------------------------------------------


class DeliveryDate(ChangeKind):
    """``{"kind": "delivery_date", "delivery_date": "YYYY-MM-DD"}``: move the order to a date
    whose slot has room. ``check`` takes the new date's place (one conditional update, so no
    other writer fills it in between); ``apply`` frees the old date's place. The same date again
    takes and frees nothing."""

    code = "delivery_date"

    def parse(self, change: Mapping[str, Any]) -> dict:
        fields = unknown_fields(change, {"kind", "delivery_date"}, "change")
        day = exact_date(change.get("delivery_date"))
        if day is None:
            fields["change.delivery_date"] = "Must be a date written YYYY-MM-DD."
        if fields or day is None:
            raise invalid(fields)
        return {"delivery_date": day}

    def check(self, order: OrderRow, change: dict) -> None:
        day = change["delivery_date"]
        if day != order.delivery_date and not slot_take(day):
            raise Refused(409, "slot_unavailable", f"No delivery slot is free on {day}.")

    def apply(self, order: OrderRow, change: dict) -> dict[str, Any]:
        if change["delivery_date"] != order.delivery_date:
            slot_free(order.delivery_date)
        return {"delivery_date": change["delivery_date"]}


ADDRESS_TEXT_LIMITS = {"name": (1, 100), "line1": (1, 100), "line2": (0, 100), "city": (1, 100)}
ADDRESS_FIELDS = (*ADDRESS_TEXT_LIMITS, "postal_code", "country")
POSTAL_CODE = re.compile(r"[A-Za-z0-9 -]{1,20}")
COUNTRY = re.compile(r"[A-Z]{2}")


def address_errors(address: Mapping[str, Any], prefix: str) -> dict[str, str]:
    """Every bad field of a shipping address, by dotted name (the contract's limits)."""
    fields = unknown_fields(address, set(ADDRESS_FIELDS), prefix)
    for name in ADDRESS_FIELDS:
        value = address.get(name)
        where = f"{prefix}.{name}"
        if value is None and name == "line2":
            continue
        if value is None:
            fields[where] = "Required."
        elif not isinstance(value, str):
            fields[where] = "Must be a string."
        elif has_control_characters(value):
            fields[where] = "Must not contain control characters."
        elif name in ADDRESS_TEXT_LIMITS:
            low, high = ADDRESS_TEXT_LIMITS[name]
            if not low <= len(value) <= high:
                fields[where] = f"Must be {low} to {high} characters."
            elif low and not value.strip():
                fields[where] = "Must not be blank."
        elif name == "postal_code" and not POSTAL_CODE.fullmatch(value):
            fields[where] = "Must be 1 to 20 letters, digits, spaces or '-'."
        elif name == "country" and not COUNTRY.fullmatch(value):
            fields[where] = "Must be two capital letters (ISO 3166-1 alpha-2), e.g. GB."
    return fields


class ShippingAddress(ChangeKind):
    """``{"kind": "shipping_address", "address": {name, line1, line2?, city, postal_code,
    country}}``: replace the order's address, only with a country this system ships to
    (``ORDERS_SHIP_TO_COUNTRIES``). The order keeps the address with ``line2`` "" when the
    change has none."""

    code = "shipping_address"

    def parse(self, change: Mapping[str, Any]) -> dict:
        fields = unknown_fields(change, {"kind", "address"}, "change")
        address = change.get("address")
        if not isinstance(address, dict):
            fields["change.address"] = (
                "Must be an object with name, line1, city, postal_code and country "
                "(line2 optional)."
            )
        else:
            fields.update(address_errors(address, "change.address"))
        if fields or not isinstance(address, dict):
            raise invalid(fields)
        return {"address": {name: address.get(name, "") for name in ADDRESS_FIELDS}}

    def check(self, order: OrderRow, change: dict) -> None:
        country = change["address"]["country"]
        if country not in settings.ORDERS_SHIP_TO_COUNTRIES:
            raise invalid({"change.address.country": f"We do not ship to {country}."})

    def apply(self, order: OrderRow, change: dict) -> dict[str, Any]:
        return {"shipping_address": change["address"]}


REASON_CODES = ("customer_request", "duplicate", "fraud_suspected", "other")


class OrderCancellation(ChangeKind):
    """``{"kind": "order_cancellation", "reason_code": ...}``: the order becomes ``cancelled``
    (it can never change again) and its delivery date's slot place is given back."""

    code = "order_cancellation"

    def parse(self, change: Mapping[str, Any]) -> dict:
        fields = unknown_fields(change, {"kind", "reason_code"}, "change")
        reason = change.get("reason_code")
        if reason not in REASON_CODES:
            fields["change.reason_code"] = f"Must be one of {', '.join(REASON_CODES)}."
        if fields:
            raise invalid(fields)
        return {"reason_code": reason}

    def apply(self, order: OrderRow, change: dict) -> dict[str, Any]:
        slot_free(order.delivery_date)
        return {"status": CANCELLED}


BUILT_IN: dict[str, type[ChangeKind]] = {
    kind.code: kind for kind in (DeliveryDate, ShippingAddress, OrderCancellation)
}


# --- the registry ----------------------------------------------------------------------------


def _plug_in(path: str) -> Any:
    """The ``HANDLER`` of the module at dotted ``path`` (a class is instantiated)."""
    try:
        module = importlib.import_module(path)
    except ImportError as error:
        raise ImproperlyConfigured(f"ORDERS_EXTRA_KINDS: cannot import {path}: {error}") from None
    handler = getattr(module, "HANDLER", None)
    if isinstance(handler, type):
        handler = handler()
    missing = [
        name for name in ("parse", "check", "apply") if not callable(getattr(handler, name, None))
    ]
    code = getattr(handler, "code", None)
    if handler is None or missing or not isinstance(code, str) or not code:
        raise ImproperlyConfigured(
            f"ORDERS_EXTRA_KINDS: {path}.HANDLER must have a code and parse, check and apply "
            "(see orders.kinds.ChangeKind)."
        )
    return handler


@functools.lru_cache(maxsize=8)
def _registry(built_in: tuple[str, ...], extra: tuple[str, ...]) -> dict[str, Any]:
    unknown = sorted(set(built_in) - set(BUILT_IN))
    if unknown:
        raise ImproperlyConfigured(f"ORDERS_CHANGE_KINDS: {', '.join(unknown)} is not built in.")
    handlers: dict[str, Any] = {code: kind() for code, kind in BUILT_IN.items() if code in built_in}
    for path in extra:
        handler = _plug_in(path)
        if handler.code in handlers:
            raise ImproperlyConfigured(
                f"ORDERS_EXTRA_KINDS: {path} registers {handler.code}, which is already a kind."
            )
        handlers[handler.code] = handler
    return handlers


def kinds() -> dict[str, Any]:
    """The accepted kinds by code, in a stable order: the enabled built-ins in ``BUILT_IN``'s
    order, then the plug-ins in the settings' order."""
    return _registry(tuple(settings.ORDERS_CHANGE_KINDS), tuple(settings.ORDERS_EXTRA_KINDS))


def kind_for(code: str) -> Any:
    """The handler for ``code``, or ``Refused`` ``422 unsupported_kind`` naming the accepted."""
    handler = kinds().get(code)
    if handler is None:
        accepted = ", ".join(kinds()) or "none"
        raise Refused(
            422,
            "unsupported_kind",
            f"This order system does not accept the change kind {code[:60]!r}; it accepts: "
            f"{accepted}.",
        )
    return handler
