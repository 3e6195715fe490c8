"""A test-only fourth change kind on Holdfast's side: a gift message on an order.

Its receiver handler is ``tests/support/orders_gift_message_kind.py`` (the order system loads it
through ``ORDERS_EXTRA_KINDS``). Together they are the worked example of README "Change kinds":
what adding a kind takes -- this module (the kind, its admin form, its API serializer) and the
receiver's handler -- and no core file. ``tests/reconciliation/test_fourth_kind.py`` registers
it (``cases.kinds.register``) and runs it through the whole safety core.

``{"kind": "gift_message", "message": "<1..200 characters, no control characters>"}``.
Reversible: back to the message the order had (an order without one has nothing to go back to).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any, ClassVar

from django import forms
from rest_framework import serializers

from cases.kinds import ChangeKind, ErrorClass, OrderReader, OrderView, unknown_keys

MAX_LENGTH = 200


def message_errors(message: object) -> list[str]:
    if not isinstance(message, str) or not 1 <= len(message) <= MAX_LENGTH:
        return [f"1 to {MAX_LENGTH} characters."]
    if any(unicodedata.category(char) == "Cc" for char in message):
        return ["No control characters."]
    return []


class GiftMessageForm(forms.Form):
    message = forms.CharField(label="Gift message", max_length=MAX_LENGTH)


class GiftMessageChangeSerializer(serializers.Serializer):
    message = serializers.CharField(max_length=MAX_LENGTH)


class GiftMessage(ChangeKind):
    code = "gift_message"
    label = "Gift message"
    key_prefix = "GIFT"
    # The receiver refuses a message it cannot print with invalid_field: already invalid input.
    refusals: ClassVar[Mapping[str, ErrorClass]] = {}
    form = GiftMessageForm
    serializer = GiftMessageChangeSerializer

    def validate(self, change: Mapping[str, Any]) -> dict[str, list[str]]:
        errors = unknown_keys(change, ["message"])
        if messages := message_errors(change.get("message")):
            errors["change.message"] = messages
        return errors

    def canonical(self, change: Mapping[str, Any]) -> dict[str, Any]:
        return {"kind": self.code, "message": str(change["message"])}

    def describe(self, change: Mapping[str, Any]) -> str:
        return f"the gift message reads {change.get('message')!r}"

    def seen(self, order: OrderView) -> dict[str, Any]:
        return {"message": order.fields.get("gift_message") or ""}

    def describe_seen(self, seen: Mapping[str, Any] | None) -> str:
        message = (seen or {}).get("message")
        return f"gift message {message!r}" if message else "no gift message"

    def reversal(self, seen: Mapping[str, Any] | None) -> dict[str, Any] | None:
        message = (seen or {}).get("message")
        return None if message_errors(message) else {"kind": self.code, "message": message}

    def probe_changes(self, client: OrderReader, order: OrderView) -> list[dict[str, Any]]:
        return [{"kind": self.code, "message": f"Holdfast probe {n}"} for n in (1, 2)]

    def json_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["kind", "message"],
            "additionalProperties": False,
            "properties": {
                "kind": {"const": self.code},
                "message": {"type": "string", "minLength": 1, "maxLength": MAX_LENGTH},
            },
        }

    def from_form(self, cleaned_data: Mapping[str, Any]) -> dict[str, Any]:
        return {"kind": self.code, "message": cleaned_data["message"]}
