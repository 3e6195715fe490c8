"""A lead on the case list, as a person does: filters it, saves the filters as a team view,
finds a case by a word of its note, and reassigns the selected cases with a reason; axe-core
finds nothing critical or serious on the saved views page nor on the reassignment page."""

from __future__ import annotations

import pytest

from cases.models import Case, CaseEvent
from tests.browser.conftest import login, messages, shot
from tests.browser.test_accessibility import blocking_findings, describe

pytestmark = [pytest.mark.browser, pytest.mark.order_system]


def test_a_lead_saves_a_team_view_searches_a_note_and_reassigns_in_bulk(
    page, make_case, staff, team
):
    noted = make_case(note="Ring the bell twice, the dog is friendly")
    others = [make_case(), make_case()]
    login(page, "lead")

    page.goto("/admin/cases/case/?waiting_on__exact=order_system")
    page.locator("summary", has_text="Save these filters as a view").click()
    page.get_by_label("Name this view").fill("Waiting on the order system")
    page.get_by_label("Share with").select_option(label=team.name)
    page.get_by_role("button", name="Save view").click()
    page.wait_for_load_state()
    assert any("Saved the view" in m for m in messages(page, "success")), messages(page)
    link = page.get_by_role("navigation", name="Saved views").get_by_role(
        "link", name="Waiting on the order system"
    )
    assert link.get_attribute("aria-current") == "page"

    page.locator("#searchbar").fill("dog is friendly")
    with page.expect_navigation():
        page.locator("#changelist-search input[type=submit]").click()
    rows = page.locator("#result_list tbody tr").all_inner_texts()
    assert len(rows) == 1, rows
    assert noted.reference in rows[0], rows

    page.goto("/admin/cases/savedview/")
    assert "Waiting on the order system" in page.locator("#content").inner_text()
    findings = blocking_findings(page)
    assert not findings, describe(findings)

    page.goto("/admin/cases/case/")
    for case in others:
        page.locator(f"input[name=_selected_action][value='{case.pk}']").check()
    page.locator("select[name=action]").select_option("reassign_selected")
    page.get_by_role("button", name="Go", exact=True).click()
    page.wait_for_load_state()
    shot(page, "reassign")
    findings = blocking_findings(page)
    assert not findings, describe(findings)
    page.get_by_label("New owner").select_option(label=str(staff["backup"]))
    page.get_by_label("New backup").select_option(label=str(staff["lead"]))
    page.get_by_label("Reason").fill("Lena is on leave this week")
    page.get_by_role("button", name="Reassign 2 cases").click()
    page.wait_for_load_state()
    shot(page, "reassigned")

    assert any(m.startswith("Reassigned 2 cases") for m in messages(page, "success")), messages(
        page
    )
    for case in others:
        case = Case.objects.get(pk=case.pk)
        assert case.owner == staff["backup"]
        assert CaseEvent.objects.filter(case=case).latest("id").reason == (
            "Lena is on leave this week"
        )
    assert Case.objects.get(pk=noted.pk).owner == staff["lead"]
