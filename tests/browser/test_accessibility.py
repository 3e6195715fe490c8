"""axe-core on every page the roles use: 0 critical and 0 serious findings.

One test per page, each with the page's own case built by the real services (a held case by a
lost answer from the live order system, a case needing attention by an escalation, a done case
by the real apply). axe-core is ``axe-playwright-python``'s copy; a failure prints each
critical or serious violation with its elements, so the template to fix is named.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.browser.conftest import login, shot

pytestmark = [pytest.mark.browser, pytest.mark.order_system]

# HOLDFAST_AXE_ALL=1 fails on the moderate and minor findings too (to list them).
BLOCKING = {"critical", "serious"} | (
    {"moderate", "minor"} if os.environ.get("HOLDFAST_AXE_ALL") == "1" else set()
)


@dataclass(frozen=True)
class Visit:
    role: str
    # The state of the case the page needs ("" for none) and the URL from that case.
    state: str
    url: Callable[[object], str]
    ready: str = "#content"


def case_page(case) -> str:
    return f"/admin/cases/case/{case.pk}/change/"


def fixed(url: str) -> Callable[[object], str]:
    return lambda _case: url


def decision_page(case) -> str:
    from approvals.models import Proposal

    proposal = Proposal.objects.get(case=case, status=Proposal.Status.AWAITING_REVIEW)
    return f"/admin/approvals/proposal/{proposal.pk}/change/"


def account_page(case) -> str:
    return f"/admin/cases/customeraccount/{case.account_id}/change/"


PAGES: dict[str, Visit] = {
    "home-lead": Visit("lead", "", fixed("/admin/")),
    "home-agent": Visit("agent", "", fixed("/admin/")),
    "home-approver": Visit("approver", "awaiting_review", fixed("/admin/")),
    "home-auditor": Visit("auditor", "", fixed("/admin/")),
    "case-list": Visit("lead", "awaiting_review", fixed("/admin/cases/case/")),
    "saved-views": Visit("lead", "", fixed("/admin/cases/savedview/")),
    "case-waiting-source": Visit("agent", "waiting_source", case_page),
    "case-awaiting-review": Visit("lead", "awaiting_review", case_page),
    "case-held": Visit("lead", "held", case_page),
    "case-needs-attention": Visit("lead", "needs_attention", case_page),
    "case-done": Visit("lead", "done", case_page),
    "decision-page": Visit("approver", "awaiting_review", decision_page),
    "review-queue": Visit("approver", "awaiting_review", fixed("/admin/approvals/proposal/")),
    "held-queue": Visit("lead", "held", fixed("/admin/cases/heldcase/")),
    # The held page's evidence panel and the held queue's read and evidence columns, filled:
    # a finding on the timeline and an order event about the order.
    "case-held-evidence": Visit(
        "lead", "held_with_evidence", case_page, ready="#hf-evidence-panel"
    ),
    "held-queue-evidence": Visit(
        "lead", "held_with_evidence", fixed("/admin/cases/heldcase/"), ready="#result_list"
    ),
    "attention-queue": Visit("lead", "needs_attention", fixed("/admin/cases/attentioncase/")),
    "inbox": Visit("approver", "awaiting_review", fixed("/admin/cases/notification/")),
    "inbox-preferences": Visit("lead", "", fixed("/admin/cases/notification/preferences/")),
    "events": Visit("lead", "needs_attention", fixed("/admin/cases/caseevent/")),
    "inbound-events": Visit("lead", "", fixed("/admin/reconciliation/inboundevent/")),
    "account": Visit("lead", "waiting_source", account_page),
    "intake": Visit("agent", "", fixed("/admin/cases/case/intake/")),
    "api-docs": Visit("lead", "", fixed("/api/docs/"), ready=".swagger-ui .opblock-tag-section"),
}


def blocking_findings(page) -> list[dict]:
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    return [v for v in results.response["violations"] if v.get("impact") in BLOCKING]


def describe(findings: list[dict]) -> str:
    lines = []
    for v in findings:
        lines.append(f"[{v['impact']}] {v['id']}: {v['help']} ({len(v['nodes'])} elements)")
        for node in v["nodes"][:6]:
            lines.append(f"    {' '.join(map(str, node['target']))}: {node['html'][:160]}")
            summary = (node.get("failureSummary") or "").replace("\n", " ")
            lines.append(f"      {summary[:300]}")
    return "\n".join(lines)


@pytest.mark.parametrize("name", list(PAGES))
def test_no_critical_or_serious_axe_findings(page, case_in_state, held_with_evidence, name):
    visit = PAGES[name]
    if visit.state == "held_with_evidence":
        case = held_with_evidence()
    else:
        case = case_in_state(visit.state) if visit.state else None
    login(page, visit.role)
    page.goto(visit.url(case))
    page.wait_for_load_state()
    page.locator(visit.ready).first.wait_for(state="visible")
    findings = blocking_findings(page)
    if findings:
        shot(page, name)
    assert not findings, f"axe-core on {page.url} ({visit.role}):\n{describe(findings)}"
