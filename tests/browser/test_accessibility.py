"""axe-core on every page the roles use: 0 critical and 0 serious findings.

One test per page, each with the page's own case built by the real services (a held case by a
lost answer from the live order system, a case needing attention by an escalation, a done case
by the real apply). axe-core is ``axe-playwright-python``'s copy; a failure prints each
critical or serious violation with its elements, so the template to fix is named.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.browser.conftest import login, shot
from tests.support.fixtures import days_ahead

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
    "case-waiting-source": Visit("agent", "waiting_source", case_page),
    "case-awaiting-review": Visit("lead", "awaiting_review", case_page),
    "case-held": Visit("lead", "held", case_page),
    "case-needs-attention": Visit("lead", "needs_attention", case_page),
    "case-done": Visit("lead", "done", case_page),
    "decision-page": Visit("approver", "awaiting_review", decision_page),
    "review-queue": Visit("approver", "awaiting_review", fixed("/admin/approvals/proposal/")),
    "held-queue": Visit("lead", "held", fixed("/admin/cases/heldcase/")),
    "attention-queue": Visit("lead", "needs_attention", fixed("/admin/cases/attentioncase/")),
    "inbox": Visit("approver", "awaiting_review", fixed("/admin/cases/notification/")),
    "inbox-preferences": Visit("lead", "", fixed("/admin/cases/notification/preferences/")),
    "events": Visit("lead", "needs_attention", fixed("/admin/cases/caseevent/")),
    "inbound-events": Visit("lead", "", fixed("/admin/reconciliation/inboundevent/")),
    "account": Visit("lead", "waiting_source", account_page),
    "intake": Visit("agent", "", fixed("/admin/cases/case/intake/")),
    "api-docs": Visit("lead", "", fixed("/api/docs/"), ready=".swagger-ui .opblock-tag-section"),
}


@pytest.fixture
def build(live_orders, make_case, reviewable_case, approved_case, held_case, staff):
    """``build(state)``: a fresh case in that state through the real services."""
    from cases.services import case_transition
    from reconciliation.apply import apply_case

    numbers = itertools.count(1)

    def order() -> dict:
        order_id = f"ORD-A{next(numbers)}"
        live_orders.seed(
            orders=[
                {"order_id": order_id, "account_id": "ACC-100", "delivery_date": str(days_ahead(3))}
            ]
        )
        return {"order_id": order_id}

    def needs_attention():
        case = make_case(**order())
        return case_transition(
            case=case,
            transition="escalate",
            expected_version=case.version,
            reason="The customer asks for a person",
            actor=staff["lead"],
        )

    def done():
        case = approved_case(**order())
        for _ in range(5):
            apply_case(case_id=case.pk)
            case.refresh_from_db()
            if case.status == "done":
                return case
        raise AssertionError(f"{case.reference} did not finish: {case.status}")

    builders = {
        "waiting_source": lambda: make_case(**order()),
        "awaiting_review": lambda: reviewable_case(**order())[0],
        "needs_attention": needs_attention,
        "held": lambda: held_case(**order()),
        "done": done,
    }

    def make(state: str):
        if not state:
            return None
        live_orders.seed(slots=[{"date": str(days_ahead(d)), "capacity": 50} for d in range(1, 15)])
        case = builders[state]()
        case.refresh_from_db()
        assert case.status == state, (state, case.status)
        return case

    return make


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
def test_no_critical_or_serious_axe_findings(page, build, name):
    visit = PAGES[name]
    case = build(visit.state)
    login(page, visit.role)
    page.goto(visit.url(case))
    page.wait_for_load_state()
    page.locator(visit.ready).first.wait_for(state="visible")
    findings = blocking_findings(page)
    if findings:
        shot(page, name)
    assert not findings, f"axe-core on {page.url} ({visit.role}):\n{describe(findings)}"
