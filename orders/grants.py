"""Approval grants: verified here with this system's own code and clock.

Format: ``v1.<payload_b64>.<sig_b64>``; ``payload_b64`` is unpadded base64url of the canonical
JSON (sorted keys, no spaces) of ``{approval_id, change, expires_at, operation_key, order_id}``;
``sig_b64`` is unpadded base64url of HMAC-SHA256(key, b"v1." + payload_b64). Holdfast issues
grants with its own implementation of the same format; ``grant_issue`` exists for this package's
tests and demos only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import UTC, datetime

from orders.exceptions import Refused

PREFIX = "v1"
EXPIRES_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_FIELDS = {"approval_id", "change", "expires_at", "operation_key", "order_id"}


@dataclass(frozen=True)
class Grant:
    approval_id: str
    operation_key: str
    order_id: str
    change: dict
    expires_at: datetime


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def canonical(data: object) -> str:
    """The canonical JSON both sides compare changes by (sorted keys, no spaces)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _signature(key: str, payload_b64: str) -> str:
    message = f"{PREFIX}.{payload_b64}".encode("ascii")
    return _b64encode(hmac.new(key.encode("utf-8"), message, hashlib.sha256).digest())


def grant_issue(
    *,
    key: str,
    approval_id: str,
    operation_key: str,
    order_id: str,
    change: dict,
    expires_at: datetime,
) -> str:
    payload = {
        "approval_id": approval_id,
        "change": change,
        "expires_at": expires_at.astimezone(UTC).strftime(EXPIRES_FORMAT),
        "operation_key": operation_key,
        "order_id": order_id,
    }
    payload_b64 = _b64encode(canonical(payload).encode("utf-8"))
    return f"{PREFIX}.{payload_b64}.{_signature(key, payload_b64)}"


def _invalid(detail: str) -> Refused:
    return Refused(403, "approval_invalid", detail)


def grant_verify(
    token: str,
    *,
    key: str,
    operation_key: str,
    order_id: str,
    change: dict,
    now: datetime | None,
) -> Grant:
    """The grant if it is signed with ``key``, names exactly this operation, order and change
    (the whole change, by canonical equality), and has not expired at ``now`` (this system's
    clock; ``None``: expiry not judged, for a replay of an operation applied while the grant
    was valid); otherwise ``Refused`` (``approval_invalid`` before ``approval_expired``: an
    expiry is only believed when signed)."""
    if not key:
        raise _invalid("No grant key is configured: no grant can be verified.")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != PREFIX or not parts[1] or not parts[2]:
        raise _invalid("The approval grant is malformed.")
    payload_b64, sig_b64 = parts[1], parts[2]
    try:
        payload_b64.encode("ascii")
        sig_b64.encode("ascii")
    except UnicodeEncodeError:
        raise _invalid("The approval grant is malformed.") from None
    if not hmac.compare_digest(_signature(key, payload_b64), sig_b64):
        raise _invalid("The approval grant's signature does not verify.")
    try:
        payload = json.loads(_b64decode(payload_b64))
    except (binascii.Error, ValueError):
        raise _invalid("The approval grant's payload is unreadable.") from None
    if not isinstance(payload, dict) or set(payload) != _FIELDS:
        raise _invalid("The approval grant's payload has the wrong fields.")
    if payload["operation_key"] != operation_key:
        raise _invalid("The approval grant is for another operation.")
    if payload["order_id"] != order_id:
        raise _invalid("The approval grant is for another order.")
    if canonical(payload["change"]) != canonical(change):
        raise _invalid("The approval grant approves another change.")
    if not isinstance(payload["approval_id"], str) or not payload["approval_id"]:
        raise _invalid("The approval grant names no approval.")
    try:
        expires_at = datetime.strptime(payload["expires_at"], EXPIRES_FORMAT).replace(tzinfo=UTC)
    except (TypeError, ValueError):
        raise _invalid("The approval grant's expiry is unreadable.") from None
    if now is not None and now >= expires_at:
        raise Refused(
            403, "approval_expired", f"The approval grant expired at {payload['expires_at']}."
        )
    return Grant(
        approval_id=payload["approval_id"],
        operation_key=operation_key,
        order_id=order_id,
        change=payload["change"],
        expires_at=expires_at,
    )
