"""Webhook delivery from the outbox: at least once, in any order, resendable by hand.

Each POST carries the event's canonical JSON as the raw body (the same bytes every time),
``X-Orders-Event-Id``, ``X-Orders-Timestamp: <unix seconds>`` and
``X-Orders-Signature: t=<same seconds>,sha256=<hex HMAC-SHA256(ORDER_WEBHOOK_SECRET,
"<seconds>." + raw body)>``, signed at each attempt (a resend by hand too): the receiver refuses
a timestamp far from its clock, so a captured delivery cannot be replayed later. A 2xx marks the
event delivered; anything else schedules another try with exponential backoff. No HTTP call ever
runs inside a database transaction.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from django.conf import settings
from django.db import close_old_connections, connections
from django.utils import timezone

from orders.models import OutboxEvent

logger = logging.getLogger(__name__)

EVENT_ID_HEADER = "X-Orders-Event-Id"
SIGNATURE_HEADER = "X-Orders-Signature"
TIMESTAMP_HEADER = "X-Orders-Timestamp"


def event_body(event: OutboxEvent) -> bytes:
    """The raw body: the same bytes for every delivery of one event."""
    return json.dumps(event.payload, sort_keys=True, separators=(",", ":")).encode("utf-8")


def event_signature(body: bytes, *, secret: str, timestamp: int) -> str:
    """``t=<timestamp>,sha256=<hex>``: the HMAC covers the timestamp and the raw body."""
    signed = f"{timestamp}.".encode("ascii") + body
    digest = hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},sha256={digest}"


def backoff_seconds(attempts: int) -> float:
    """Delay before the next try after ``attempts`` failed ones: base * 2**(n-1), capped."""
    base = settings.ORDERS_WEBHOOK_BACKOFF_SECONDS
    cap = settings.ORDERS_WEBHOOK_BACKOFF_CAP_SECONDS
    return min(cap, base * 2 ** max(attempts - 1, 0))


def _client() -> httpx.Client:
    timeout = settings.ORDERS_WEBHOOK_TIMEOUT_SECONDS
    return httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, 2.0)))


def _post(client: httpx.Client, event: OutboxEvent) -> str | None:
    """POST the event once; ``None`` on a 2xx, else a short description of the failure."""
    body = event_body(event)
    timestamp = int(time.time())  # now: every attempt is signed when it is sent
    headers = {
        "Content-Type": "application/json",
        EVENT_ID_HEADER: event.event_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: event_signature(
            body, secret=settings.ORDER_WEBHOOK_SECRET, timestamp=timestamp
        ),
    }
    try:
        response = client.post(settings.ORDERS_WEBHOOK_URL, content=body, headers=headers)
    except httpx.HTTPError as error:
        return f"{type(error).__name__}: {error}"
    if response.is_success:
        return None
    return f"HTTP {response.status_code}: {response.text[:200]}"


def _record(event: OutboxEvent, error: str | None, *, now: datetime) -> None:
    attempts = event.attempts + 1
    if error is None:
        OutboxEvent.objects.filter(pk=event.pk).update(
            attempts=attempts, delivered_at=event.delivered_at or now
        )
    else:
        OutboxEvent.objects.filter(pk=event.pk).update(
            attempts=attempts,
            last_error=error,
            next_attempt_at=now + timedelta(seconds=backoff_seconds(attempts)),
        )
    event.attempts = attempts


@dataclass(frozen=True)
class DeliveryReport:
    delivered: int = 0
    failed: int = 0


def events_deliver_due(*, limit: int = 100) -> DeliveryReport:
    """One pass: try every undelivered event whose next attempt is due.

    Each event is first claimed by moving its ``next_attempt_at`` past the request timeout
    (a conditional update), so two deliverers rarely send the same event at once; at-least-once
    delivery makes the rare duplicate harmless.
    """
    if not settings.ORDERS_WEBHOOK_URL:
        return DeliveryReport()
    now = timezone.now()
    due = list(
        OutboxEvent.objects.filter(delivered_at__isnull=True, next_attempt_at__lte=now)[:limit]
    )
    if not due:
        return DeliveryReport()
    lease = timedelta(seconds=settings.ORDERS_WEBHOOK_TIMEOUT_SECONDS + 5)
    delivered = failed = 0
    with _client() as client:
        for event in due:
            claimed = OutboxEvent.objects.filter(
                pk=event.pk, delivered_at__isnull=True, next_attempt_at=event.next_attempt_at
            ).update(next_attempt_at=now + lease)
            if not claimed:
                continue
            error = _post(client, event)
            _record(event, error, now=timezone.now())
            if error is None:
                delivered += 1
            else:
                failed += 1
                logger.warning("Webhook %s not delivered: %s", event.event_id, error)
    return DeliveryReport(delivered=delivered, failed=failed)


def event_resend(*, event_id: str) -> str | None:
    """Send one event again by hand, delivered or not, with the same id and body.

    Returns ``None`` when the receiver answered 2xx, else the failure.
    """
    event = OutboxEvent.objects.get(event_id=event_id)
    if not settings.ORDERS_WEBHOOK_URL:
        return "Webhook delivery is disabled (ORDERS_WEBHOOK_URL is empty)."
    with _client() as client:
        error = _post(client, event)
    _record(event, error, now=timezone.now())
    return error


class OutboxDeliverer(threading.Thread):
    """A daemon thread that runs ``events_deliver_due`` every poll interval until stopped."""

    def __init__(self, *, poll_seconds: float | None = None) -> None:
        super().__init__(name="orders-outbox", daemon=True)
        self.poll_seconds = poll_seconds or settings.ORDERS_DELIVERY_POLL_SECONDS
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                close_old_connections()
                events_deliver_due()
            except Exception:  # a worker loop: a failed pass is logged, the next one retries
                logger.exception("The outbox deliverer failed a pass; it will try again.")
            self.stopping.wait(self.poll_seconds)
        connections.close_all()

    def stop(self, timeout: float = 10.0) -> None:
        self.stopping.set()
        self.join(timeout)
