"""``POST /api/hooks/orders/``: the order system's webhooks (CONTRACT §1 and §2).

Authentication is the signature, not a session or token: ``X-Orders-Signature`` must be
``t=<unix seconds>,sha256=<hex HMAC-SHA256(ORDER_WEBHOOK_SECRET, "<seconds>." + raw body)>``,
checked over the exact bytes received, before anything is parsed or stored, and the signed
timestamp must be within ``ORDER_WEBHOOK_TOLERANCE_SECONDS`` of this server's clock (either
way), so a delivery captured once cannot be replayed later; ``X-Orders-Timestamp``, when sent,
must be the signed one. The order system signs every attempt anew (a resend by hand too).
Anything else is ``401 bad_signature`` with a ``reason`` (``signature`` or ``timestamp``) and a
detail that says which. Then the receipt is stored by event id and its processing queued
(``reconciliation.inbound``); the answer is ``202`` either way, so the sender stops
redelivering an event Holdfast already holds.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time

from django.conf import settings
from django.urls import path
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from cases import validation
from cases.api_errors import ErrorSerializer, error_responses
from cases.throttling import HookRateThrottle
from reconciliation.inbound import inbound_event_receive

SIGNATURE_HEADER = "X-Orders-Signature"
TIMESTAMP_HEADER = "X-Orders-Timestamp"
EVENT_ID_HEADER = "X-Orders-Event-Id"
_TEXT_FIELDS = {"event_id": 100, "type": 60, "order_id": 60}
_SIGNATURE = re.compile(r"t=([0-9]{1,12}),sha256=([0-9a-f]{64})")


class BadSignature(Exception):
    """Why a delivery is not believed: ``reason`` is ``signature`` or ``timestamp``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def signature_verify(
    body: bytes, signature: str | None, timestamp: str | None, *, now: float
) -> None:
    """Return when ``signature`` is the shared secret's HMAC of its timestamp and ``body`` and
    that timestamp is within the tolerance of ``now``; else ``BadSignature`` saying which.

    The timestamp is judged only once the HMAC verifies: an unsigned one proves nothing.
    """
    secret = settings.ORDER_WEBHOOK_SECRET
    if not secret:
        raise BadSignature("signature", "No webhook secret is configured: nothing can verify.")
    match = _SIGNATURE.fullmatch((signature or "").strip())
    if match is None:
        raise BadSignature(
            "signature",
            f"The {SIGNATURE_HEADER} header is missing or not t=<unix seconds>,sha256=<hex>.",
        )
    signed_at, digest = match.groups()
    if timestamp is not None and timestamp.strip() != signed_at:
        raise BadSignature(
            "signature", f"The {TIMESTAMP_HEADER} header is not the signed timestamp."
        )
    signed = signed_at.encode("ascii") + b"." + body
    expected = hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, digest):
        raise BadSignature("signature", "The signature does not match the body and its timestamp.")
    tolerance = settings.ORDER_WEBHOOK_TOLERANCE_SECONDS
    skew = int(signed_at) - now
    if abs(skew) > tolerance:
        when = "before" if skew < 0 else "after"
        raise BadSignature(
            "timestamp",
            f"The signature verifies, but it was made at {signed_at}, {abs(skew):.0f} seconds "
            f"{when} this server's clock; ORDER_WEBHOOK_TOLERANCE_SECONDS allows {tolerance}. "
            "A replayed or delayed delivery is refused; a resend is signed anew.",
        )


# The largest value the version columns hold on every supported database.
MAX_ORDER_VERSION = 2_147_483_647


class InvalidEvent(Exception):
    def __init__(self, detail: str, fields: dict[str, list[str]] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.fields = fields or {}


def parse_event(body: bytes, header_event_id: str | None) -> dict:
    """The event's fields from the raw body, or ``InvalidEvent`` naming what is wrong."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise InvalidEvent("The body is not valid UTF-8 JSON.") from None
    if not isinstance(data, dict):
        raise InvalidEvent("The body must be a JSON object.")
    errors: dict[str, list[str]] = {}
    fields: dict = {}
    for name, max_length in _TEXT_FIELDS.items():
        value = data.get(name)
        if not isinstance(value, str) or not value.strip():
            errors[name] = ["Required: a non-empty string."]
        elif len(value) > max_length:
            errors[name] = [f"At most {max_length} characters."]
        elif unprintable := validation.unprintable_errors(value):
            errors[name] = unprintable
        else:
            fields[name] = value
    if _holds_nul(data):
        # PostgreSQL stores no NUL in text or jsonb: refused here, not failed on the insert.
        errors["body"] = ["U+0000 NULL is not allowed anywhere in the event."]
    version = data.get("order_version")
    if (
        isinstance(version, bool)
        or not isinstance(version, int)
        or not 0 <= version <= MAX_ORDER_VERSION
    ):
        errors["order_version"] = [f"Required: a whole number from 0 to {MAX_ORDER_VERSION}."]
    else:
        fields["order_version"] = version
    occurred = data.get("occurred_at")
    try:
        occurred_at = parse_datetime(occurred) if isinstance(occurred, str) else None
    except ValueError:
        occurred_at = None
    if occurred_at is None or occurred_at.tzinfo is None:
        errors["occurred_at"] = ["Required: an ISO 8601 date and time with a UTC offset."]
    else:
        fields["occurred_at"] = occurred_at
    if header_event_id and fields.get("event_id") and header_event_id != fields["event_id"]:
        errors["event_id"] = [f"Does not match the {EVENT_ID_HEADER} header."]
    if errors:
        raise InvalidEvent("The event has invalid fields; nothing was stored.", errors)
    return {**fields, "body": data}


def _holds_nul(value: object) -> bool:
    """Whether a NUL character is in any key or string of the decoded JSON ``value`` (walked
    without recursion: the body may nest as deep as the JSON parser allows)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def _error(status: int, code: str, detail: str, **extra) -> Response:
    return Response({"error": code, "detail": detail, **extra}, status=status)


class OrderHookView(APIView):
    """Receive one signed order-system event (no session, no token: the HMAC is the proof)."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    # Its own scope, so a flood of webhooks never uses up the integrations' API rate.
    throttle_classes = [HookRateThrottle]
    parser_classes: list = []  # the raw body is read and verified here, never parsed by DRF

    @extend_schema(
        operation_id="hooks_orders_receive",
        summary="Receive an order-system event",
        request={"application/json": OpenApiTypes.OBJECT},
        responses={
            202: OpenApiResponse(OpenApiTypes.OBJECT, description="Stored, or already stored."),
            **error_responses(400, 413),
            401: OpenApiResponse(
                ErrorSerializer,
                description="bad_signature: X-Orders-Signature is missing, does not match "
                "the body and its timestamp, or its timestamp is outside "
                "ORDER_WEBHOOK_TOLERANCE_SECONDS (`reason`: signature or timestamp); nothing "
                "was stored.",
            ),
        },
        tags=["hooks"],
    )
    def post(self, request):
        body = request.body
        try:
            signature_verify(
                body,
                request.headers.get(SIGNATURE_HEADER),
                request.headers.get(TIMESTAMP_HEADER),
                now=time.time(),
            )
        except BadSignature as refused:
            return _error(
                401,
                "bad_signature",
                f"{refused.detail} Nothing was stored.",
                reason=refused.reason,
            )
        try:
            event = parse_event(body, request.headers.get(EVENT_ID_HEADER))
        except InvalidEvent as exc:
            return _error(400, "invalid", exc.detail, fields=exc.fields)
        receipt = inbound_event_receive(**event)
        return Response(receipt.body, status=202)


# Included by ``config/urls.py`` at ``api/hooks/orders/``.
urlpatterns = [path("", OrderHookView.as_view(), name="hooks-orders")]
