"""The case page's actions, clicked as a person clicks them: each takes effect and the page
shows the new state, or the page refuses in plain words."""

from __future__ import annotations

import pytest

from cases.models import Case, EvidenceReference
from cases.services import case_update_followup
from tests.browser.conftest import (
    act,
    assert_plain_outcome,
    login,
    open_case,
    panel_status,
    press,
    shot,
)

pytestmark = [pytest.mark.browser, pytest.mark.order_system]


def test_lead_reconciles_a_held_case_and_the_page_shows_it_proven_applied(
    page, held_case, live_orders
):
    case = held_case()
    login(page, "lead")
    open_case(page, case)
    shot(page, "held")
    assert panel_status(page).startswith("Held")

    act(page, "Reconcile now")
    shot(page, "reconciled")

    level, text = assert_plain_outcome(page)
    assert level == "success", f"Reconciling was refused: {text}"
    # The lost answer's change was applied: the consistent lookup finds it, and the steps
    # after the apply (notify, close) resume from there; nothing is sent twice.
    assert "applied" in text
    # Its change applied: headed so, not "Ready to apply" (nothing is to be sent).
    assert panel_status(page) == "Applied: finishing the steps after it", text
    assert "Proven applied" in page.locator(".hf-panel").first.inner_text()
    fresh = Case.objects.get(pk=case.pk)
    assert fresh.status == "ready"
    assert fresh.operations.get().confirmed_at is not None
    assert len(live_orders.state(case.order_id)["operations"]) == 1


def legal_hold_shown(page) -> str:
    """The 'Legal hold' field as the page shows it (the admin's boolean icon)."""
    return page.locator(".field-legal_hold img").first.get_attribute("alt")


def test_lead_places_and_lifts_a_legal_hold(page, reviewable_case):
    case, _ = reviewable_case()
    login(page, "lead")
    open_case(page, case)
    assert legal_hold_shown(page) == "False"

    act(page, "Place a legal hold")
    shot(page, "hold-placed")
    level, text = assert_plain_outcome(page)
    assert level == "success", f"Placing the hold was refused: {text}"
    assert legal_hold_shown(page) == "True"
    assert page.locator("#content").get_by_text("Lift the legal hold").count()
    assert Case.objects.get(pk=case.pk).legal_hold

    act(page, "Lift the legal hold")
    shot(page, "hold-lifted")
    level, text = assert_plain_outcome(page)
    assert level == "success", f"Lifting the hold was refused: {text}"
    assert legal_hold_shown(page) == "False"
    assert not Case.objects.get(pk=case.pk).legal_hold


def test_a_stale_page_is_refused_in_plain_words(page, reviewable_case, staff):
    case, _ = reviewable_case()
    login(page, "lead")
    open_case(page, case)
    page.locator("#content").get_by_role("link", name="Place a legal hold").first.click()
    page.wait_for_load_state()
    shot(page, "confirm-page")
    # Someone else changes the case after this page was read.
    case_update_followup(
        case=Case.objects.get(pk=case.pk),
        expected_version=case.version,
        actor=staff["backup"],
        outstanding_question="Does the customer accept a Friday?",
        next_check_at=None,
        reason="Asked the customer",
    )

    page.get_by_label("Reason").fill("Litigation notice received")
    press(page, "Place the legal hold")
    shot(page, "refused")

    level, text = assert_plain_outcome(page)
    assert level == "error", f"A stale page was not refused: {text}"
    assert not Case.objects.get(pk=case.pk).legal_hold


def test_agent_records_an_evidence_reference_through_the_form(page, reviewable_case):
    case, _ = reviewable_case()
    login(page, "agent")
    open_case(page, case)

    page.get_by_text("Record an evidence reference", exact=True).first.click()
    form = page.locator("form", has=page.get_by_role("button", name="Record evidence"))
    form.get_by_label("Source system").select_option(label="Phone call")
    form.get_by_label("External reference").fill("CALL-2026-0412")
    form.get_by_label("Kind").fill("customer_request")
    form.get_by_label("Permitted basis").select_option(
        label="Performance of the customer's contract"
    )
    form.get_by_label("Summary").fill("The customer confirmed the new date by phone")
    shot(page, "evidence-form")
    press(page, "Record evidence")
    shot(page, "evidence-recorded")

    level, text = assert_plain_outcome(page)
    assert level == "success", f"Recording evidence was refused: {text}"
    assert "CALL-2026-0412" in page.locator("#content").inner_text()
    assert EvidenceReference.objects.filter(
        case=case, external_reference="CALL-2026-0412", recorded_by__contains="agent"
    ).exists()
