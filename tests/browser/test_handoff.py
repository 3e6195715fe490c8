"""The seed's hand-over exercise, in a browser: the owner is away, and her named backup finds
the unfinished case without the original conversation and reads, from the case page alone, why
it waits, who must answer, when to follow up and what is permitted now -- while it waits for
its source (the order system down), while it waits for approval, and while it is held after a
lost answer, which the backup then settles from the page.

The test sets states up through the worker's own entry points and the order system's fault
injection; everything it asserts about what a person is told is read from the page.
"""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import (
    assert_fits,
    assert_plain_outcome,
    login,
    messages,
    panel_status,
    press,
    shot,
    visible_text,
)
from tests.support.fixtures import days_ahead

pytestmark = [pytest.mark.browser, pytest.mark.order_system]

ORDER = "ORD-7731"
# A moment the page names: "2025-06-01 14:05 UTC" (the panel's format).
MOMENT = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}")
PANEL = "section[aria-label='What may happen next']"


def panel(page) -> dict[str, str]:
    """The 'What may happen next' panel's terms and their descriptions, as shown."""
    section = page.locator(PANEL)
    assert section.count() == 1, f"No 'What may happen next' panel on {page.url}"
    return section.first.evaluate(
        """(section) => {
          const out = {};
          section.querySelectorAll('dl > dt').forEach((dt) => {
            const dd = dt.nextElementSibling;
            out[dt.innerText.trim()] = dd ? dd.innerText.trim().replace(/\\s+/g, ' ') : '';
          });
          return out;
        }"""
    )


def timeline(page) -> str:
    section = page.locator("section.hf-timeline")
    assert section.count(), f"No 'What happened' timeline on {page.url}"
    return section.first.inner_text()


def assert_one_applied_operation(live_orders, case) -> None:
    """The order system's own records: one operation, applied once, with the intended change."""
    order = live_orders.state(ORDER)
    operations = order["operations"]
    assert len(operations) == 1, operations
    (operation,) = operations
    assert operation["status"] == "applied", operation
    assert operation["change"] == case.change, operation
    assert order["order"]["delivery_date"] == case.change["delivery_date"], order["order"]


def logout(page) -> None:
    page.get_by_role("button", name="Log out").click()
    page.wait_for_load_state()
    shot(page, "logged-out")


def find_case_as_backup(page, case, step: str, *, waits_on_me: bool) -> dict[str, str]:
    """From the admin home page to the case page: 'Mine to answer now' when the case waits on
    Bo Backup; otherwise (it waits on the order system or the approvers) the case list of
    what Bo Backup is responsible for."""
    if not page.url.rstrip("/").endswith("/admin"):  # after logging in it is the home page
        page.locator(".breadcrumbs").get_by_role("link", name="Home").click()
        page.wait_for_load_state()
    assert page.locator("#hf-absence").count(), f"Not the admin home page: {page.url}"
    shot(page, f"{step}-home")
    if waits_on_me:
        page.get_by_role("link", name="Mine to answer now").click()
    else:
        page.goto(f"/admin/cases/case/?responsible={case.backup_id}")
    page.wait_for_load_state()
    shot(page, f"{step}-mine")
    link = page.locator("#changelist").get_by_role("link", name=case.reference, exact=True)
    assert link.count(), f"{case.reference} is not among Bo Backup's cases: {visible_text(page)}"
    link.first.click()
    page.wait_for_load_state()
    shot(page, f"{step}-case")
    assert_fits(page)
    fields = panel(page)
    for term in ("Why it waits", "Who must answer", "Responsible now", "Follow-up"):
        assert fields.get(term), f"The panel does not say {term!r} ({step}): {fields}"
    assert fields.get("Permitted now"), f"The panel names no permitted action ({step}): {fields}"
    # Bo Backup, not the away owner, is responsible; the page says why.
    responsible = fields["Responsible now"]
    assert responsible.startswith("Bo Backup"), responsible
    assert "while Lena Lead is away" in responsible, responsible
    return fields


def test_backup_takes_over_the_unfinished_case_while_the_owner_is_away(
    open_page, make_case, staff, live_orders, autonomous
):
    from reconciliation.apply import apply_case
    from reconciliation.sources import source_check
    from reconciliation.tasks import prepare_proposal

    case = make_case()
    assert case.owner == staff["lead"]
    assert case.backup == staff["backup"]
    away_until = days_ahead(3)

    # 1. Lena Lead marks herself away from the home page.
    page = open_page()
    login(page, "lead")
    form = page.get_by_role("form", name="Mark someone away")
    who = form.get_by_label("Who")
    lena = [o.strip() for o in who.locator("option").all_inner_texts() if o.startswith("Lena Lead")]
    assert len(lena) == 1, who.inner_text()
    who.select_option(label=lena[0])
    form.get_by_label(re.compile(r"^Away until")).fill(f"{away_until:%Y-%m-%d}")
    shot(page, "lead-marks-away")
    shown = press(page, "Mark away")
    shot(page, "lead-marked-away")
    success = " ".join(messages(page, "success"))
    assert f"Lena Lead is away until {away_until:%Y-%m-%d}" in success, shown
    assert "backup" in success, success
    away_note = page.locator("#hf-absence").inner_text()
    assert "Lena Lead" in away_note, away_note
    assert f"{away_until:%Y-%m-%d}" in away_note, away_note
    logout(page)

    # 2a. The order system is down while the case waits for its source.
    live_orders.set_fault("unavailable", times=None)
    assert source_check(case_id=case.pk) != "checked"
    login(page, "backup")
    fields = find_case_as_backup(page, case, "a-source-down", waits_on_me=False)
    assert panel_status(page) == "Waiting for the order source", panel_status(page)
    why = fields["Why it waits"]
    assert re.search(r"order system did not answer|unavailable", why, re.I), why
    who = fields["Who must answer"]
    assert who.lower().startswith("the order system"), who
    assert "Bo Backup" in who, who
    assert MOMENT.search(fields["Follow-up"]), fields["Follow-up"]
    permitted = fields["Permitted now"].lower()
    assert "escalate to a person" in permitted, permitted
    history = timeline(page)
    assert "Responsibility passes to Bo Backup" in history, history
    assert f"while Lena Lead is away until {away_until:%Y-%m-%d}" in history, history

    # 2b. The order system is back; the workers read the order and submit a proposal.
    live_orders.clear_faults()
    assert source_check(case_id=case.pk) == "checked"
    assert prepare_proposal(case.pk) == "submitted"
    fields = find_case_as_backup(page, case, "b-awaiting-review", waits_on_me=False)
    assert panel_status(page) == "Awaiting review", panel_status(page)
    assert re.search(r"approv", fields["Why it waits"], re.I), fields["Why it waits"]
    who = fields["Who must answer"]
    assert "Ari Approver (approver)" in who, who
    # The people who may decide, by name (not a role, never the away owner).
    assert who.split(";")[0].strip() == "Ari Approver (approver)", who
    assert "Bo Backup" in who, who
    follow_up = fields["Follow-up"]
    assert "approvers should decide by" in follow_up, follow_up
    assert MOMENT.search(follow_up), follow_up

    # 2c. Ari Approver approves in the browser; the apply's answer is lost after commit.
    approver_page = open_page()
    login(approver_page, "approver")
    shot(approver_page, "c-approver-home")
    approver_page.get_by_role("link", name="Proposals awaiting review").click()
    approver_page.wait_for_load_state()
    shot(approver_page, "c-review-queue")
    approver_page.locator("#content").get_by_role(
        "link", name=re.compile(r"^Proposal #\d+")
    ).first.click()
    approver_page.wait_for_load_state()
    shot(approver_page, "c-decision-page")
    press(approver_page, "Approve this exact proposal")
    shot(approver_page, "c-approved")
    approved = " ".join(messages(approver_page, "success"))
    assert case.reference in approved, approved
    assert re.search(r"\bAP-\d+\b", approved), approved

    live_orders.set_fault("drop_after_commit", path_prefix="/orders/")
    assert apply_case(case_id=case.pk) == "effect_unknown"
    live_orders.clear_faults()
    # The workers are still settling it: it waits on nobody yet, so it is not in Bo Backup's
    # "Mine to answer now" (cases.held); Bo Backup finds it among the cases they answer for.
    fields = find_case_as_backup(page, case, "c-held", waits_on_me=False)
    assert panel_status(page).startswith("Held"), panel_status(page)
    text = page.locator(PANEL).inner_text()
    assert "outcome is not known" in text or "Effect unknown" in text, text
    assert re.search(r"unknown", fields["Why it waits"], re.I), fields["Why it waits"]
    # The workers settle it by themselves first (they look again on their schedule); Bo
    # Backup is named as the one who settles it if they cannot.
    who = fields["Who must answer"]
    assert who.startswith("nobody yet: the workers settle it themselves; Bo Backup"), who
    assert "only if it is still unknown after" in who, who
    assert MOMENT.search(fields["Follow-up"]), fields["Follow-up"]
    assert "The workers look again at" in fields["Follow-up"], fields["Follow-up"]
    assert "reconcile now" in fields["Permitted now"].lower(), fields["Permitted now"]
    assert page.get_by_role("button", name="Reconcile now (fence, then look)").count(), (
        page.locator(PANEL).inner_text()
    )

    # 3. Bo Backup settles the held case from the page: fence, then the consistent lookup.
    press(page, "Reconcile now (fence, then look)")
    shot(page, "reconciled")
    assert_fits(page)
    level, said = assert_plain_outcome(page)
    assert level == "success", said
    assert "applied" in said, said
    status = panel_status(page)
    # Its change applied, the steps after it finish: not "Ready to apply" (nothing to send).
    assert status in {"Applied: finishing the steps after it", "Done"}, status
    assert "Held" not in status
    assert "Proven applied" in page.locator(PANEL).inner_text()
    # It must not read as if the change still had to be sent.
    assert "Applied: the change is confirmed" in page.locator(PANEL).inner_text()
    assert "applies it when its checks hold" not in page.locator(PANEL).inner_text()
    assert "steps after apply resume" in panel(page)["Why it waits"]
    assert_one_applied_operation(live_orders, case)

    # The worker resumes the steps after the apply (notify, close); nothing is sent again.
    assert apply_case(case_id=case.pk) == "done"
    page.reload()
    page.wait_for_load_state()
    shot(page, "done")
    assert_fits(page)
    assert panel_status(page) == "Done", panel_status(page)
    assert_one_applied_operation(live_orders, case)
