"""The approver's decision page in a real browser: the buttons really submit their forms.

A POST from the test client proves nothing about a button (STACK-NOTES: a form nested in the
admin's change form is dropped by the browser and its button does nothing), so these tests log
in through the admin's login form and press the buttons as a person does.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from django.urls import reverse

from approvals.models import Approval, Proposal
from tests.browser.conftest import DESKTOP, PHONE, assert_fits, login, messages, visible_text

pytestmark = [pytest.mark.browser, pytest.mark.order_system]

NOTE = "Friday please: the loading dock is closed on Thursday."
SCREENSHOTS = Path("/tmp/hf")


def _decision_url(proposal: Proposal) -> str:
    return reverse("admin:approvals_proposal_change", args=[proposal.pk])


def _open_decision(open_page, proposal: Proposal, *, viewport=DESKTOP, user="approver"):
    page = open_page(viewport)
    login(page, user)
    page.goto(_decision_url(proposal))
    heading = page.get_by_role("heading", name=re.compile(r"^Decide: ORD-"))
    assert heading.count() == 1, visible_text(page)
    return page


def _approval_reference(page) -> str:
    success = messages(page, "success")
    assert success, f"No success message: {messages(page)} {visible_text(page)[:400]}"
    match = re.search(r"\b(AP-\d+) approves ", success[0])
    assert match, success
    return match.group(1)


def test_clicking_approve_approves_this_exact_proposal_and_names_the_approval(
    open_page, reviewable_case
):
    case, proposal = reviewable_case()
    page = _open_decision(open_page, proposal)
    page.get_by_role("button", name="Approve this exact proposal").click()
    page.wait_for_load_state()

    reference = _approval_reference(page)
    approval = Approval.objects.get(reference=reference)
    assert approval.proposal_id == proposal.pk
    assert approval.decision == Approval.Decision.APPROVED
    assert approval.decided_by.username == "approver"
    assert page.url.endswith(_decision_url(proposal))
    assert "This proposal is approved; nothing to decide." in visible_text(page)
    assert page.get_by_role("button", name="Approve this exact proposal").count() == 0


def test_pressing_enter_in_the_approve_reason_submits_the_approval(open_page, reviewable_case):
    case, proposal = reviewable_case()
    page = _open_decision(open_page, proposal)
    reason = page.locator("#id_approve-reason")
    reason.fill("Slot is free and the customer confirmed")
    reason.press("Enter")
    page.wait_for_load_state()

    reference = _approval_reference(page)
    approval = Approval.objects.get(reference=reference)
    assert approval.reason == "Slot is free and the customer confirmed"
    assert Proposal.objects.get(pk=proposal.pk).status == Proposal.Status.APPROVED


def test_rejecting_with_a_reason_closes_the_proposal_for_the_owner(open_page, reviewable_case):
    case, proposal = reviewable_case()
    page = _open_decision(open_page, proposal)
    page.locator("#id_reject-reason").fill("The customer wants Saturday, not Friday")
    page.get_by_role("button", name="Reject", exact=True).click()
    page.wait_for_load_state()

    success = messages(page, "success")
    assert success == [f"Proposal #{proposal.pk} rejected; the owner prepares another."], messages(
        page
    )
    decision = Approval.objects.get(proposal=proposal)
    assert decision.decision == Approval.Decision.REJECTED
    assert decision.reason == "The customer wants Saturday, not Friday"
    assert Proposal.objects.get(pk=proposal.pk).status == Proposal.Status.REJECTED
    case.refresh_from_db()
    assert case.status == "proposal_rejected"


def _fits(page, width: int, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"decision-page-{name}.png"), full_page=True)
    assert_fits(page)
    widest = page.evaluate(
        "() => Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"
    )
    assert widest <= width, f"{name}: the page is {widest}px wide in a {width}px window"


def test_the_decision_page_fits_a_desktop_and_a_phone_before_and_after_the_decision(
    open_page, reviewable_case
):
    case, proposal = reviewable_case(note=NOTE)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    desktop = _open_decision(open_page, proposal, viewport=DESKTOP)
    _fits(desktop, DESKTOP["width"], "1280x800")
    panel = desktop.locator(".hf-decision").inner_text()
    assert NOTE in panel
    assert proposal.description in desktop.locator("#hf-requested-value").inner_text()
    seen = dt.date.fromisoformat(case.order_seen["delivery_date"])
    assert f"{seen:%a %Y-%m-%d}" in desktop.locator("#hf-current-value").inner_text()
    assert "0 of 5 taken (advisory, captured" in desktop.locator("#hf-advice").inner_text()
    assert "Ari Approver (approver)" in desktop.locator("#hf-deciders").inner_text()

    phone = _open_decision(open_page, proposal, viewport=PHONE)
    _fits(phone, PHONE["width"], "390x844")
    button = phone.get_by_role("button", name="Approve this exact proposal")
    box = button.bounding_box()
    assert box
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= PHONE["width"]
    button.click()
    phone.wait_for_load_state()
    _approval_reference(phone)
    # The decision now fills the approvals table, which must fit the phone too.
    _fits(phone, PHONE["width"], "390x844-approved")
