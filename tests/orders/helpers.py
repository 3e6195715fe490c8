"""Shared helpers for the order system's tests (imported by tests and ``conftest``)."""

from __future__ import annotations

import hmac
import threading
import time
from datetime import UTC, date, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.conf import settings as django_settings

from orders.grants import grant_issue
from orders.models import Account, AppliedOperation, Order, OutboxEvent, Slot
from tests.support.order_system import WEBHOOK_SIGNATURE_HEADER, webhook_headers

ORDER_ID = "ORD-1"
ACCOUNT_ID = "ACC-1"
TODAY = date(2031, 3, 3)
CURRENT_DATE = TODAY + timedelta(days=3)
FREE_DATE = TODAY + timedelta(days=5)
FULL_DATE = TODAY + timedelta(days=6)
INITIAL_FENCE = 3


ADDRESS = {
    "name": "Dana Whitfield",
    "line1": "12 Harbour Street",
    "line2": "",
    "city": "Bristol",
    "postal_code": "BS1 4DJ",
    "country": "GB",
}
NEW_ADDRESS = {
    "name": "Dana Whitfield",
    "line1": "3 Rue de la Paix",
    "city": "Paris",
    "postal_code": "75002",
    "country": "FR",
}


def date_change(day: date = FREE_DATE) -> dict:
    return {"kind": "delivery_date", "delivery_date": day.isoformat()}


def address_change(**fields: object) -> dict:
    """A shipping address change to ``NEW_ADDRESS`` with ``fields`` replaced (``None`` drops)."""
    address = {
        name: value for name, value in {**NEW_ADDRESS, **fields}.items() if value is not None
    }
    return {"kind": "shipping_address", "address": address}


def cancellation(reason_code: str = "customer_request") -> dict:
    return {"kind": "order_cancellation", "reason_code": reason_code}


# One valid change of each built-in kind, by key prefix.
CHANGES = {
    "DATE": date_change(),
    "ADDR": address_change(),
    "CANCEL": cancellation(),
}


def make_grant(
    *,
    operation_key: str,
    order_id: str = ORDER_ID,
    change: dict | None = None,
    approval_id: str = "AP-9",
    expires_at: datetime | None = None,
    key: str | None = None,
) -> str:
    return grant_issue(
        key=key if key is not None else django_settings.APPROVAL_GRANT_KEY,
        approval_id=approval_id,
        operation_key=operation_key,
        order_id=order_id,
        change=change if change is not None else date_change(),
        expires_at=expires_at or datetime.now(UTC) + timedelta(hours=1),
    )


def operation_body(
    *,
    operation_key: str = "DATE-1-1",
    delivery_date: date = FREE_DATE,
    change: dict | None = None,
    expected_version: int = 1,
    fencing_token: int = 7,
    order_id: str = ORDER_ID,
    grant: str | None = None,
) -> dict:
    """A valid request body (the grant matches it) unless the caller overrides a part; the
    change is ``change``, else a delivery date change to ``delivery_date``."""
    change = change if change is not None else date_change(delivery_date)
    return {
        "operation_key": operation_key,
        "change": change,
        "expected_version": expected_version,
        "fencing_token": fencing_token,
        "approval_grant": grant
        if grant is not None
        else make_grant(operation_key=operation_key, order_id=order_id, change=change),
    }


def body_for_kind(prefix: str, **overrides) -> dict:
    """A valid body for the change of ``CHANGES[prefix]`` under key ``<prefix>-1-1``."""
    return operation_body(operation_key=f"{prefix}-1-1", change=CHANGES[prefix], **overrides)


def seed_rows() -> None:
    """ACC-1 with ORD-1 (open, on CURRENT_DATE, at ADDRESS, version 1, fence 3); one free and
    one full slot."""
    account = Account.objects.create(account_id=ACCOUNT_ID, name="Northwind", access_active=True)
    Order.objects.create(
        order_id=ORDER_ID,
        account=account,
        delivery_date=CURRENT_DATE,
        shipping_address=ADDRESS,
        version=1,
        fence_token=INITIAL_FENCE,
    )
    Slot.objects.create(date=CURRENT_DATE, capacity=5, taken=1)
    Slot.objects.create(date=FREE_DATE, capacity=5, taken=0)
    Slot.objects.create(date=FULL_DATE, capacity=1, taken=1)


def snapshot() -> dict:
    """Every row the order system holds, for "nothing changed" assertions."""
    return {
        "accounts": list(Account.objects.order_by("pk").values()),
        "orders": list(Order.objects.order_by("pk").values()),
        "slots": list(Slot.objects.order_by("date").values("date", "capacity", "taken")),
        "operations": list(AppliedOperation.objects.order_by("pk").values()),
        "events": list(OutboxEvent.objects.order_by("pk").values()),
    }


class Api:
    """The order system's HTTP surface through Django's test client, JSON in and out, with
    the credential (``token=""`` sends none)."""

    def __init__(self, client, token: str | None = None) -> None:
        self.client = client
        self.token = token

    def _auth(self) -> dict[str, str]:
        token = django_settings.ORDERS_API_TOKEN if self.token is None else self.token
        return {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}

    def post(self, path: str, body: object = None):
        return self.client.post(
            path, data=body or {}, content_type="application/json", **self._auth()
        )

    def get(self, path: str, **params):
        return self.client.get(path, params, **self._auth())

    def delete(self, path: str):
        return self.client.delete(path, **self._auth())

    def apply(self, body: dict, order_id: str = ORDER_ID):
        return self.post(f"/orders/{order_id}/operations", body)


class Receiver:
    """A loopback HTTP receiver that answers 500 to the first ``fail_first`` POSTs, then 202."""

    def __init__(self, fail_first: int = 1) -> None:
        self.fail_first = fail_first
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.received_at: list[float] = []  # time.time() of each delivery
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                receiver.received_at.append(time.time())
                failing = len(receiver.received) <= receiver.fail_first
                self.send_response(500 if failing else 202)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/hooks/orders/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def signature_of(body: bytes, secret: str, timestamp: str) -> str:
    """``X-Orders-Signature`` for ``body`` signed at ``timestamp`` (unix seconds, as text)."""
    return webhook_headers(body, secret=secret, at=int(timestamp))[WEBHOOK_SIGNATURE_HEADER]


def assert_signed_at_delivery(headers: dict[str, str], body: bytes, secret: str, at: float):
    """The delivery carries ``X-Orders-Timestamp``, its signature covers that timestamp and the
    raw body, and the timestamp is the moment it was sent (``at``, the receiver's clock)."""
    timestamp = headers["X-Orders-Timestamp"]
    assert hmac.compare_digest(headers["X-Orders-Signature"], signature_of(body, secret, timestamp))
    assert abs(int(timestamp) - at) <= 2
