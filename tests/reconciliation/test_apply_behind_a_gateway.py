"""End to end: a gateway's bare 503 after the write was forwarded."""

from __future__ import annotations

import httpx
import pytest

from cases.models import Status
from cases.services import case_cancel_request
from reconciliation.apply import apply_case
from reconciliation.client import OrderSystemClient

pytestmark = pytest.mark.order_system

ORDER = "ORD-7731"
TIMEOUTS = {"connect": 2.0, "read": 5.0, "write": 5.0, "pool": 2.0}


class ResettingGateway(httpx.BaseTransport):
    """Forwards every request; answers a bare 503 to the apply once the receiver committed
    (what Envoy does for an upstream reset before headers)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == "POST" and request.url.path.endswith("/operations"):
            response.read()
            response.close()
            return httpx.Response(503, text="upstream connect error or disconnect/reset")
        return response

    def close(self) -> None:
        self.inner.close()


def test_an_applied_change_behind_a_bare_503_is_never_reported_as_cancelled(
    approved_case, live_orders, lead
):
    case = approved_case()
    with OrderSystemClient(
        live_orders.base_url, timeouts=TIMEOUTS, transport=ResettingGateway()
    ) as client:
        outcome = apply_case(case_id=case.pk, client=client)

    assert len(live_orders.state(ORDER)["operations"]) == 1  # the order did change
    case_cancel_request(case=case, actor=lead, reason="Customer cancels", via="api")
    case.refresh_from_db()

    # Today: apply records "Nothing applied ... retry", then the cancellation cancels the case.
    assert (outcome, case.status) == ("effect_unknown", Status.HELD)
    assert case.status != Status.CANCELLED
