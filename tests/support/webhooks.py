"""Deliver one signed order event to Holdfast's webhook in-process, as the order system does
(``orders/outbox.py``), and process it as a worker would."""

from __future__ import annotations

import json

from django.test import Client

from tests.support.order_system import DEFAULT_WEBHOOK_SECRET, webhook_headers


def post_order_event(order_id: str, event_id: str, order_version: int) -> str:
    """POST ``order.updated`` for ``order_id`` at ``order_version``; returns the processing
    outcome (``ORDER_WEBHOOK_SECRET`` must be the default secret)."""
    from reconciliation.models import InboundEvent
    from reconciliation.tasks_inbound import process_event

    body = json.dumps(
        {
            "event_id": event_id,
            "type": "order.updated",
            "order_id": order_id,
            "order_version": order_version,
            "occurred_at": "2026-03-02T09:15:00Z",
        },
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    headers = webhook_headers(body, secret=DEFAULT_WEBHOOK_SECRET)
    response = Client().post(
        "/api/hooks/orders/",
        data=body,
        content_type="application/json",
        headers={**headers, "X-Orders-Event-Id": event_id},
    )
    assert response.status_code < 300, response.content
    return process_event(InboundEvent.objects.get(event_id=event_id).pk)
