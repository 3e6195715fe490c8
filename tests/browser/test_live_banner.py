"""An open queue page notices within seconds that a case in it changed, and says so."""

from __future__ import annotations

import time

import pytest

from cases.models import Case
from cases.services import case_update_followup
from tests.browser.conftest import PHONE, login, shot

pytestmark = [pytest.mark.browser, pytest.mark.order_system]

BANNER = ".hf-live .hf-live-banner"


def test_held_queue_shows_a_reload_banner_when_a_held_case_changes(open_page, held_case, staff):
    held = held_case()
    page = open_page(PHONE)
    login(page, "lead")
    page.goto("/admin/cases/heldcase/")
    page.wait_for_load_state()
    assert held.reference in page.locator("#content").inner_text()
    region = page.locator(".hf-live")
    assert region.get_attribute("aria-live") == "polite"

    # Nothing changed: a few polls later the page still has nothing to confess.
    page.wait_for_timeout(3_500)
    assert page.locator(BANNER).count() == 0

    # Another person updates the follow-up while the page stays open.
    fresh = Case.objects.get(pk=held.pk)
    case_update_followup(
        case=fresh,
        expected_version=fresh.version,
        actor=staff["backup"],
        outstanding_question="Did the order system apply DATE-1?",
        reason="Asked the order desk",
    )
    changed_at = time.monotonic()

    banner = page.locator(BANNER)
    banner.wait_for(state="visible", timeout=10_000)
    assert time.monotonic() - changed_at <= 10
    assert banner.inner_text().startswith("This queue changed since you opened it (1 case now).")
    assert page.get_by_role("button", name="Reload").is_visible()
    shot(page, "held-queue-changed")
    # The banner itself fits a 390px window (the queue's table is the layout suite's concern).
    box = page.locator(BANNER).evaluate(
        "el => ({right: el.getBoundingClientRect().right, scroll: el.scrollWidth,"
        " client: el.clientWidth, inner: window.innerWidth})"
    )
    assert box["right"] <= box["inner"], box
    assert box["scroll"] <= box["client"], box

    page.get_by_role("button", name="Reload").click()
    page.wait_for_load_state()
    page.wait_for_timeout(3_500)
    assert page.locator(BANNER).count() == 0, "the reloaded page is current"
