"""The browser suite: Debian's Chromium driven by Playwright against a live Holdfast.

Each test gets a fresh browser context and page on one Chromium per session, a live Holdfast
served from a thread over ``transactional_db`` (its rows must be visible to the server
thread), and the reference order system as a separate process (``live_orders``). A test fails
on any server error (HTTP 500 or an exception in a view), on any console error, on any
uncaught page error and on any Content-Security-Policy violation. Screenshots land in
``var/browser-artifacts/`` (``docs_shot``: in ``docs/screenshots/`` with DOCS_SCREENSHOTS=1).

Playwright's sync API runs an event loop in the test's thread, so Django would refuse ORM
calls from the test (``SynchronousOnlyOperation``); the test thread only reads and sets up
rows between page actions, never concurrently with them.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "var" / "browser-artifacts"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
PASSWORD = "pw"
ACTION_TIMEOUT_MS = 8_000
# Regions that must fit the window: none may scroll sideways.
FIT_REGIONS = ["#content", "table", ".hf-panel", "#changelist", ".module", "form"]

_current_test = {"name": "test"}


def pytest_collection_modifyitems(config, items):
    if shutil.which(CHROMIUM) is None:
        skip = pytest.mark.skip(reason=f"{CHROMIUM} is missing: apt-get install -y chromium")
        for item in items:
            if "browser" in item.keywords:
                item.add_marker(skip)


# --- browser, server, pages -----------------------------------------------------------------


@pytest.fixture(scope="session")
def chromium_browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def server_errors():
    """Exceptions raised in Holdfast's views while the test runs (``DEBUG`` is off, so a 500
    is otherwise only a plain page)."""
    from django.core.signals import got_request_exception

    errors: list[str] = []

    def record(sender, request=None, **kwargs):
        import sys
        import traceback

        path = getattr(request, "path", "?")
        errors.append(f"{path}: {''.join(traceback.format_exception(*sys.exc_info()))}")

    got_request_exception.connect(record, weak=False)
    yield errors
    got_request_exception.disconnect(record)
    assert not errors, "Holdfast raised while serving the browser:\n" + "\n".join(errors)


@pytest.fixture
def holdfast(transactional_db, live_orders, server_errors) -> Iterator[str]:
    """A live Holdfast (with its static files) wired to the live order system; its base URL."""
    from tests.support.holdfast_server import serve_holdfast

    with serve_holdfast(static_files=True) as url:
        yield url


@pytest.fixture
def open_page(chromium_browser, holdfast, request) -> Iterator[Callable[..., object]]:
    """``open_page(viewport=DESKTOP)``: a page in a fresh context (its own cookies), watched
    for console errors, page errors and 5xx responses, which fail the test."""
    _current_test["name"] = re.sub(r"[^\w.-]+", "_", request.node.name).strip("_")
    contexts = []
    problems: list[str] = []

    def watch(page):
        def on_console(msg):
            if msg.type != "error":
                return
            url = (msg.location or {}).get("url", "")
            if url.endswith("/favicon.ico"):
                return  # the admin has no favicon; Chromium asks anyway
            problems.append(f"console error on {page.url}: {msg.text} ({url})")

        page.on("console", on_console)
        page.on("pageerror", lambda exc: problems.append(f"page error on {page.url}: {exc}"))
        page.on(
            "response",
            lambda r: (
                problems.append(f"HTTP {r.status} for {r.request.method} {r.url}")
                if r.status >= 500
                else None
            ),
        )

    def make(viewport: dict | None = None):
        context = chromium_browser.new_context(
            base_url=holdfast, viewport=viewport or DESKTOP, locale="en-US"
        )
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        watch_csp(context, problems)
        contexts.append(context)
        page = context.new_page()
        watch(page)
        return page

    yield make
    for context in contexts:
        context.close()
    assert not problems, "The browser saw errors:\n" + "\n".join(problems)


CSP_LISTENER_JS = """
document.addEventListener("securitypolicyviolation", (e) => {
  window.__holdfastCspViolation(
    `${e.violatedDirective} blocked ${e.blockedURI || "inline"} at ${e.sourceFile}:${e.lineNumber}`
  );
});
"""


def watch_csp(context, problems: list[str]) -> None:
    """Every Content-Security-Policy violation on any page of ``context`` is a problem: the
    page's own ``securitypolicyviolation`` events, reported across navigations."""
    context.expose_binding(
        "__holdfastCspViolation",
        lambda source, text: problems.append(f"CSP violation on {source['page'].url}: {text}"),
    )
    context.add_init_script(CSP_LISTENER_JS)


@pytest.fixture
def page(open_page):
    """A desktop-sized page (1280x800) in a fresh context."""
    return open_page()


# --- demo-like data -------------------------------------------------------------------------


@pytest.fixture
def staff(lead, backup, agent, approver, auditor):
    """Deliveries' people: Lena Lead (owner), Bo Backup, an agent, Ari Approver, an auditor."""
    approver.first_name, approver.last_name = "Ari", "Approver"
    approver.save()
    return {
        "lead": lead,
        "backup": backup,
        "agent": agent,
        "approver": approver,
        "auditor": auditor,
    }


@pytest.fixture
def reviewable_case(live_orders, autonomous, make_case, staff):
    """``make()``: a D-41-like case on ORD-7731 brought to 'awaiting_review' by the real worker
    tasks against the live order system; returns ``(case, proposal)``."""
    from approvals.models import Proposal
    from reconciliation.sources import source_check
    from reconciliation.tasks import prepare_proposal

    def make(**overrides):
        case = make_case(**overrides)
        assert source_check(case_id=case.pk) == "checked"
        assert prepare_proposal(case.pk) == "submitted"
        case.refresh_from_db()
        assert case.status == "awaiting_review"
        return case, Proposal.objects.get(case=case, status=Proposal.Status.AWAITING_REVIEW)

    return make


@pytest.fixture
def held_case(approved_case, live_orders, staff):
    """``make()``: an approved case whose apply reached the order system but whose answer was
    lost (``drop_after_commit``): held, effect unknown, the change in fact applied."""
    from reconciliation.apply import apply_case

    def make(**overrides):
        case = approved_case(**overrides)
        live_orders.set_fault(
            "drop_after_commit", path_prefix=f"/orders/{case.order_id}/operations"
        )
        assert apply_case(case_id=case.pk) == "effect_unknown"
        live_orders.clear_faults()
        case.refresh_from_db()
        assert case.status == "held"
        return case

    return make


@pytest.fixture
def case_in_state(live_orders, make_case, reviewable_case, approved_case, held_case, staff):
    """``case_in_state(state)``: a fresh case in that state (waiting_source, awaiting_review,
    needs_attention, held, done, ready) built through the real services, each on its own order
    (its dates have room for every case a test opens)."""
    from cases.services import case_transition
    from reconciliation.apply import apply_case
    from tests.support.fixtures import days_ahead

    live_orders.seed(slots=[{"date": str(days_ahead(d)), "capacity": 200} for d in range(1, 29)])
    numbers = itertools.count(1)

    def order() -> dict:
        order_id = f"ORD-S{next(numbers)}"
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
        "ready": lambda: approved_case(**order()),
    }

    def make(state: str):
        case = builders[state]()
        case.refresh_from_db()
        assert case.status == state, (state, case.status)
        return case

    return make


@pytest.fixture
def held_with_evidence(case_in_state, live_orders):
    """``make()``: a held case with the evidence a person weighs on its page and in the held
    queue: one look by the workers that found nothing (the fence was refused once: a finding
    on the timeline) and an order event about its order, received and processed."""
    import datetime as dt

    from reconciliation.inbound import inbound_event_process, inbound_event_receive
    from reconciliation.settle import case_reconcile

    def make():
        case = case_in_state("held")
        live_orders.set_fault("unavailable", path_prefix=f"/orders/{case.order_id}/fence")
        assert case_reconcile(case_id=case.pk) == "still held"
        live_orders.clear_faults()
        event_id = f"evt-held-{case.pk}"
        inbound_event_receive(
            event_id=event_id,
            type="order.updated",
            order_id=case.order_id,
            order_version=2,
            occurred_at=dt.datetime(2026, 12, 1, 9, 15, tzinfo=dt.UTC),
            body={"event_id": event_id, "order_id": case.order_id, "order_version": 2},
        )
        assert inbound_event_process(event_id=event_id) == "processed"
        case.refresh_from_db()
        assert case.status == "held"
        return case

    return make


# --- helpers the tests call -----------------------------------------------------------------


def login(page, username: str, password: str = PASSWORD) -> None:
    """Log in through the admin's own form, as a person does."""
    page.goto("/admin/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state()
    assert "/admin/login/" not in page.url, f"{username} could not log in: {visible_text(page)}"


DOCS_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def docs_shot(page, role: str, name: str) -> Path:
    """A window-sized screenshot for the docs: with ``DOCS_SCREENSHOTS=1`` (``make
    docs-screenshots``) ``docs/screenshots/<role>-<name>.png``, which the role's guide shows;
    otherwise a browser artifact like any other."""
    if os.environ.get("DOCS_SCREENSHOTS") != "1":
        return shot(page, f"docs-{role}-{name}")
    DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = DOCS_SCREENSHOTS / f"{role}-{name}.png"
    page.screenshot(path=str(path))
    return path


def shot(page, name: str) -> Path:
    """A full-page screenshot: ``var/browser-artifacts/<test-name>-<name>.png``."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^\w.-]+", "_", name)
    path = ARTIFACTS / f"{_current_test['name']}-{slug}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


_MISFITS_JS = """
(selectors) => {
  const out = [];
  for (const selector of selectors) {
    document.querySelectorAll(selector).forEach((el, index) => {
      if (el.scrollWidth > window.innerWidth) {
        const name = el.id ? '#' + el.id
          : (el.className && typeof el.className === 'string'
             ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
        const box = el.closest('fieldset, .module, .hf-panel, #changelist') || el;
        const heading = box.querySelector('h2, caption');
        const where = heading ? heading.innerText.trim().slice(0, 60) : '';
        out.push({selector, index, element: el.tagName.toLowerCase() + name, where,
                  scrollWidth: el.scrollWidth, innerWidth: window.innerWidth});
      }
    });
  }
  return out;
}
"""


def misfits(page) -> list[str]:
    """Every region (``FIT_REGIONS``) wider than the window, as readable lines."""
    return [
        f"{page.url}: {m['selector']}[{m['index']}] ({m['element']}"
        f"{' under ' + repr(m['where']) if m['where'] else ''}) is {m['scrollWidth']}px "
        f"wide in a {m['innerWidth']}px window"
        for m in page.evaluate(_MISFITS_JS, FIT_REGIONS)
    ]


def assert_fits(page) -> None:
    """No region of the page scrolls sideways: ``scrollWidth <= window.innerWidth``."""
    problems = misfits(page)
    assert not problems, "Regions wider than the window:\n" + "\n".join(problems)


def visible_text(page, selector: str = "#content") -> str:
    locator = page.locator(selector)
    return locator.first.inner_text() if locator.count() else page.locator("body").inner_text()


def messages(page, level: str | None = None) -> list[str]:
    """The texts of the admin's message list (``level``: success, error, warning, info)."""
    selector = f".messagelist .{level}" if level else ".messagelist li"
    return [t.strip() for t in page.locator(selector).all_inner_texts()]


def panel_status(page) -> str:
    """The case page's status as the panel heading states it ('D-1 — Held: … (version 7)')."""
    heading = page.locator(".hf-panel h2").first.inner_text()
    match = re.match(r"\s*\S+\s+—\s+(.*?)\s+\(version \d+\)", heading)
    assert match, f"Unexpected case heading: {heading!r}"
    return match.group(1)


def action_labels(page) -> list[str]:
    """Action controls a person can reach on the page: buttons and button-styled links in
    ``.hf-actions`` and submit controls in the content area, shown or behind a disclosure."""
    return page.evaluate(
        """() => {
          const seen = new Set(); const out = [];
          const nodes = document.querySelectorAll(
            '#content .hf-actions button, #content .hf-actions a.button,' +
            '#content form button, #content form input[type=submit],' +
            '#content button, #content a.button, #content input[type=submit]');
          nodes.forEach((el) => {
            // Shown, or behind a disclosure (<details>) a person opens.
            if (seen.has(el) || !(el.checkVisibility() || el.closest('details'))) return;
            seen.add(el);
            out.push((el.textContent || el.value || '').trim().replace(/\\s+/g, ' '));
          });
          return out;
        }"""
    )


def open_case(page, case) -> None:
    """Open a case from the case list by its reference, as a person would."""
    page.goto("/admin/cases/case/")
    page.get_by_role("link", name=case.reference, exact=True).first.click()
    page.wait_for_load_state()
    assert page.locator(".hf-panel").count(), f"No case panel on {page.url}"


_BUTTON_DIAGNOSIS_JS = """
(name) => {
  const matches = [...document.querySelectorAll('button, input[type=submit]')]
    .filter((el) => (el.innerText || el.value || '').trim().startsWith(name));
  return matches.map((el) => ({
    formAttribute: el.getAttribute('form'),
    owner: el.form ? (el.form.id || el.form.getAttribute('action') || '(unnamed form)') : null,
    invalidFields: el.form ? [...el.form.elements].filter((f) => !f.checkValidity())
      .map((f) => `${f.name}: ${f.validationMessage}`) : [],
  }));
}
"""


def press(page, name, *, timeout_ms: int = ACTION_TIMEOUT_MS) -> list[str]:
    """Click the button a person sees as ``name`` (a string or a compiled pattern) and return
    the messages the next page shows. A click that submits nothing fails with the reason."""
    button = page.get_by_role("button", name=name)
    assert button.count(), (
        f"No button {name!r} on {page.url}; visible actions: {action_labels(page)}"
    )
    return _submit(page, button.first, name, timeout_ms)


def act(page, name, *, reason: str = "Checked in the browser suite") -> list[str]:
    """Do what the case page offers as ``name``: press its button, or follow its link to the
    confirmation page, give a reason if one is asked for, and confirm. Returns the messages."""
    if page.get_by_role("button", name=name).count():
        return press(page, name)
    link = page.locator("#content").get_by_role("link", name=name)
    assert link.count(), f"No action {name!r} on {page.url}; visible actions: {action_labels(page)}"
    link.first.click()
    page.wait_for_load_state()
    shot(page, "confirm-" + re.sub(r"\W+", "-", getattr(name, "pattern", name)).strip("-"))
    form = page.locator("#content form").first
    field = form.get_by_label(re.compile("reason", re.I))
    if field.count():
        field.first.fill(reason)
    confirm = form.get_by_role("button")
    assert confirm.count(), f"No confirm button on {page.url}: {visible_text(page)}"
    return _submit(page, confirm.first, f"confirm {name!r}", ACTION_TIMEOUT_MS)


def _submit(page, button, name, timeout_ms: int) -> list[str]:
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    before = page.url
    button.click()
    try:
        page.locator(".messagelist").first.wait_for(timeout=timeout_ms)
    except PlaywrightTimeoutError as exc:
        label = getattr(name, "pattern", name)
        diagnosis = page.evaluate(_BUTTON_DIAGNOSIS_JS, label.lstrip("^"))
        raise AssertionError(
            f"Clicking {name!r} on {before} changed nothing a person can see (no message after "
            f"{timeout_ms} ms; now at {page.url}). The button's form: {diagnosis} "
            "(formAttribute set but owner None: the form it names is not in the page, e.g. a "
            "nested <form> the HTML parser dropped; invalidFields: the browser refused to send "
            "the form)."
        ) from exc
    page.wait_for_load_state()
    return messages(page)


def assert_plain_outcome(page) -> tuple[str, str]:
    """The page shows exactly one outcome: a success, or a refusal in plain words.
    Returns ``("success" | "error", text)``."""
    errors, successes = messages(page, "error"), messages(page, "success")
    assert errors or successes, f"Neither a success nor a refusal shown: {messages(page)}"
    level, texts = ("error", errors) if errors else ("success", successes)
    text = " ".join(texts)
    for smell in ("Traceback", "Exception", "None", "{'", "object at 0x"):
        assert smell not in text, f"The {level} message is not plain words: {text!r}"
    assert len(text.split()) >= 3, f"The {level} message says too little: {text!r}"
    return level, text
