"""Review: bad input that reaches a 500 (an HTML page, not ``{"error", "detail"}``) instead of
a refusal that writes nothing."""

from __future__ import annotations

import json

from django.test import Client
from django.urls import reverse

from cases.models import CaseEvent
from reconciliation.models import InboundEvent
from tests.support.order_system import webhook_headers

SECRET = "review-webhook-secret"


def test_admin_case_button_with_a_non_numeric_version_is_refused_not_a_500(case, lead):
    client = Client(raise_request_exception=False)
    client.force_login(lead)
    events = CaseEvent.objects.count()

    response = client.post(
        reverse("admin:cases_case_action", args=[case.pk, "place_legal_hold"]),
        {"expected_version": "abc", "reason": "x"},
    )

    assert response.status_code == 302
    assert CaseEvent.objects.count() == events
    case.refresh_from_db()
    assert case.legal_hold is False


def test_signed_event_with_an_out_of_range_order_version_is_400_not_500(settings, db):
    settings.ORDER_WEBHOOK_SECRET = SECRET
    body = json.dumps(
        {
            "event_id": "evt-huge",
            "type": "order.updated",
            "order_id": "ORD-1",
            "order_version": 10**30,
            "occurred_at": "2030-01-01T00:00:00Z",
        }
    ).encode()
    headers = webhook_headers(body, secret=SECRET)

    response = Client(raise_request_exception=False).post(
        "/api/hooks/orders/", body, content_type="application/json", headers=headers
    )

    assert response.status_code == 400
    assert response.json()["error"] == "invalid"
    assert "order_version" in response.json()["fields"]
    assert not InboundEvent.objects.exists()


def test_signed_event_nested_too_deep_is_400_not_500(settings, db):
    settings.ORDER_WEBHOOK_SECRET = SECRET
    body = b"[" * 100_000 + b"]" * 100_000
    headers = webhook_headers(body, secret=SECRET)

    response = Client(raise_request_exception=False).post(
        "/api/hooks/orders/", body, content_type="application/json", headers=headers
    )

    assert response.status_code == 400
    assert response.json()["error"] == "invalid"
