"""The order cancellation kind: cancel an open order. It cannot be undone.

``{"kind": "order_cancellation", "reason_code": "customer_request" | "duplicate" |
"fraud_suspected" | "other"}``. The receiver refuses an order that is not open (``409
order_not_open``); applied, the order's status becomes ``cancelled`` (and the order system frees
what its delivery held). Irreversible: no reversal exists, and the proposal page, the approval
and the customer's mail say so before anyone approves. The capability probe never applies one:
it is verified by refusals only (a stale token, an expired grant, a stale version).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import forms
from rest_framework import serializers

from cases.kinds import ChangeKind, OrderReader, OrderView, unknown_keys

REASONS = {
    "customer_request": "the customer asked for it",
    "duplicate": "a duplicate order",
    "fraud_suspected": "fraud is suspected",
    "other": "another reason",
}


class OrderCancellationForm(forms.Form):
    reason_code = forms.ChoiceField(
        label="Why the order is cancelled",
        choices=[(code, words.capitalize()) for code, words in REASONS.items()],
        help_text="Cancelling cannot be undone.",
    )


class OrderCancellationChangeSerializer(serializers.Serializer):
    """``change`` of the order cancellation kind (irreversible)."""

    reason_code = serializers.ChoiceField(choices=list(REASONS))


class OrderCancellation(ChangeKind):
    code = "order_cancellation"
    label = "Order cancellation"
    key_prefix = "CANCEL"
    irreversible = True
    form = OrderCancellationForm
    serializer = OrderCancellationChangeSerializer

    def validate(self, change: Mapping[str, Any]) -> dict[str, list[str]]:
        errors = unknown_keys(change, ["reason_code"])
        if change.get("reason_code") not in REASONS:
            errors["change.reason_code"] = [f"One of {', '.join(REASONS)}."]
        return errors

    def canonical(self, change: Mapping[str, Any]) -> dict[str, Any]:
        return {"kind": self.code, "reason_code": str(change["reason_code"])}

    def describe(self, change: Mapping[str, Any]) -> str:
        why = REASONS.get(str(change.get("reason_code")), "no reason given")
        return f"the order is cancelled ({why}); this cannot be undone"

    def seen(self, order: OrderView) -> dict[str, Any]:
        return {"status": order.status}

    def describe_seen(self, seen: Mapping[str, Any] | None) -> str:
        status = (seen or {}).get("status")
        return f"order {status}" if status else "order status not on record"

    def probe_changes(self, client: OrderReader, order: OrderView) -> list[dict[str, Any]]:
        return [{"kind": self.code, "reason_code": "other"}]

    def json_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["kind", "reason_code"],
            "additionalProperties": False,
            "properties": {
                "kind": {"const": self.code},
                "reason_code": {"enum": list(REASONS)},
            },
        }

    def from_form(self, cleaned_data: Mapping[str, Any]) -> dict[str, Any]:
        return {"kind": self.code, "reason_code": cleaned_data["reason_code"]}

    def form_initial(self, change: Mapping[str, Any] | None) -> dict[str, Any]:
        reason = (change or {}).get("reason_code")
        return {"reason_code": reason} if reason in REASONS else {}
