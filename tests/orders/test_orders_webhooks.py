"""Outbox webhooks: signed with a timestamp at each attempt, retried with backoff after a
failure, resendable by hand (signed anew)."""

from __future__ import annotations

import io
import json
import time

import pytest
from django.core.management import CommandError, call_command

from orders.models import OutboxEvent
from orders.outbox import backoff_seconds, events_deliver_due
from tests.orders.helpers import (
    ORDER_ID,
    Receiver,
    assert_signed_at_delivery,
    operation_body,
    signature_of,
)

pytestmark = pytest.mark.usefixtures("seeded")


@pytest.fixture
def receiver(settings):
    with Receiver(fail_first=1) as running:
        settings.ORDERS_WEBHOOK_URL = running.url
        settings.ORDERS_WEBHOOK_BACKOFF_SECONDS = 0.3
        yield running


def test_a_failed_delivery_is_retried_after_backoff_and_resend_keeps_the_event(
    api, settings, receiver
):
    assert api.apply(operation_body()).status_code == 201
    event = OutboxEvent.objects.get()

    first_pass = events_deliver_due()
    after_failure = OutboxEvent.objects.get()
    too_early = events_deliver_due()
    time.sleep(0.35)
    retry_pass = events_deliver_due()
    call_command("orders_resend_event", event.event_id, stdout=io.StringIO())

    assert (first_pass.delivered, first_pass.failed) == (0, 1)
    assert (too_early.delivered, too_early.failed) == (0, 0)  # backoff not yet over
    assert (retry_pass.delivered, retry_pass.failed) == (1, 0)
    assert after_failure.attempts == 1
    assert after_failure.last_error.startswith("HTTP 500")
    assert after_failure.delivered_at is None
    delivered = OutboxEvent.objects.get()
    assert delivered.delivered_at is not None
    assert delivered.attempts == 3
    assert len(receiver.received) == 3
    bodies = {body for _, body in receiver.received}
    assert len(bodies) == 1  # the same raw bytes every time
    body = bodies.pop()
    assert json.loads(body) == {
        "event_id": event.event_id,
        "type": "order.updated",
        "order_id": ORDER_ID,
        "order_version": 2,
        "occurred_at": event.payload["occurred_at"],
    }
    for (headers, raw), at in zip(receiver.received, receiver.received_at, strict=True):
        assert headers["X-Orders-Event-Id"] == event.event_id
        assert headers["Content-Type"] == "application/json"
        # Each attempt, the resend by hand included, is signed when it is sent.
        assert_signed_at_delivery(headers, raw, settings.ORDER_WEBHOOK_SECRET, at)
    first_headers = receiver.received[0][0]
    assert first_headers["X-Orders-Signature"] != signature_of(
        body, "another-secret", first_headers["X-Orders-Timestamp"]
    )


def test_the_signature_covers_the_timestamp_and_a_later_attempt_is_signed_anew(
    api, settings, receiver
):
    """A delivery signed at t verifies only with t: moving the timestamp breaks it, and an
    attempt a second later carries its own timestamp and signature for the same bytes."""
    api.apply(operation_body())
    event = OutboxEvent.objects.get()
    events_deliver_due()  # refused by the receiver (fail_first=1)
    time.sleep(1.05)
    call_command("orders_resend_event", event.event_id, stdout=io.StringIO())

    (first, body), (second, same_body) = receiver.received
    assert body == same_body
    assert int(second["X-Orders-Timestamp"]) > int(first["X-Orders-Timestamp"])
    assert second["X-Orders-Signature"] != first["X-Orders-Signature"]
    moved = str(int(first["X-Orders-Timestamp"]) + 1)
    secret = settings.ORDER_WEBHOOK_SECRET
    assert first["X-Orders-Signature"] != signature_of(body, secret, moved)
    assert first["X-Orders-Signature"] == signature_of(body, secret, first["X-Orders-Timestamp"])


def test_backoff_doubles_and_is_capped(settings):
    settings.ORDERS_WEBHOOK_BACKOFF_SECONDS = 1.0
    settings.ORDERS_WEBHOOK_BACKOFF_CAP_SECONDS = 60.0
    assert [backoff_seconds(n) for n in (1, 2, 3, 6, 7, 20)] == [1, 2, 4, 32, 60, 60]


def test_resend_of_an_unknown_event_is_a_command_error():
    with pytest.raises(CommandError, match="No outbox event"):
        call_command("orders_resend_event", "nope")


def test_delivery_disabled_by_an_empty_url_leaves_events_waiting(api, settings):
    settings.ORDERS_WEBHOOK_URL = ""
    api.apply(operation_body())

    report = events_deliver_due()

    assert (report.delivered, report.failed) == (0, 0)
    assert OutboxEvent.objects.get().attempts == 0


@pytest.mark.usefixtures("faults_on")
def test_the_testing_endpoint_resends_an_event_by_hand(api, settings, receiver):
    api.apply(operation_body())
    event = OutboxEvent.objects.get()

    refused = api.post(f"/_testing/outbox/{event.event_id}/resend").json()
    accepted = api.post(f"/_testing/outbox/{event.event_id}/resend").json()
    unknown = api.post("/_testing/outbox/nope/resend")

    assert (refused["accepted"], refused["error"][:8]) == (False, "HTTP 500")
    assert accepted == {"event_id": event.event_id, "accepted": True, "error": None}
    assert unknown.status_code == 404
    assert OutboxEvent.objects.get().attempts == 2
    for (headers, raw), at in zip(receiver.received, receiver.received_at, strict=True):
        assert_signed_at_delivery(headers, raw, settings.ORDER_WEBHOOK_SECRET, at)
