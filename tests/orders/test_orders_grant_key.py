"""The receiver's approval-grant check (key material and clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orders import services
from tests.orders.helpers import make_grant, operation_body, snapshot

pytestmark = pytest.mark.usefixtures("seeded")


def test_an_empty_grant_key_refuses_every_grant_instead_of_accepting_forgeries(api, settings):
    """Settings refuse an empty APPROVAL_GRANT_KEY, and the receiver fails closed too: HMAC
    under an empty key is computable by anyone."""
    settings.APPROVAL_GRANT_KEY = ""
    forged = make_grant(operation_key="DATE-1-1", key="")
    before = snapshot()

    response = api.apply(operation_body(grant=forged))

    assert response.status_code == 403, response.json()
    assert response.json()["error"] == "approval_invalid"
    assert snapshot() == before


def test_grant_expiry_is_judged_by_the_clock_once_the_order_lock_is_held(api, monkeypatch):
    """The receiver reads its clock before it waits for the order row lock, then checks the
    grant's expiry (and writes ``created_at``) with that stale instant. A request that waits
    on the lock past the grant's expiry is applied with an expired grant."""
    expires_at = datetime(2031, 3, 3, 12, 0, 0, tzinfo=UTC)
    clock = [expires_at - timedelta(seconds=1)]
    monkeypatch.setattr(services.timezone, "now", lambda: clock[0])
    locked = services._lock_order

    def lock_after_a_wait(order_id: str):
        clock[0] = expires_at + timedelta(minutes=5)  # another writer held the row lock
        return locked(order_id)

    monkeypatch.setattr(services, "_lock_order", lock_after_a_wait)
    grant = make_grant(operation_key="DATE-1-1", expires_at=expires_at)
    before = snapshot()

    response = api.apply(operation_body(grant=grant))

    assert response.status_code == 403, response.json()
    assert response.json()["error"] == "approval_expired"
    assert snapshot() == before
