"""The delivery date kind: move an order's delivery to another date (case D-41).

``{"kind": "delivery_date", "delivery_date": "YYYY-MM-DD"}``. The receiver also checks, in the
applying transaction, that the new date's delivery slot has room (``409 slot_unavailable``,
a conflict a person looks at). Reversible: a new proposal back to the date seen before.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Protocol, cast

from django import forms
from django.conf import settings
from django.utils import timezone
from rest_framework import serializers

from cases.kinds import ChangeKind, ErrorClass, OrderReader, OrderView, unknown_keys

FIELD = "delivery_date"
# How far ahead the probe looks for a date with room.
PROBE_SEARCH_DAYS = 14


class Slot(Protocol):
    @property
    def capacity(self) -> int: ...

    @property
    def taken(self) -> int: ...

    @property
    def free(self) -> int: ...


class SlotReader(Protocol):
    """The order system's client reads a date's delivery slot (CONTRACT §1 ``GET /slots``)."""

    def get_slot(self, date: dt.date) -> Slot: ...


def delivery_horizon(today: dt.date | None = None) -> tuple[dt.date, dt.date]:
    """The earliest and latest delivery date accepted today (both inclusive)."""
    today = today or timezone.localdate()
    return today, today + dt.timedelta(days=settings.DELIVERY_DATE_HORIZON_DAYS)


def delivery_date_errors(value: object, *, today: dt.date | None = None) -> list[str]:
    """A delivery date: not in the past and within ``DELIVERY_DATE_HORIZON_DAYS``."""
    if not isinstance(value, dt.date) or isinstance(value, dt.datetime):
        return ["Must be a date."]
    earliest, latest = delivery_horizon(today)
    if value < earliest:
        return [f"{value.isoformat()} is in the past; the earliest is {earliest.isoformat()}."]
    if value > latest:
        return [
            f"{value.isoformat()} is beyond the {settings.DELIVERY_DATE_HORIZON_DAYS}-day "
            f"horizon; the latest is {latest.isoformat()}."
        ]
    return []


def _date(value: object) -> dt.date | None:
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value
    if isinstance(value, str) and len(value) == 10:
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            return None
    return None


class DeliveryDateForm(forms.Form):
    delivery_date = forms.DateField(
        label="New delivery date",
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="Today or later, within the delivery horizon.",
    )

    def clean_delivery_date(self) -> dt.date:
        value = self.cleaned_data["delivery_date"]
        if messages := delivery_date_errors(value):
            raise forms.ValidationError(messages)
        return value


class DeliveryDateChangeSerializer(serializers.Serializer):
    """``change`` of the delivery date kind."""

    delivery_date = serializers.DateField(
        help_text="YYYY-MM-DD: today or later, within the delivery horizon "
        "(DELIVERY_DATE_HORIZON_DAYS)."
    )


class DeliveryDate(ChangeKind):
    code = "delivery_date"
    label = "Delivery date"
    key_prefix = "DATE"
    refusals = {"slot_unavailable": ErrorClass.CONFLICT}
    form = DeliveryDateForm
    serializer = DeliveryDateChangeSerializer
    # Before change kinds, ``POST /api/cases/`` asked for a date alone (deprecated).
    legacy_intake = "requested_date"

    def validate(self, change: Mapping[str, Any]) -> dict[str, list[str]]:
        errors = unknown_keys(change, [FIELD])
        value = change.get(FIELD)
        date = _date(value)
        if value is None:
            errors[f"change.{FIELD}"] = ["Required: the new delivery date (YYYY-MM-DD)."]
        elif date is None:
            errors[f"change.{FIELD}"] = [f"{str(value)[:40]!r} is not a YYYY-MM-DD date."]
        elif messages := delivery_date_errors(date):
            errors[f"change.{FIELD}"] = messages
        return errors

    def canonical(self, change: Mapping[str, Any]) -> dict[str, Any]:
        date = _date(change[FIELD])
        if date is None:
            raise ValueError(f"not a delivery date change: {change!r}")
        return {"kind": self.code, FIELD: date.isoformat()}

    def recorded(self, found: Mapping[str, Any]) -> Mapping[str, Any]:
        # Records older than change kinds hold the date alone, without "kind".
        if "kind" not in found and set(found) == {FIELD}:
            return {"kind": self.code, **found}
        return found

    def describe(self, change: Mapping[str, Any]) -> str:
        date = _date(change.get(FIELD))
        return f"the delivery moves to {date:%A %d %B %Y}" if date else "the delivery moves"

    def seen(self, order: OrderView) -> dict[str, Any]:
        return {FIELD: order.fields.get(FIELD)}

    def describe_seen(self, seen: Mapping[str, Any] | None) -> str:
        date = _date((seen or {}).get(FIELD))
        return f"delivery on {date:%a %Y-%m-%d}" if date else "no delivery date on record"

    def holds(self, seen: Mapping[str, Any], change: Mapping[str, Any]) -> bool:
        date = _date(seen.get(FIELD))
        return date is not None and date == _date(change.get(FIELD))

    def advisory(self, client: OrderReader, order: OrderView, change: Mapping[str, Any]) -> str:
        date = _date(change[FIELD])
        assert date is not None  # noqa: S101 - a stored change is canonical
        slot = cast(SlotReader, client).get_slot(date)
        notes = [f"Slot {date:%Y-%m-%d}: {slot.taken} of {slot.capacity} taken"]
        if slot.free <= 0:
            # "0 of 0 taken" read as free: the approver is told what the order system will say.
            notes.append("no room left: the order system refuses it unless a place frees up")
        if general := super().advisory(client, order, change):
            notes.append(general)
        return "; ".join(notes)

    def reversal(self, seen: Mapping[str, Any] | None) -> dict[str, Any] | None:
        date = _date((seen or {}).get(FIELD))
        return None if date is None else {"kind": self.code, FIELD: date.isoformat()}

    def probe_changes(self, client: OrderReader, order: OrderView) -> list[dict[str, Any]]:
        """Two dates with room in the next two weeks, other than the order's own; the second
        falls back to the order's date, whose slot the first change frees."""
        current = _date(order.fields.get(FIELD))
        today = timezone.localdate()
        found: list[dt.date] = []
        for offset in range(1, PROBE_SEARCH_DAYS + 1):
            date = today + dt.timedelta(days=offset)
            if date != current and cast(SlotReader, client).get_slot(date).free > 0:
                found.append(date)
                if len(found) == 2:
                    break
        if not found:
            return []
        if len(found) == 1:
            if current is None:
                return []
            found.append(current)
        return [{"kind": self.code, FIELD: date.isoformat()} for date in found]

    def json_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["kind", FIELD],
            "additionalProperties": False,
            "properties": {
                "kind": {"const": self.code},
                FIELD: {"type": "string", "format": "date"},
            },
        }

    def from_form(self, cleaned_data: Mapping[str, Any]) -> dict[str, Any]:
        return {"kind": self.code, FIELD: cleaned_data[FIELD].isoformat()}

    def form_initial(self, change: Mapping[str, Any] | None) -> dict[str, Any]:
        date = _date((change or {}).get(FIELD))
        return {FIELD: date} if date else {}

    def legacy_intake_field(self) -> serializers.Field:
        return serializers.DateField(
            help_text='Deprecated: send kind "delivery_date" and change '
            '{"delivery_date": …} instead. The new delivery date (YYYY-MM-DD).'
        )

    def from_legacy(self, value: Any) -> dict[str, Any]:
        return {"kind": self.code, FIELD: value.isoformat()}
