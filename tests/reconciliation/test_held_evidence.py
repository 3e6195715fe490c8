"""Deciding a held case from its evidence: the order system's consistent read in words (found
with its change and version / absent / absent after a fence / unreachable), the order events
about the order linked beside it, a settlement form that cites them, and a held queue whose
evidence is words, not ids. Against the live reference order system."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from approvals.models import Operation
from cases.kernel import Worker
from cases.models import Status
from reconciliation.apply import apply_case
from reconciliation.claims import attempts_expire_leases, case_claim
from reconciliation.held_evidence import held_evidence
from reconciliation.inbound import inbound_event_process, inbound_event_receive
from reconciliation.settle import case_reconcile
from tests.cases.helpers import reload

pytestmark = pytest.mark.order_system


def _held_before_submit(approved_case):
    """Claimed, then the worker went silent before sending: held by the watchdog."""
    case = approved_case()
    case_claim(case_id=case.pk, worker=Worker("worker:test:held-evidence"))
    assert attempts_expire_leases(now=timezone.now() + dt.timedelta(hours=1)) == 1
    case = reload(case)
    assert case.status == Status.HELD
    return case


def _held(approved_case, live_orders):
    case = approved_case()
    live_orders.set_fault("drop_after_commit", path_prefix=f"/orders/{case.order_id}/operations")
    assert apply_case(case_id=case.pk) == "effect_unknown"
    live_orders.clear_faults()
    case = reload(case)
    assert case.status == Status.HELD
    return case


def test_a_held_case_applied_at_the_order_system_reads_found_with_its_version(
    approved_case, live_orders, lead
):
    case = _held(approved_case, live_orders)
    key = Operation.objects.get(case=case).key

    evidence = held_evidence(lead, case)

    assert evidence.read.kind == "found"
    assert evidence.read.order_version == 2
    assert f"has {key} applied" in evidence.read.words
    assert "order at version 2" in evidence.read.words
    assert "The change IS applied" in evidence.read.words


def test_an_operation_never_received_reads_absent_and_not_yet_proof(
    approved_case, live_orders, lead
):
    case = _held_before_submit(approved_case)

    evidence = held_evidence(lead, case)

    assert evidence.read.kind == "absent"
    assert "not proof yet" in evidence.read.words


def test_an_absent_operation_after_a_fence_above_every_attempt_is_proof(
    approved_case, live_orders, lead, settings
):
    case = _held_before_submit(approved_case)
    # A reconciliation raises the fence; its lookup then fails, so the case stays held with
    # the fence recorded.
    live_orders.set_fault("unavailable", path_prefix="/operations/")
    assert case_reconcile(case_id=case.pk) == "still held"
    live_orders.clear_faults()

    evidence = held_evidence(lead, reload(case))

    assert evidence.read.kind == "absent_fenced"
    assert "the change was NOT applied" in evidence.read.words


def test_an_unreachable_order_system_is_said_so_in_words(approved_case, live_orders, lead):
    case = _held(approved_case, live_orders)
    live_orders.set_fault("unavailable", path_prefix="/operations/")

    evidence = held_evidence(lead, case)

    assert evidence.read.kind == "unreachable"
    assert "said it was unavailable" in evidence.read.words
    assert "unavailable)" not in evidence.read.words  # no bare error code


def test_the_held_page_shows_the_read_links_the_order_events_and_the_form_cites_them(
    approved_case, live_orders, lead, client
):
    case = _held(approved_case, live_orders)
    receipt = inbound_event_receive(
        event_id="evt-held-1",
        type="order.updated",
        order_id=case.order_id,
        order_version=2,
        occurred_at=timezone.now() - dt.timedelta(seconds=5),
        body={"event_id": "evt-held-1", "order_id": case.order_id, "order_version": 2},
    )
    inbound_event_process(event_id=receipt.event.event_id)
    client.force_login(lead)

    page = client.get(reverse("admin:cases_case_change", args=[case.pk]))

    html = page.content.decode()
    evidence = page.context["held_evidence"]
    assert evidence.read.kind == "found"
    assert "What the order system shows" in html
    event_url = reverse("admin:reconciliation_inboundevent_change", args=[receipt.event.pk])
    assert f'href="{event_url}"' in html
    assert "Order event order.updated of" in evidence.events[0].words
    assert f"{case.order_id} at version 2" in evidence.events[0].words
    # The settlement form cites the read and the event, and starts from what the read shows.
    assert "This settlement rests on:" in html
    assert evidence.citations == [evidence.read.words, evidence.events[0].words]
    form = page.context["settle_form"]
    assert form.initial["order_version"] == 2
    assert form.initial["external_reference"].startswith("operation:")
    assert "outcome" not in form.initial  # the person still chooses what it shows


def test_an_agent_sees_the_read_but_not_the_order_events(approved_case, live_orders, agent, client):
    case = _held(approved_case, live_orders)
    client.force_login(agent)

    page = client.get(reverse("admin:cases_case_change", args=[case.pk]))

    evidence = page.context["held_evidence"]
    assert evidence.read.kind == "found"
    assert evidence.events == []
    assert evidence.events_url == ""


def test_the_held_queue_shows_the_last_finding_in_words(approved_case, live_orders, lead, client):
    case = _held(approved_case, live_orders)
    live_orders.set_fault("unavailable", path_prefix=f"/orders/{case.order_id}/fence")
    assert case_reconcile(case_id=case.pk) == "still held"
    live_orders.clear_faults()
    client.force_login(lead)

    html = client.get(reverse("admin:cases_heldcase_changelist")).content.decode()

    assert "the order system said it was unavailable" in html
    assert "(unavailable): not proof" not in html


def test_the_held_queue_links_each_orders_events_for_a_lead_only(
    approved_case, live_orders, lead, agent, client
):
    case = _held(approved_case, live_orders)
    url = reverse("admin:cases_heldcase_changelist")

    client.force_login(lead)
    as_lead = client.get(url).content.decode()
    client.force_login(agent)
    as_agent = client.get(url).content.decode()

    events = reverse("admin:reconciliation_inboundevent_changelist")
    assert f'href="{events}?q={case.order_id}"' in as_lead
    assert f"Order events about {case.order_id}" in as_lead
    assert events not in as_agent  # an agent may not see them: no link to a refusal


def test_a_slow_order_system_does_not_hold_the_page(approved_case, live_orders, lead):
    import time

    from reconciliation.held_evidence import PAGE_TIMEOUT

    case = _held(approved_case, live_orders)
    live_orders.set_fault("latency", path_prefix="/operations/", seconds=PAGE_TIMEOUT + 2)

    started = time.monotonic()
    evidence = held_evidence(lead, case)
    took = time.monotonic() - started

    assert evidence.read.kind == "unreachable"
    assert "did not answer" in evidence.read.words
    assert took < PAGE_TIMEOUT + 1.5, took
