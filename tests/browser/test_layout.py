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
