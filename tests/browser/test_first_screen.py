"""The first screen of a case page answers why it waits, who must answer, when, and the next
action: at 1280x800 and at 390x844 each of those elements lies within the window's height
without scrolling (the held page was 4,510 px tall at 1280 wide, and on a phone "Why it waits"
started 1,158 px down); on the held page with its evidence panel filled (a finding and an
order event) too, whose panel follows the answers."""

from __future__ import annotations

import pytest

from tests.browser.conftest import DESKTOP, PHONE, login, shot

pytestmark = [pytest.mark.browser, pytest.mark.order_system]

# Each answer's element on the case page (templates/admin/cases/case/change_form.html).
ANSWERS = {
    "why it waits": "#hf-why",
    "who must answer": "#hf-who, #hf-responsible",
    "when": "#hf-follow-up",
    "the next action": "#hf-next",
}

_BOXES_JS = """
(selectors) => Object.fromEntries(Object.entries(selectors).map(([name, selector]) => {
  const el = document.querySelector(selector);
  if (!el) return [name, null];
  const box = el.getBoundingClientRect();
  return [name, {top: Math.round(box.top + window.scrollY),
                 bottom: Math.round(box.bottom + window.scrollY),
                 text: el.innerText.trim().replace(/\\s+/g, ' ').slice(0, 80)}];
}))
"""


STATES = ["held", "awaiting_review", "needs_attention"]


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280x800", "390x844"])
def test_the_first_screen_answers_why_who_when_and_next(
    open_page, case_in_state, held_with_evidence, viewport
):
    cases = {state: case_in_state(state) for state in STATES}
    # The held page with its evidence panel filled: a finding and an order event.
    cases["held-with-evidence"] = held_with_evidence()
    page = open_page(viewport)
    login(page, "lead")
    problems = []
    for state, case in cases.items():
        page.goto(f"/admin/cases/case/{case.pk}/change/")
        page.wait_for_load_state()
        shot(page, f"{state}-{viewport['width']}")
        boxes = page.evaluate(_BOXES_JS, ANSWERS)
        if state == "held-with-evidence":
            evidence = page.evaluate(_BOXES_JS, {"evidence": "#hf-evidence-panel"})["evidence"]
            assert evidence is not None, "the held page shows no evidence panel"
            assert page.locator("#hf-order-events li").count() >= 1, evidence
        height = page.evaluate("() => document.documentElement.scrollHeight")
        print(f"{state} at {viewport['width']}x{viewport['height']}: page {height}px, {boxes}")
        for name, box in boxes.items():
            if box is None:
                problems.append(f"{state}: the page does not say {name} ({ANSWERS[name]})")
            elif box["bottom"] > viewport["height"]:
                problems.append(
                    f"{state}: {name} ends {box['bottom']}px down, below the first screen's "
                    f"{viewport['height']}px ({box['text']!r})"
                )
    assert not problems, "\n".join(problems)
