"""An open case page notices within seconds that the case changed behind it."""

from __future__ import annotations

import pytest

from cases.services import case_update_followup
from tests.browser.conftest import login, open_case, shot

pytestmark = [pytest.mark.browser, pytest.mark.order_system]


def test_case_page_shows_a_reload_banner_when_the_case_changes(page, case, staff):
    login(page, "lead")
    open_case(page, case)
    assert page.locator(".hf-live-banner").count() == 0
    case.refresh_from_db()

    case_update_followup(
        case=case,
        expected_version=case.version,
        actor=staff["backup"],
        outstanding_question="Depot says Friday is full?",
    )

    banner = page.locator(".hf-live-banner")
    banner.wait_for(timeout=10_000)
    text = banner.inner_text()
    assert f"{case.reference} changed since you opened it" in text
    assert f"version {case.version + 1}" in text
    shot(page, "banner")
    page.get_by_role("button", name="Reload").click()
    page.wait_for_load_state()
    assert "Depot says Friday is full?" in page.locator(".hf-panel").inner_text()
