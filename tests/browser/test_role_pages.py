"""Every role's pages run under the Content-Security-Policy, and their screenshots are the docs'.

Each test walks the screens one role's guide (``docs/``) shows, as that person would; the
suite's page fixture fails it on any ``securitypolicyviolation`` event, console error or page
error (``tests/browser/conftest.py``), so the walk is also the check that the policy breaks
nothing: the admin, the live pages that poll, the approver's decision page, Swagger UI and the
browsable API. With ``DOCS_SCREENSHOTS=1`` (``make docs-screenshots``) each ``docs_shot`` is
written to ``docs/screenshots/<role>-<page>.png``.
"""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import CSP_LISTENER_JS, docs_shot, login, open_case
from tests.support.fixtures import requested_date

pytestmark = [pytest.mark.browser, pytest.mark.order_system]

POLL_MS = 3_500  # the live pages poll every 3 s: one poll under the policy


def test_agent_and_lead_pages_run_under_the_policy(page, reviewable_case, held_case):
    case, _proposal = reviewable_case()
    held = held_case(request_key="docs-held", delivery_date=requested_date(case))

    login(page, "agent")
    docs_shot(page, "agent", "home")
    open_case(page, case)
    page.wait_for_timeout(POLL_MS)
    docs_shot(page, "agent", "case")

    page.context.clear_cookies()
    login(page, "lead")
    page.goto("/admin/cases/heldcase/")
    page.wait_for_load_state()
    assert held.reference in page.locator("#content").inner_text()
    page.wait_for_timeout(POLL_MS)
    docs_shot(page, "lead", "held-queue")
    open_case(page, held)
    docs_shot(page, "lead", "held-case")
    page.goto("/admin/cases/attentioncase/")
    page.wait_for_load_state()
    docs_shot(page, "lead", "attention-queue")


def test_approver_pages_run_under_the_policy(page, reviewable_case):
    _case, proposal = reviewable_case()

    login(page, "approver")
    page.get_by_role("link", name="Proposals awaiting review").click()
    page.wait_for_load_state()
    page.wait_for_timeout(POLL_MS)
    docs_shot(page, "approver", "queue")
    page.get_by_role("link", name=re.compile(rf"^Proposal #{proposal.pk}\b")).click()
    page.wait_for_load_state()
    docs_shot(page, "approver", "decision")


def test_operator_and_order_system_team_pages_run_under_the_policy(page, staff, autonomous):
    staff["lead"].is_superuser = True  # the operator's view of the whole desk
    staff["lead"].save()
    login(page, "lead")
    docs_shot(page, "operator", "home")
    page.goto("/admin/reconciliation/inboundevent/")
    page.wait_for_load_state()
    docs_shot(page, "operator", "inbound-events")
    page.goto("/admin/reconciliation/ordersystemprofile/")
    page.wait_for_load_state()
    assert "Autonomous" in page.locator("#content").inner_text()
    docs_shot(page, "order-system-team", "probe-results")
    page.get_by_role("link", name=re.compile("Autonomous")).first.click()
    page.wait_for_load_state()
    docs_shot(page, "order-system-team", "probe-evidence")


def test_integrator_pages_run_under_the_policy(page, staff):
    """Swagger UI (drf-spectacular-sidecar) renders the schema with its start script served as
    a file, and the browsable API (development only) renders too."""
    login(page, "lead")
    page.goto("/api/docs/")
    page.locator(".swagger-ui .info .title").wait_for(state="visible")
    assert "Holdfast API" in page.locator(".swagger-ui .info .title").inner_text()
    page.locator(".opblock-tag-section").first.wait_for(state="visible")
    docs_shot(page, "integrator", "api-docs")
    page.goto("/api/cases/")
    page.wait_for_load_state()
    assert "Case" in page.title()
    docs_shot(page, "integrator", "browsable-api")


def test_a_violation_is_seen_when_a_page_runs_an_inline_script(chromium_browser, holdfast):
    """The listener every page gets is not blind: an inline script added to a page is refused
    by the policy, and the refusal is reported."""
    seen: list[str] = []
    context = chromium_browser.new_context(base_url=holdfast)
    try:
        context.expose_binding("__holdfastCspViolation", lambda source, text: seen.append(text))
        context.add_init_script(CSP_LISTENER_JS)
        page = context.new_page()
        page.goto("/admin/login/")
        page.evaluate(
            "() => { const s = document.createElement('script');"
            " s.textContent = 'window.ranInline = true'; document.body.append(s); }"
        )
        page.wait_for_timeout(300)
        ran = page.evaluate("() => window.ranInline === true")
    finally:
        context.close()
    assert not ran
    assert seen, "no violation reported"
    assert "script-src" in seen[0], seen
