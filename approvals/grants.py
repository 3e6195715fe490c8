"""The signed approval grant: Holdfast's "yes" for one exact change, checked by the receiver.

Format (binding; the order system verifies the same bytes)::

    v1.<payload_b64>.<sig_b64>

- ``payload_b64``: base64url without ``=`` padding of
  ``json.dumps(payload, sort_keys=True, separators=(",", ":"))`` where ``payload`` is
  ``{"approval_id": str, "change": {"kind": str, …the kind's fields},
  "expires_at": "YYYY-MM-DDTHH:MM:SSZ", "operation_key": str, "order_id": str}``
  (``expires_at`` in UTC, whole seconds; ``change`` whole, in its kind's canonical form:
  ``cases.kinds``). Both sides compare ``change`` by canonical equality.
- ``sig_b64``: base64url without padding of HMAC-SHA256(key=APPROVAL_GRANT_KEY as UTF-8,
  msg=b"v1." + payload_b64 as ASCII).

``grant_issue`` is the only issuer. ``grant_verify`` exists for Holdfast's own checks and tests;
the receiver's verdict at apply time is the one that counts.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from approvals.exceptions import GrantError, GrantExpired, GrantInvalid
from cases import kinds

__all__ = [
    "GrantError",
    "GrantExpired",
    "GrantInvalid",
    "GrantPayload",
    "grant_issue",
    "grant_verify",
]

VERSION = "v1"
_EXPIRES_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_PAYLOAD_KEYS = {"approval_id", "change", "expires_at", "operation_key", "order_id"}


@dataclass(frozen=True, slots=True)
class GrantPayload:
    approval_id: str
    operation_key: str
    order_id: str
    change: dict[str, Any]
    expires_at: dt.datetime


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    if not text or "=" in text:
        raise GrantInvalid("grant segment is empty or padded")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise GrantInvalid("grant segment is not base64url") from None


def _key_bytes(key: str | None) -> bytes:
    if key is None:
        from django.conf import settings

        key = settings.APPROVAL_GRANT_KEY
    if not key:
        raise ValueError("APPROVAL_GRANT_KEY is empty")
    return key.encode("utf-8")


def _signature(key: bytes, payload_b64: str) -> bytes:
    return hmac.new(key, f"{VERSION}.{payload_b64}".encode("ascii"), hashlib.sha256).digest()


def _format_expiry(expires_at: dt.datetime) -> str:
    if expires_at.tzinfo is None or expires_at.utcoffset() is None:
        raise ValueError("expires_at must be timezone-aware")
    return expires_at.astimezone(dt.UTC).strftime(_EXPIRES_FORMAT)


def grant_issue(
    *,
    operation_key: str,
    order_id: str,
    change: Mapping[str, Any],
    approval_id: str,
    expires_at: dt.datetime,
    key: str | None = None,
) -> str:
    """Sign a grant for exactly this operation, order and whole change (in its kind's canonical
    form), until ``expires_at`` (truncated to whole seconds, UTC). ``key`` defaults to
    ``settings.APPROVAL_GRANT_KEY``."""
    payload = {
        "approval_id": str(approval_id),
        "change": kinds.canonical(change),
        "expires_at": _format_expiry(expires_at),
        "operation_key": operation_key,
        "order_id": order_id,
    }
    raw = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode("utf-8")
    payload_b64 = _b64encode(raw)
    return f"{VERSION}.{payload_b64}.{_b64encode(_signature(_key_bytes(key), payload_b64))}"


def grant_verify(
    token: str,
    *,
    key: str | None = None,
    now: dt.datetime | None = None,
    operation_key: str | None = None,
    order_id: str | None = None,
    change: Mapping[str, Any] | None = None,
) -> GrantPayload:
    """Return the payload of a correctly signed, unexpired grant.

    Raises ``GrantInvalid`` for anything malformed, a wrong signature or key, or (when given) an
    ``operation_key``/``order_id``/``change`` other than the grant's (the whole change, by
    canonical equality); ``GrantExpired`` when
    ``now`` (default: the current time) is at or after ``expires_at``. The signature is checked
    before anything in the payload is trusted.
    """
    grant = _signed_payload(token, key)
    if operation_key is not None and grant.operation_key != operation_key:
        raise GrantInvalid("grant is for another operation")
    if order_id is not None and grant.order_id != order_id:
        raise GrantInvalid("grant is for another order")
    if change is not None and kinds.canonical_json(grant.change) != kinds.canonical_json(
        kinds.canonical(change)
    ):
        raise GrantInvalid("grant is for another change")
    current = now if now is not None else dt.datetime.now(dt.UTC)
    if current >= grant.expires_at:
        raise GrantExpired(f"grant expired at {grant.expires_at.strftime(_EXPIRES_FORMAT)}")
    return grant


def _signed_payload(token: str, key: str | None) -> GrantPayload:
    """The payload of a grant whose signature holds, read only after the signature is checked;
    ``GrantInvalid`` for anything malformed or a wrong signature or key."""
    if not isinstance(token, str):
        raise GrantInvalid("grant is not a string")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != VERSION:
        raise GrantInvalid("grant is not v1.<payload>.<signature>")
    _, payload_b64, sig_b64 = parts
    try:
        payload_b64.encode("ascii")
    except UnicodeEncodeError:
        raise GrantInvalid("grant payload is not ASCII") from None
    expected = _signature(_key_bytes(key), payload_b64)
    if not hmac.compare_digest(expected, _b64decode(sig_b64)):
        raise GrantInvalid("grant signature does not match")
    try:
        payload = json.loads(_b64decode(payload_b64))
    except (ValueError, UnicodeDecodeError):
        raise GrantInvalid("grant payload is not JSON") from None
    return _payload_fields(payload)


def _payload_fields(payload: Any) -> GrantPayload:
    """A signed payload's fields, each of its v1 type, or ``GrantInvalid``."""
    if not isinstance(payload, dict) or set(payload) != _PAYLOAD_KEYS:
        raise GrantInvalid("grant payload does not have exactly the v1 fields")
    granted = payload["change"]
    if not isinstance(granted, dict) or not isinstance(granted.get("kind"), str):
        raise GrantInvalid("grant change must be an object that names its kind")
    strings = ("approval_id", "operation_key", "order_id", "expires_at")
    if not all(isinstance(payload[name], str) for name in strings):
        raise GrantInvalid("grant fields must be strings")
    try:
        expires = dt.datetime.strptime(payload["expires_at"], _EXPIRES_FORMAT).replace(
            tzinfo=dt.UTC
        )
    except ValueError:
        raise GrantInvalid("grant expiry is not in the v1 format") from None
    return GrantPayload(
        approval_id=payload["approval_id"],
        operation_key=payload["operation_key"],
        order_id=payload["order_id"],
        change=granted,
        expires_at=expires,
    )
