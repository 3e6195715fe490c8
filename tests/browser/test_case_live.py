"""An open case page updates in place within seconds of a change behind it: its status, path,
timeline and buttons, without a reload and without losing what the person is typing."""

from __future__ import annotations

import re
import time

import pytest

from cases.services import case_update_followup
from tests.browser.conftest import login, open_case, panel_status, press, shot

pytestmark = [pytest.mark.browser, pytest.mark.order_system]

UPDATE_MS = 10_000


def test_an_approval_in_another_window_updates_the_open_case_page_in_place(
    open_page, reviewable_case
):
    case, proposal = reviewable_case()
    page = open_page()
    login(page, "backup")
    open_case(page, case)
    assert panel_status(page) == "Awaiting review"
    # The buttons as drawn at the first version: marked, to see them replaced.
    page.evaluate("document.querySelector('.hf-actions').dataset.drawnFirst = 'yes'")
    # The person starts recording evidence and is still typing when the approval lands.
    page.locator("summary", has_text="Record an evidence reference").click()
    typed = "Customer confirmed Friday by phone, ticket 4411"
    page.locator("#id_evidence-summary").fill(typed)
    # A marker on the page: a reload would lose it.
    page.evaluate("window.__notReloaded = true")

    approver = open_page()
    login(approver, "approver")
    approver.goto(f"/admin/approvals/proposal/{proposal.pk}/change/")
    press(approver, "Approve this exact proposal")
    approved_at = time.monotonic()

    page.wait_for_function(
        "() => /Ready to apply/.test(document.querySelector('.hf-panel h2').innerText)",
        timeout=UPDATE_MS,
    )
    took = time.monotonic() - approved_at
    assert took <= 8, f"the page took {took:.1f} s to show the approval"
    assert page.evaluate("window.__notReloaded") is True, "the page was reloaded"
    assert panel_status(page) == "Ready to apply"
    assert page.locator(".hf-path-now").inner_text().endswith("Ready to apply")
    timeline = page.locator("section.hf-timeline").inner_text()
    assert re.search(r"approv", timeline, re.I), timeline
    # The buttons were drawn again for the new state (the registry's, for this person).
    assert page.locator(".hf-actions[data-drawn-first]").count() == 0
    assert page.locator(".hf-actions").count() == 1
    # What the person typed is still there, and they are told the case moved under it.
    assert page.locator("#id_evidence-summary").input_value() == typed
    assert "what you typed is kept" in page.locator(".hf-live-kept").inner_text()
    # The admin's read-only rows below follow too: no "Awaiting review" left anywhere.
    assert page.locator(".field-status .readonly").inner_text() == "Ready to apply"
    assert "Awaiting review" not in page.locator("#content-main").inner_text()
    note = page.locator(".hf-live-note").inner_text()
    assert f"{case.reference} updated in place: now Ready to apply" in note
    shot(page, "updated-in-place")


def test_a_clean_page_swaps_every_region_and_stays_current(page, case, staff):
    login(page, "lead")
    open_case(page, case)
    page.evaluate("window.__notReloaded = true")
    case.refresh_from_db()

    case_update_followup(
        case=case,
        expected_version=case.version,
        actor=staff["backup"],
        outstanding_question="Depot says Friday is full?",
    )

    page.locator(".hf-live-note").wait_for(timeout=UPDATE_MS)
    assert "Depot says Friday is full?" in page.locator(".hf-panel").first.inner_text()
    assert f"(version {case.version + 1})" in page.locator(".hf-panel h2").first.inner_text()
    assert page.evaluate("window.__notReloaded") is True
    assert page.locator(".hf-live-kept").count() == 0  # nothing was being typed
    # The swapped buttons carry the new version: pressing one is not refused as stale.
    assert (
        page.locator(
            f".hf-actions input[name=expected_version][value='{case.version + 1}']"
        ).count()
        or not page.locator(".hf-actions input[name=expected_version]").count()
    )
