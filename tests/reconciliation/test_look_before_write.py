"""Look before you write: an operation that may already have been sent is read by key from the
consistent lookup before any write leaves. Found with the intended change → recorded applied
without a write; found with another body → held; absent → the write goes. A first send of a
fresh operation costs no extra round trip."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest
from django.core import mail
from django.utils import timezone

from approvals.models import Operation
from cases.models import Attempt, Case, CaseEvent, EvidenceReference, Status
from reconciliation.apply import apply_case
from reconciliation.client import OrderSystemClient
from reconciliation.restore_detection import source_verified

pytestmark = pytest.mark.order_system

ORDER = "ORD-7731"
TIMEOUTS = {"connect": 2.0, "read": 5.0, "write": 5.0, "pool": 2.0}


class Counting(httpx.BaseTransport):
    """Forwards every request to the real order system and remembers what went out.

    ``unavailable_after_apply``: answer the contract's ``503 unavailable`` to the apply once the
    receiver committed it (an intermediary that lies: "nothing was applied")."""

    def __init__(self, *, unavailable_after_apply: bool = False) -> None:
        self.inner = httpx.HTTPTransport()
        self.sent: list[tuple[str, str]] = []
        self.unavailable_after_apply = unavailable_after_apply

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((request.method, request.url.path))
        response = self.inner.handle_request(request)
        writes = request.method == "POST" and request.url.path.endswith("/operations")
        if writes and self.unavailable_after_apply:
            response.read()
            response.close()
            return httpx.Response(503, json={"error": "unavailable", "detail": "try later"})
        return response

    def close(self) -> None:
        self.inner.close()

    @property
    def writes(self) -> list[tuple[str, str]]:
        return [s for s in self.sent if s[0] == "POST" and s[1].endswith("/operations")]


def _client(live_orders, transport: Counting) -> OrderSystemClient:
    return OrderSystemClient(live_orders.base_url, timeouts=TIMEOUTS, transport=transport)


def test_a_first_send_of_a_fresh_operation_costs_one_call(approved_case, live_orders):
    case = approved_case()
    source_verified()  # the dispatcher compared the source with these records a moment ago
    transport = Counting()

    with _client(live_orders, transport) as client:
        assert apply_case(case_id=case.pk, client=client) == "done"

    # Measured before look-before-write existed: one POST per apply, nothing else.
    assert transport.sent == [("POST", f"/orders/{ORDER}/operations")]
    assert len(live_orders.state(ORDER)["operations"]) == 1


def test_an_operation_applied_behind_a_lying_503_is_found_and_not_written_again(
    approved_case, live_orders
):
    case = approved_case()
    source_verified()
    liar = Counting(unavailable_after_apply=True)
    with _client(live_orders, liar) as client:
        first = apply_case(case_id=case.pk, client=client)
    assert first == "transient"  # the answer said nothing was applied; the order did change
    case.refresh_from_db()
    assert case.status == Status.READY
    assert len(live_orders.state(ORDER)["operations"]) == 1

    honest = Counting()
    with _client(live_orders, honest) as client:
        second = apply_case(case_id=case.pk, client=client)

    assert second == "done"
    assert honest.writes == []  # looked, found, recorded: no second write
    assert ("GET", f"/operations/DATE-{case.number}-1") in honest.sent
    state = live_orders.state(ORDER)
    assert len(state["operations"]) == 1
    operation = Operation.objects.get(case=case)
    assert operation.confirmed_at is not None
    assert operation.result_order_version == state["order"]["version"]
    assert EvidenceReference.objects.filter(case=case, kind="operation_lookup").exists()
    assert len(mail.outbox) == 1
    case.refresh_from_db()
    assert case.status == Status.DONE


def test_an_operation_absent_after_a_previous_attempt_is_looked_up_then_written(
    approved_case, live_orders
):
    case = approved_case()
    source_verified()
    # A previous attempt that got as far as "submission may have begun" and then failed with
    # nothing applied (the order system was down before the write).
    live_orders.set_fault("unavailable", path_prefix=f"/orders/{ORDER}/operations")
    assert apply_case(case_id=case.pk) == "transient"
    assert Attempt.objects.filter(case=case, submitted_at__isnull=False).count() == 1

    transport = Counting()
    with _client(live_orders, transport) as client:
        assert apply_case(case_id=case.pk, client=client) == "done"

    assert transport.sent == [
        ("GET", f"/operations/DATE-{case.number}-1"),
        ("POST", f"/orders/{ORDER}/operations"),
    ]
    assert len(live_orders.state(ORDER)["operations"]) == 1


def test_a_key_found_with_another_change_is_held_for_a_person(approved_case, live_orders):
    case = approved_case()
    source_verified()
    live_orders.set_fault("unavailable", path_prefix=f"/orders/{ORDER}/operations")
    assert apply_case(case_id=case.pk) == "transient"
    operation = Operation.objects.get(case=case)
    _apply_other_body(live_orders, operation, case)  # the key was used for another date

    transport = Counting()
    with _client(live_orders, transport) as client:
        outcome = apply_case(case_id=case.pk, client=client)

    assert outcome == "lookup_mismatch"
    assert transport.writes == []
    case.refresh_from_db()
    assert case.status == Status.HELD
    assert "another change" in case.last_error
    assert CaseEvent.objects.filter(case=case, detail__outcome="lookup_mismatch").exists()
    assert Operation.objects.get(pk=operation.pk).confirmed_at is None


def _apply_other_body(live_orders, operation: Operation, case) -> None:
    """Apply the case's key at the order system with a date one day later (another body)."""
    from approvals.grants import grant_issue
    from cases.fencing import next_fencing_token

    date = dt.date.fromisoformat(operation.change["delivery_date"])
    other = {"kind": "delivery_date", "delivery_date": str(date + dt.timedelta(days=1))}
    grant = grant_issue(
        operation_key=operation.key,
        order_id=operation.order_id,
        change=other,
        approval_id="AP-OTHER",
        expires_at=timezone.now() + dt.timedelta(hours=1),
    )
    response = live_orders.client.post(
        f"/orders/{operation.order_id}/operations",
        json={
            "operation_key": operation.key,
            "change": other,
            "expected_version": case.last_checked_order_version,
            "fencing_token": next_fencing_token(),
            "approval_grant": grant,
        },
    )
    assert response.status_code == 201, response.text


def test_a_case_recovered_after_a_restore_looks_before_its_first_write(approved_case, live_orders):
    """After a restore these records may lack a send that happened: a recovered case whose
    operation was proven absent still looks it up before it writes -- no attempt of it shows a
    send, so only the recovery in its history says the write may not be the first."""
    from reconciliation.restore_recovery import recover_after_restore

    case = approved_case()
    summary = recover_after_restore(progress=lambda line: None)
    assert summary["outcomes"] == {"absent": 1}
    assert Case.objects.get(pk=case.pk).status == Status.READY
    source_verified()
    transport = Counting()

    with _client(live_orders, transport) as client:
        assert apply_case(case_id=case.pk, client=client) == "done"

    key = Operation.objects.get(case=case).key
    assert transport.sent == [
        ("GET", f"/operations/{key}"),
        ("POST", f"/orders/{ORDER}/operations"),
    ]
    assert len(live_orders.state(ORDER)["operations"]) == 1
