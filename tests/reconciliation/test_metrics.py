"""``/metrics``: what an operator's Prometheus sees, scraped through the real endpoint.

The desk's state comes from the database at scrape time (a case held by the real apply path
shows on the next scrape); what processes do is counted where it happens (order-system answers,
apply outcomes, lease expiries, takeovers, the approve → applied latency). In this test process
prometheus-client keeps values in memory (no ``PROMETHEUS_MULTIPROC_DIR``); the counters are
process-wide, so each test compares a scrape after with one before.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from cases.kernel import Worker
from cases.models import Attempt, Case, Status, WaitingOn
from reconciliation.apply import apply_case
from reconciliation.claims import attempts_expire_leases, case_claim
from reconciliation.scrape import oldest_in_status
from reconciliation.settle import case_reconcile
from tests.support.order_system import DEFAULT_WEBHOOK_SECRET, webhook_headers

WORKER = Worker("metrics-test")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client: Client | None = None, **headers: str) -> Samples:
    """One GET /metrics, parsed: (sample name, sorted labels) → value."""
    response = (client or Client()).get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_a_case_held_by_the_apply_path_shows_on_the_next_scrape(
    approved_case, live_orders, django_capture_on_commit_callbacks
):
    """The worker's write reaches the order system and its answer is lost: the case is held
    (effect unknown). The very next scrape counts it, and the lost answer and the attempt's
    outcome are counted too."""
    case = approved_case()
    before = scrape()
    assert value(before, "holdfast_cases_open", status="ready") >= 1

    live_orders.set_fault("drop_after_commit", path_prefix=f"/orders/{case.order_id}/operations")
    with django_capture_on_commit_callbacks(execute=True):
        assert apply_case(case_id=case.pk) == "effect_unknown"
    case.refresh_from_db()
    assert case.status == Status.HELD

    after = scrape()
    assert value(after, "holdfast_cases_open", status="held") == 1
    assert value(after, "holdfast_cases_open", status="ready") == (
        value(before, "holdfast_cases_open", status="ready") - 1
    )
    held_for = value(after, "holdfast_cases_oldest_in_status_seconds", status="held")
    assert 0 <= held_for < 60
    counted = "holdfast_apply_attempts_total"
    assert value(after, counted, outcome="effect_unknown") == (
        value(before, counted, outcome="effect_unknown") + 1
    )
    answers = "holdfast_order_system_requests_total"
    lost = value(after, answers, call="apply_operation", outcome="no_answer") - value(
        before, answers, call="apply_operation", outcome="no_answer"
    )
    assert lost == 1
    assert value(after, "holdfast_database_up") == 1


def test_an_applied_change_counts_its_answer_latency_and_the_time_since_its_approval(
    approved_case, live_orders
):
    case = approved_case()
    before = scrape()
    assert apply_case(case_id=case.pk) == "done"
    after = scrape()

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("holdfast_apply_attempts_total", outcome="applied") == 1
    assert delta("holdfast_order_system_requests_total", call="apply_operation", outcome="201") == 1
    assert delta("holdfast_order_system_request_seconds_count", call="apply_operation") == 1
    assert delta("holdfast_approval_to_applied_seconds_count") == 1
    waited = delta("holdfast_approval_to_applied_seconds_sum")
    assert 0 < waited < 60
    # The histogram's buckets hold it: at most a minute after its approval.
    assert delta("holdfast_approval_to_applied_seconds_bucket", le="60.0") == 1
    assert value(after, "holdfast_cases_open", status="ready") == 0


def test_a_lease_expiry_and_the_takeover_after_reconciliation_are_counted(
    approved_case, live_orders, django_capture_on_commit_callbacks
):
    """D-41-a1 claims and goes missing; the watchdog holds the case; reconciliation fences and
    proves the operation absent; D-41-a2 takes the same operation over and applies it."""
    case = approved_case()
    before = scrape()
    attempt = case_claim(case_id=case.pk, worker=WORKER)
    with django_capture_on_commit_callbacks(execute=True):
        assert attempts_expire_leases(now=attempt.lease_expires_at + dt.timedelta(seconds=1)) == 1
    middle = scrape()
    assert value(middle, "holdfast_lease_expiries_total") == (
        value(before, "holdfast_lease_expiries_total") + 1
    )
    assert value(middle, "holdfast_cases_open", status="held") == 1

    assert case_reconcile(case_id=case.pk) == "absent"
    with django_capture_on_commit_callbacks(execute=True):
        assert apply_case(case_id=case.pk) == "done"
    after = scrape()
    takeovers = "holdfast_apply_takeovers_total"
    assert value(after, takeovers, after="lease_expired") == (
        value(before, takeovers, after="lease_expired") + 1
    )
    assert Attempt.objects.filter(case=case).count() == 2
    assert len(live_orders.state(case.order_id)["operations"]) == 1


def test_a_retry_after_a_definite_refusal_is_not_a_takeover(
    approved_case, live_orders, django_capture_on_commit_callbacks
):
    """503 unavailable promises nothing was applied: the next attempt is a retry."""
    case = approved_case()
    live_orders.set_fault("unavailable", path_prefix=f"/orders/{case.order_id}/operations")
    before = scrape()
    with django_capture_on_commit_callbacks(execute=True):
        assert apply_case(case_id=case.pk) == "transient"
    live_orders.clear_faults()
    Case.objects.filter(pk=case.pk).update(next_check_at=timezone.now())
    with django_capture_on_commit_callbacks(execute=True):
        assert apply_case(case_id=case.pk) == "done"
    after = scrape()

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("holdfast_order_system_requests_total", call="apply_operation", outcome="503") == 1
    assert delta("holdfast_apply_attempts_total", outcome="transient") == 1
    assert (
        sum(
            v - value(before, name, **dict(labels))
            for (name, labels), v in after.items()
            if name == "holdfast_apply_takeovers_total"
        )
        == 0
    )


def test_the_held_age_counts_from_the_hold_not_from_the_last_update(
    approved_case, live_orders, django_capture_on_commit_callbacks
):
    case = approved_case()
    live_orders.set_fault("drop_after_commit", path_prefix=f"/orders/{case.order_id}/operations")
    assert apply_case(case_id=case.pk) == "effect_unknown"
    held_at = case.events.filter(to_status=Status.HELD).latest("id").created_at
    # Later facts about the held case move updated_at, never when it was held.
    Case.objects.filter(pk=case.pk).update(updated_at=held_at + dt.timedelta(minutes=50))
    now = held_at + dt.timedelta(hours=1)
    (family,) = oldest_in_status(now)
    ages = {sample.labels["status"]: sample.value for sample in family.samples}
    assert ages == {"held": 3600.0, "needs_attention": 0.0}


def test_overdue_follow_ups_are_counted_by_whom_they_wait_on(make_case, settings):
    settings.FOLLOW_UP_GRACE_MINUTES = 5
    late = make_case()
    due_now = make_case()
    Case.objects.filter(pk=late.pk).update(
        next_check_at=timezone.now() - dt.timedelta(minutes=30), waiting_on=WaitingOn.APPROVERS
    )
    Case.objects.filter(pk=due_now.pk).update(
        next_check_at=timezone.now() - dt.timedelta(minutes=1), waiting_on=WaitingOn.APPROVERS
    )
    samples = scrape()
    assert value(samples, "holdfast_cases_overdue", waiting_on="approvers") == 1
    assert value(samples, "holdfast_cases_overdue", waiting_on="owner") == 0
    assert 29 * 60 < value(samples, "holdfast_cases_overdue_oldest_seconds") < 31 * 60


def test_a_stored_webhook_waiting_to_be_processed_is_backlog(db, settings, monkeypatch):
    """Stored on receipt, its processing queued (and not run here): one pending event."""
    settings.ORDER_WEBHOOK_SECRET = DEFAULT_WEBHOOK_SECRET
    monkeypatch.setattr("cases.scheduling.enqueue", lambda *call: None)
    body = json.dumps(
        {
            "event_id": "evt-metrics-1",
            "type": "order.updated",
            "order_id": "ORD-7731",
            "order_version": 4,
            "occurred_at": "2026-03-02T09:15:00Z",
        }
    ).encode()
    response = Client().post(
        "/api/hooks/orders/",
        data=body,
        content_type="application/json",
        headers=webhook_headers(body),
    )
    assert response.status_code == 202, response.content
    samples = scrape()
    assert value(samples, "holdfast_inbound_events_backlog", processing="pending") == 1
    assert value(samples, "holdfast_inbound_events_backlog", processing="failed") == 0
    assert value(samples, "holdfast_inbound_events_oldest_pending_seconds") < 60


def test_metrics_answer_only_the_bearer_token_when_one_is_set(db, settings):
    settings.METRICS_TOKEN = "m" * 40
    client = Client()
    assert client.get("/metrics").status_code == 401
    refused = client.get("/metrics", HTTP_AUTHORIZATION="Bearer " + "m" * 39 + "n")
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert b"holdfast_" not in refused.content
    assert client.get("/metrics", HTTP_AUTHORIZATION="Token " + "m" * 40).status_code == 401
    assert scrape(client, HTTP_AUTHORIZATION="Bearer " + "m" * 40)


def test_metrics_are_open_in_development_and_gone_when_turned_off(db, settings):
    settings.METRICS_TOKEN = ""
    assert Client().get("/metrics").status_code == 200
    settings.METRICS_ENABLED = False
    assert Client().get("/metrics").status_code == 404


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_metrics_are_read_only(db, method):
    assert getattr(Client(), method)("/metrics").status_code == 405
