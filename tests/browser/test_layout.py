"""Every page a lead or an approver works on fits a desktop and a phone window: no region
scrolls sideways. A failure names the page, the region and both widths."""

from __future__ import annotations

import pytest

from cases.services import case_transition
from tests.browser.conftest import DESKTOP, PHONE, login, misfits, shot

pytestmark = [pytest.mark.browser, pytest.mark.order_system]


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280x800", "390x844"])
def test_work_pages_fit_the_window(
    open_page, viewport, held_case, reviewable_case, make_case, staff
):
    held = held_case()
    attention = make_case()
    case_transition(
        case=attention,
        transition="escalate",
        expected_version=attention.version,
        reason="The customer asks for a person",
        actor=staff["lead"],
    )
    _, proposal = reviewable_case()
    problems: list[str] = []

    def visit(page, name, url, expect):
        page.goto(url)
        page.wait_for_load_state()
        shot(page, name)
        assert expect in page.locator("#content").inner_text(), f"{name}: {url} shows no {expect!r}"
        problems.extend(f"[{name}] {line}" for line in misfits(page))

    lead = open_page(viewport)
    login(lead, "lead")
    visit(lead, "home", "/admin/", "Needs a person")
    visit(lead, "case-list", "/admin/cases/case/", held.reference)
    visit(lead, "case-page", f"/admin/cases/case/{held.pk}/change/", "Reconcile")
    visit(lead, "held-queue", "/admin/cases/heldcase/", held.reference)
    visit(lead, "attention-queue", "/admin/cases/attentioncase/", attention.reference)

    approver = open_page(viewport)
    login(approver, "approver")
    visit(approver, "approver-queue", "/admin/approvals/proposal/", f"Proposal #{proposal.pk}")
    visit(
        approver,
        "decision-page",
        f"/admin/approvals/proposal/{proposal.pk}/change/",
        "Approve this exact proposal",
    )

    assert not problems, "Regions wider than the window:\n" + "\n".join(problems)


_HIDDEN_SIDEWAYS_JS = """
() => [...document.querySelectorAll('#changelist .results')]
  .filter((el) => el.scrollWidth > el.clientWidth + 1)
  .map((el) => `${el.scrollWidth}px of columns in ${el.clientWidth}px`)
"""


def test_the_audit_and_record_lists_show_every_column_on_a_desktop(
    open_page, held_case, reviewable_case, make_case
):
    """On a 1280px desktop, beside the navigation and the filters, the events list shows every
    column, the reason included, without scrolling the table sideways (it was cut after the
    actor, the action codes broken inside their words); so do the accounts and inbound events
    lists."""
    held = held_case()
    reviewable_case()
    make_case()
    page = open_page(DESKTOP)
    login(page, "lead")
    for name, url in [
        ("events", "/admin/cases/caseevent/"),
        ("events-of-a-held-case", f"/admin/cases/caseevent/?q={held.reference}"),
        ("accounts", "/admin/cases/customeraccount/"),
        ("inbound-events", "/admin/reconciliation/inboundevent/"),
    ]:
        page.goto(url)
        page.wait_for_load_state()
        shot(page, name)
        assert not page.evaluate(_HIDDEN_SIDEWAYS_JS), (name, page.evaluate(_HIDDEN_SIDEWAYS_JS))
    page.goto(f"/admin/cases/caseevent/?q={held.reference}")
    reasons = page.locator("#result_list td.field-reason")
    assert reasons.count() > 3
    results = page.locator("#changelist .results").bounding_box()
    # Who acted, on every row (the person's or worker's label, never the empty user column).
    actors = page.locator("#result_list td.field-acted_by").all_inner_texts()
    assert actors
    assert all(actor.strip() not in {"", "-"} for actor in actors), actors
    for index in range(reasons.count()):
        box = reasons.nth(index).bounding_box()
        assert box["x"] + box["width"] <= results["x"] + results["width"] + 1, (index, box)
        assert box["width"] >= 100, box  # a readable column, not a letter per line
