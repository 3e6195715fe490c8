"""A test-only fourth change kind for the reference order system: a gift message on an order.

Loaded by the order system process when ``ORDERS_EXTRA_KINDS`` names this module
(``OrderSystemProcess(extra_kinds=[GIFT_MESSAGE_KIND])``); never in production, which refuses
plug-in kinds. It shows what a kind's receiver handler is: ``code``, ``parse``, ``check``,
``apply`` and ``order_fields`` (``orders/kinds.py``), with its value kept in the order's
``extra`` and shown as a top-level ``gift_message`` field of ``GET /orders/{id}``.

``{"kind": "gift_message", "message": "<1..200 characters, no control characters>"}``; a
message containing "forbidden" is refused by its own check (``422 invalid_field``), so a test
can reach a kind's own refusal.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from orders.exceptions import invalid

MAX_LENGTH = 200


class GiftMessage:
    code = "gift_message"

    def parse(self, change: dict[str, Any]) -> dict:
        fields = {
            f"change.{name}": "Unknown field." for name in change if name not in {"kind", "message"}
        }
        message = change.get("message")
        if not isinstance(message, str) or not 1 <= len(message) <= MAX_LENGTH:
            fields["change.message"] = f"Must be 1 to {MAX_LENGTH} characters."
        elif any(unicodedata.category(char) == "Cc" for char in message):
            fields["change.message"] = "Must not contain control characters."
        if fields:
            raise invalid(fields)
        return {"message": message}

    def check(self, order: Any, change: dict) -> None:
        if "forbidden" in change["message"].lower():
            raise invalid({"change.message": "This message cannot be printed on a gift card."})

    def apply(self, order: Any, change: dict) -> dict[str, Any]:
        return {"extra": {**order.extra, "gift_message": change["message"]}}

    def order_fields(self, order: Any) -> dict[str, Any]:
        return {"gift_message": order.extra.get("gift_message", "")}


HANDLER = GiftMessage
