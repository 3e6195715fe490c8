"""An approver decides one exact proposal in the browser: from the home page's queue link to
the decision page, with the real buttons, reading the outcome the page states."""

from __future__ import annotations

import re

import pytest

from cases.models import Case
from tests.browser.conftest import login, messages, panel_status, press, shot

pytestmark = [pytest.mark.browser, pytest.mark.order_system]


def open_proposal_from_home(page, proposal):
    login(page, "approver")
    shot(page, "home")
    page.get_by_role("link", name="Proposals awaiting review").click()
    page.wait_for_load_state()
    shot(page, "review-queue")
    page.get_by_role("link", name=re.compile(rf"^Proposal #{proposal.pk}\b")).first.click()
    page.wait_for_load_state()
    shot(page, "decision-page")


def open_case_from_proposal(page, case):
    page.locator("#content").get_by_role("link", name=case.reference, exact=True).first.click()
    page.wait_for_load_state()
    shot(page, "case-page")


def test_approver_approves_the_exact_proposal_and_the_case_is_ready(page, reviewable_case):
    case, proposal = reviewable_case()
    open_proposal_from_home(page, proposal)

    shown = press(page, "Approve this exact proposal")
    shot(page, "approved")

    success = " ".join(messages(page, "success"))
    assert re.search(r"\bAP-\d+\b", success), f"No approval named in the page's messages: {shown}"
    assert case.reference in success, success
    open_case_from_proposal(page, case)
    assert panel_status(page) == "Ready to apply"
    assert Case.objects.get(pk=case.pk).status == "ready"


def test_approver_rejects_with_a_reason_and_the_owner_reads_it(page, reviewable_case):
    case, proposal = reviewable_case()
    open_proposal_from_home(page, proposal)
    reason = "The customer asked for a Saturday, not this date"

    page.locator("[name='reject-reason']").fill(reason)
    shown = press(page, re.compile(r"^Reject"))
    shot(page, "rejected")

    success = " ".join(messages(page, "success"))
    assert "rejected" in success, f"No rejection confirmed: {shown}"
    open_case_from_proposal(page, case)
    # A person must prepare another: the page never reads as if a worker were at it.
    assert panel_status(page) == "Rejected: a person prepares another proposal"
    assert reason in page.locator("#content").inner_text()
    assert Case.objects.get(pk=case.pk).status == "proposal_rejected"
