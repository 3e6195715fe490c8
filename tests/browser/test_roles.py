"""Each role walks the admin as a person does and sees the actions its role allows; an auditor
sees everything of the team and no control that changes anything."""

from __future__ import annotations

import json
import re

import pytest

from tests.browser.conftest import ARTIFACTS, action_labels, login, open_case, shot

pytestmark = [pytest.mark.browser, pytest.mark.order_system]

# Every form control in the content area, shown or behind a disclosure.
EDITABLE_JS = """() => [...document.querySelectorAll(
    '#content input:not([type=hidden]), #content select, #content textarea')]
  .map((el) => el.name || el.id || el.tagName)"""


@pytest.mark.parametrize("role", ["lead", "backup", "agent", "approver", "auditor"])
def test_each_role_sees_its_own_actions(page, role, reviewable_case):
    case, proposal = reviewable_case()
    seen: dict[str, list[str]] = {}

    login(page, role)
    shot(page, "home")
    assert "Needs a person" in page.locator("#content").inner_text()
    seen["home"] = action_labels(page)

    cases_link = page.get_by_role("link", name="Cases", exact=True)
    cases_link.and_(page.locator("[href$='/cases/case/']")).first.click()
    page.wait_for_load_state()
    shot(page, "case-list")
    assert page.get_by_role("link", name=case.reference, exact=True).count()

    open_case(page, case)
    shot(page, "case-page")
    seen["case page"] = action_labels(page)
    editable = page.evaluate(EDITABLE_JS)

    if role == "approver":
        page.goto("/admin/")
        page.get_by_role("link", name="Proposals awaiting review").click()
        page.wait_for_load_state()
        shot(page, "review-queue")
        page.get_by_role("link", name=re.compile(rf"^Proposal #{proposal.pk}\b")).click()
        page.wait_for_load_state()
        shot(page, "decision-page")
        seen["decision page"] = action_labels(page)

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"roles-{role}.json").write_text(
        json.dumps({**seen, "case page editable fields": editable}, indent=2)
    )
    print(f"{role}: {seen}; editable on the case page: {editable}")

    case_page = " | ".join(seen["case page"])
    if role == "auditor":
        assert seen["case page"] == [], f"An auditor may change nothing, but sees: {case_page}"
        assert editable == [], f"An auditor may change nothing, but can edit: {editable}"
        assert page.locator("#content .hf-actions").count() == 0
    if role in {"lead", "backup"}:
        assert "legal hold" in case_page, f"{role} sees no legal hold button: {case_page}"
    if role == "agent":
        assert "Record evidence" in case_page, f"The agent cannot record evidence: {case_page}"
    if role == "approver":
        decision = " | ".join(seen["decision page"])
        assert "Approve this exact proposal" in decision, decision
        assert "Reject" in decision, decision
