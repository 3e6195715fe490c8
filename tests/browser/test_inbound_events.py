"""A lead reads the inbound order events of the team's orders, as a person does: the events
page lists the events of their cases' orders, whose account the order system reported when
processing read it (``inbound_events_for``: the account stored with the event), and not the
events of an order none of their cases is on; the processing filter narrows them; an event
opens read-only."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.browser.conftest import login, shot

pytestmark = [pytest.mark.browser, pytest.mark.order_system]


def _received(event_id: str, order_id: str) -> str:
    from reconciliation.inbound import inbound_event_process, inbound_event_receive

    inbound_event_receive(
        event_id=event_id,
        type="order.updated",
        order_id=order_id,
        order_version=2,
        occurred_at=dt.datetime(2026, 12, 1, 9, 15, tzinfo=dt.UTC),
        body={"event_id": event_id, "order_id": order_id, "order_version": 2},
    )
    # Processing reads the order's account from the live order system, over HTTP.
    return inbound_event_process(event_id=event_id)


def _rows(page) -> list[str]:
    return page.locator("#result_list tbody tr").all_inner_texts()


def test_a_lead_sees_the_events_of_the_teams_orders_only(open_page, make_case):
    from reconciliation.models import InboundEvent

    case = make_case()
    assert _received("evt-team-order", case.order_id) == "processed"
    assert _received("evt-no-case", "ORD-7732") == "processed"  # no case of ours on it
    ours = InboundEvent.objects.get(event_id="evt-team-order")
    assert (ours.account_reference, ours.account) == (case.account.reference, case.account)

    page = open_page()
    login(page, "lead")
    page.goto("/admin/reconciliation/inboundevent/")
    shot(page, "inbound-events-lead")
    rows = _rows(page)
    assert len(rows) == 1, rows
    assert "evt-team-order" in rows[0], rows
    assert case.order_id in rows[0], rows

    # The processing filter, as the sidebar offers it.
    page.get_by_role("link", name="Failed", exact=True).click()
    page.wait_for_load_state()
    shot(page, "inbound-events-lead-failed")
    assert "processing__exact=failed" in page.url
    assert not _rows(page)
    page.get_by_role("link", name="Processed", exact=True).click()
    page.wait_for_load_state()
    assert [r for r in _rows(page) if "evt-team-order" in r], _rows(page)

    # The event opens, read-only: what arrived and what processing did.
    page.locator("#result_list th.field-received a").first.click()
    page.wait_for_load_state()
    shot(page, "inbound-event-lead")
    text = page.locator("#content").inner_text()
    assert "evt-team-order" in text, text
    assert case.reference in text, text  # the outcome names the case it reached
    assert not page.locator("input[type=submit][name=_save]").count()

    # The order none of the team's cases is on is not theirs to open either.
    other = InboundEvent.objects.get(event_id="evt-no-case")
    page.goto(f"/admin/reconciliation/inboundevent/{other.pk}/change/")
    page.wait_for_load_state()
    assert "evt-no-case" not in page.locator("#content").inner_text()
    assert f"/inboundevent/{other.pk}/change/" not in page.url  # sent back: no such event


def test_an_operator_reads_a_failed_event_whole_on_a_desktop(open_page, make_case, live_orders):
    """On a 1280px desktop, beside the navigation and the filters, the inbound events list
    shows every column without scrolling the table sideways: for a failed event the state
    with its attempts and next try, and the error (before, the nine columns were cut after
    the processing state, the error behind a sideways scroll)."""
    import uuid

    from django.contrib.auth import get_user_model

    from tests.browser.conftest import DESKTOP
    from tests.browser.test_layout import _HIDDEN_SIDEWAYS_JS

    get_user_model().objects.create_superuser("operator", "", "pw")
    case = make_case()
    assert _received(f"evt-{uuid.uuid4()}", case.order_id) == "processed"
    live_orders.set_fault("unavailable", path_prefix=f"/orders/{case.order_id}", times=None)
    try:
        failed_id = f"evt-{uuid.uuid4()}"
        assert _received(failed_id, case.order_id) == "failed"
    finally:
        live_orders.clear_faults()

    page = open_page(DESKTOP)
    login(page, "operator")
    page.goto("/admin/reconciliation/inboundevent/")
    page.wait_for_load_state()
    shot(page, "inbound-events-operator")
    assert len(_rows(page)) == 2, _rows(page)
    assert not page.evaluate(_HIDDEN_SIDEWAYS_JS), page.evaluate(_HIDDEN_SIDEWAYS_JS)
    results = page.locator("#changelist .results").bounding_box()
    for cell in page.locator("#result_list td.field-short_error").all():
        box = cell.bounding_box()
        assert box["x"] + box["width"] <= results["x"] + results["width"] + 1, box
        assert box["width"] >= 100, box
    failed = next(row for row in _rows(page) if failed_id in row.replace("\n", ""))
    assert "Failed, 1 attempt, next " in failed, failed
    assert "OrderSystem" in failed or "unavailable" in failed.lower(), failed
