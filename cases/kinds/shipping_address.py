"""The shipping address kind: send an order to another address.

``{"kind": "shipping_address", "address": {"name", "line1", "line2"?, "city", "postal_code",
"country"}}``. The canonical form strips surrounding white space, omits an empty ``line2`` and
upper-cases ``country`` (ISO 3166-1 alpha-2). Both sides enforce the same limits: name, line1,
line2 and city at most 100 characters (all but line2 at least one), a postal code of 1–20
letters, digits, spaces and hyphens, a country of exactly two letters, no control character
anywhere. The receiver also refuses, in the applying transaction, a country it does not ship to
(``422 invalid_field`` on ``change.address.country``) and an order that is not open. Reversible:
a new proposal back to the address seen before.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from django import forms
from rest_framework import serializers

from cases.kinds import ChangeKind, OrderReader, OrderView, unknown_keys
from cases.validation import BIDI_CONTROLS

TEXT_MAX = 100
POSTAL_MAX = 20
PARTS = ("name", "line1", "line2", "city", "postal_code", "country")
_POSTAL = re.compile(r"[A-Za-z0-9 -]{1,20}")
_COUNTRY = re.compile(r"[A-Z]{2}")


def _control(value: str) -> str | None:
    """The first control or bidi-control character of ``value``, described, or None."""
    for char in value:
        if unicodedata.category(char) in {"Cc", "Cs"} or char in BIDI_CONTROLS:
            name = unicodedata.name(char, "")
            return f"U+{ord(char):04X}" + (f" {name}" if name else "")
    return None


def address_errors(address: object, *, prefix: str = "change.address") -> dict[str, list[str]]:
    """Messages per field of an address (dotted below ``prefix``; bare names for an empty
    one); empty when it is acceptable."""

    def at(part: str) -> str:
        return f"{prefix}.{part}" if prefix else part

    if not isinstance(address, Mapping):
        return {prefix: ["Required: an object with name, line1, city, postal_code, country."]}
    errors = {
        at(key): ["Unknown field: refused."] for key in sorted(set(map(str, address)) - set(PARTS))
    }
    for part in PARTS:
        value = address.get(part, "" if part == "line2" else None)
        field = at(part)
        if value is None:
            errors[field] = ["Required."]
            continue
        if not isinstance(value, str):
            errors[field] = ["Must be text."]
            continue
        if (char := _control(value)) is not None:
            errors[field] = [f"{char} is not allowed."]
            continue
        text = value.strip()
        if part == "postal_code":
            if not _POSTAL.fullmatch(text):
                errors[field] = [
                    f"1 to {POSTAL_MAX} letters, digits, spaces and hyphens (this is {text!r})."
                ]
        elif part == "country":
            if not _COUNTRY.fullmatch(text.upper()):
                errors[field] = ["Two letters: the ISO 3166-1 alpha-2 code, e.g. GB."]
            elif not _assigned(text.upper()):
                errors[field] = [
                    f"{text.upper()} is no country: an ISO 3166-1 alpha-2 code, e.g. GB."
                ]
        elif part != "line2" and not text:
            errors[field] = ["Required."]
        elif len(text) > TEXT_MAX:
            errors[field] = [f"At most {TEXT_MAX} characters (this has {len(text)})."]
    return errors


def _assigned(code: str) -> bool:
    """Whether ``code`` is an assigned ISO 3166-1 alpha-2 code (``pycountry``'s list, kept to
    the standard by its maintainers): two letters alone let ZZ and XX through."""
    import pycountry

    return pycountry.countries.get(alpha_2=code) is not None


def canonical_address(address: Mapping[str, Any]) -> dict[str, str]:
    out = {part: str(address.get(part) or "").strip() for part in PARTS}
    out["country"] = out["country"].upper()
    if not out["line2"]:
        del out["line2"]
    return out


def one_line(address: Mapping[str, Any]) -> str:
    parts = [address.get("name"), address.get("line1"), address.get("line2")]
    place = " ".join(p for p in (address.get("postal_code"), address.get("city")) if p)
    return ", ".join(str(p) for p in (*parts, place, address.get("country")) if p)


class ShippingAddressForm(forms.Form):
    name = forms.CharField(label="Name", max_length=TEXT_MAX)
    line1 = forms.CharField(label="Address line 1", max_length=TEXT_MAX)
    line2 = forms.CharField(label="Address line 2", max_length=TEXT_MAX, required=False)
    city = forms.CharField(label="City", max_length=TEXT_MAX)
    postal_code = forms.CharField(label="Postal code", max_length=POSTAL_MAX)
    country = forms.CharField(
        label="Country",
        max_length=2,
        min_length=2,
        help_text="Two letters (ISO 3166-1 alpha-2), e.g. GB, DE, FR.",
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if not self.errors:
            address = {part: cleaned.get(part, "") for part in PARTS}
            for field, messages in address_errors(address, prefix="").items():
                self.add_error(field, messages)
        return cleaned


class AddressSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=TEXT_MAX)
    line1 = serializers.CharField(max_length=TEXT_MAX)
    line2 = serializers.CharField(max_length=TEXT_MAX, required=False, allow_blank=True)
    city = serializers.CharField(max_length=TEXT_MAX)
    postal_code = serializers.RegexField(r"^[A-Za-z0-9 -]{1,20}$", max_length=POSTAL_MAX)
    country = serializers.RegexField(
        r"^[A-Za-z]{2}$", help_text="ISO 3166-1 alpha-2, e.g. GB (upper-cased when stored)."
    )


class ShippingAddressChangeSerializer(serializers.Serializer):
    """``change`` of the shipping address kind."""

    address = AddressSerializer()


class ShippingAddress(ChangeKind):
    code = "shipping_address"
    label = "Shipping address"
    key_prefix = "ADDR"
    personal = True  # a name and where they live
    form = ShippingAddressForm
    serializer = ShippingAddressChangeSerializer

    def validate(self, change: Mapping[str, Any]) -> dict[str, list[str]]:
        return {**unknown_keys(change, ["address"]), **address_errors(change.get("address"))}

    def canonical(self, change: Mapping[str, Any]) -> dict[str, Any]:
        return {"kind": self.code, "address": canonical_address(change["address"])}

    def audit_words(self, change: Mapping[str, Any]) -> str:
        address = change.get("address")
        country = address.get("country") if isinstance(address, Mapping) else None
        return f"a new shipping address (in {country})" if country else "a new shipping address"

    def audit_detail(self, change: Mapping[str, Any]) -> dict[str, Any]:
        address = change.get("address")
        country = address.get("country") if isinstance(address, Mapping) else None
        return {"kind": self.code, "country": country}

    def describe(self, change: Mapping[str, Any]) -> str:
        address = change.get("address")
        if not isinstance(address, Mapping):
            return "the shipping address changes"
        return f"the shipping address becomes {one_line(address)}"

    def seen(self, order: OrderView) -> dict[str, Any]:
        return {"address": order.fields.get("shipping_address")}

    def describe_seen(self, seen: Mapping[str, Any] | None) -> str:
        address = (seen or {}).get("address")
        if not isinstance(address, Mapping):
            return "no shipping address on record"
        return f"shipping to {one_line(address)}"

    def holds(self, seen: Mapping[str, Any], change: Mapping[str, Any]) -> bool:
        address = seen.get("address")
        if not isinstance(address, Mapping) or address_errors(address):
            return False
        return canonical_address(address) == change.get("address")

    def advisory(self, client: OrderReader, order: OrderView, change: Mapping[str, Any]) -> str:
        country = change["address"]["country"]
        served = client.capabilities().get("ship_to_countries")
        notes = []
        if isinstance(served, list) and country not in served:
            notes.append(f"The order system does not ship to {country}: it refuses this change")
        elif not isinstance(served, list):
            notes.append("The order system did not say which countries it ships to")
        if general := super().advisory(client, order, change):
            notes.append(general)
        return "; ".join(notes) or f"The order system ships to {country}"

    def reversal(self, seen: Mapping[str, Any] | None) -> dict[str, Any] | None:
        address = (seen or {}).get("address")
        if not isinstance(address, Mapping) or address_errors(address):
            return None
        return {"kind": self.code, "address": canonical_address(address)}

    def probe_changes(self, client: OrderReader, order: OrderView) -> list[dict[str, Any]]:
        """Two made-up addresses in a country the order system ships to (the order's own when
        it is one of them)."""
        served = client.capabilities().get("ship_to_countries")
        if not isinstance(served, list) or not served:
            return []
        current = order.fields.get("shipping_address") or {}
        country = current.get("country") if current.get("country") in served else served[0]
        return [
            {
                "kind": self.code,
                "address": {
                    "name": f"Holdfast probe {letter}",
                    "line1": f"{n} Probe Street",
                    "city": "Probeton",
                    "postal_code": f"PR{n} 1AA",
                    "country": str(country),
                },
            }
            for n, letter in ((1, "A"), (2, "B"))
        ]

    def json_schema(self) -> dict[str, Any]:
        line = {"type": "string", "minLength": 1, "maxLength": TEXT_MAX}
        return {
            "type": "object",
            "required": ["kind", "address"],
            "additionalProperties": False,
            "properties": {
                "kind": {"const": self.code},
                "address": {
                    "type": "object",
                    "required": ["name", "line1", "city", "postal_code", "country"],
                    "additionalProperties": False,
                    "properties": {
                        "name": line,
                        "line1": line,
                        "line2": {**line, "minLength": 0},
                        "city": line,
                        "postal_code": {"type": "string", "pattern": "^[A-Za-z0-9 -]{1,20}$"},
                        "country": {"type": "string", "pattern": "^[A-Za-z]{2}$"},
                    },
                },
            },
        }

    def from_form(self, cleaned_data: Mapping[str, Any]) -> dict[str, Any]:
        address = {part: cleaned_data.get(part, "") for part in PARTS}
        return {"kind": self.code, "address": canonical_address(address)}

    def form_initial(self, change: Mapping[str, Any] | None) -> dict[str, Any]:
        address = (change or {}).get("address")
        return dict(address) if isinstance(address, Mapping) else {}
