"""Every page a lead or an approver works on fits a desktop and a phone window: no region
scrolls sideways. A failure names the page, the region and both widths."""

from __future__ import annotations

import pytest

from cases.services import case_transition
from tests.browser.conftest import DESKTOP, PHONE, login, misfits, shot
from tests.support.fixtures import address_change

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


_HIDDEN_SIDEWAYS_JS = """
() => [...document.querySelectorAll('#changelist .results')]
  .filter((el) => el.scrollWidth > el.clientWidth + 1)
  .map((el) => `${el.scrollWidth}px of columns in ${el.clientWidth}px`)
"""


def test_the_audit_and_record_lists_show_every_column_on_a_desktop(
    open_page, held_case, reviewable_case, make_case
):
    """On a 1280px desktop, beside the navigation and the filters, the events list shows every
    column, the reason included, without scrolling the table sideways (it was cut after the
    actor, the action codes broken inside their words); so do the accounts and inbound events
    lists."""
    held = held_case()
    reviewable_case()
    make_case()
    page = open_page(DESKTOP)
    login(page, "lead")
    for name, url in [
        ("events", "/admin/cases/caseevent/"),
        ("events-of-a-held-case", f"/admin/cases/caseevent/?q={held.reference}"),
        ("accounts", "/admin/cases/customeraccount/"),
        ("inbound-events", "/admin/reconciliation/inboundevent/"),
    ]:
        page.goto(url)
        page.wait_for_load_state()
        shot(page, name)
        assert not page.evaluate(_HIDDEN_SIDEWAYS_JS), (name, page.evaluate(_HIDDEN_SIDEWAYS_JS))
    page.goto(f"/admin/cases/caseevent/?q={held.reference}")
    reasons = page.locator("#result_list td.field-reason")
    assert reasons.count() > 3
    results = page.locator("#changelist .results").bounding_box()
    # Who acted, on every row (the person's or worker's label, never the empty user column).
    actors = page.locator("#result_list td.field-acted_by").all_inner_texts()
    assert actors
    assert all(actor.strip() not in {"", "-"} for actor in actors), actors
    for index in range(reasons.count()):
        box = reasons.nth(index).bounding_box()
        assert box["x"] + box["width"] <= results["x"] + results["width"] + 1, (index, box)
        assert box["width"] >= 100, box  # a readable column, not a letter per line


# Every word of a list's cells that the browser laid out on more than one line. A word ends at
# white space, after a hyphen or a slash, and where the page offers a break (``<wbr>``, which
# ends a text node): an id may break at its separators, a word never inside itself.
_WORDS_BROKEN_INSIDE_JS = r"""
() => {
  const broken = [];
  const cells = '#result_list td, #result_list th, .inline-group td, .inline-group th';
  for (const cell of document.querySelectorAll(cells)) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const word = /[^\s\-\/]+[\-\/]?/g;
      for (let m = word.exec(node.data); m; m = word.exec(node.data)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (lines.size > 1) broken.push(`${cell.className || cell.tagName}: ${m[0]}`);
      }
    }
  }
  return [...new Set(broken)];
}
"""

_LIST_LINKS_JS = """
() => [...new Set([...document.querySelectorAll('#nav-sidebar a')]
  .map((a) => a.getAttribute('href'))
  .filter((href) => href && href.startsWith('/admin/') && !href.endsWith('/add/')))]
"""


def test_no_list_breaks_a_word_inside_on_a_desktop(
    open_page, held_case, reviewable_case, make_case, autonomous
):
    """On a 1280px desktop beside the navigation and the filters, every list the lead and the
    approver can open, and a held case's tables of proposals, operations and evidence, keep
    their words whole. The case list's status read "Awaiti / ng review", the approver queue's
    first column "Decemb / er" and "becom / es" (the proposal's name repeated its exact change
    in a letter strip), the order system profiles' "Autonomo / us", the case page's tables
    "OPERATIO / N" and "order / _read".
    A list wider than its region scrolls sideways inside it instead (Django's own way)."""
    held = held_case()
    reviewable_case()
    make_case()
    problems: list[str] = []
    for username in ("lead", "approver"):
        page = open_page(DESKTOP)
        login(page, username)
        page.goto("/admin/cases/case/")  # the navigation beside a list (the home page has none)
        lists = page.evaluate(_LIST_LINKS_JS)
        assert "/admin/cases/case/" in lists, lists
        # And a held case's page: its proposals, operations and evidence as tables.
        for url in [*lists, f"/admin/cases/case/{held.pk}/change/"]:
            page.goto(url)
            page.wait_for_load_state()
            if not page.locator("#result_list, .inline-group table").count():
                continue
            problems.extend(
                f"[{username}] {url}: {w}" for w in page.evaluate(_WORDS_BROKEN_INSIDE_JS)
            )
        shot(page, f"words-whole-{username}")
    assert not problems, "Words broken inside:\n" + "\n".join(problems)


def test_a_long_unbroken_note_wraps_inside_the_case_page(open_page, make_case):
    """A customer's note of one long word (a tracking link, a pasted code) ran off the right
    edge of the case page and was cut, on a desktop and on a phone; the proposal page wrapped
    the same note."""
    word = "https://tracking.example/" + "x" * 400
    case = make_case(note=f"Please use {word} for the courier.")
    for viewport in (DESKTOP, PHONE):
        page = open_page(viewport)
        login(page, "lead")
        page.goto(f"/admin/cases/case/{case.pk}/change/")
        page.wait_for_load_state()
        shot(page, f"long-note-{viewport['width']}")
        problems = misfits(page)
        overflow = page.evaluate(
            """() => [...document.querySelectorAll('#content *')]
              .filter((el) => el.textContent.includes('tracking.example')
                              && el.children.length === 0)
              .filter((el) => el.getBoundingClientRect().right > window.innerWidth + 1)
              .map((el) => `${el.tagName}.${el.className} in ${el.parentElement.tagName}.`
                           + `${el.parentElement.className}: right edge at `
                           + `${Math.round(el.getBoundingClientRect().right)}px`)"""
        )
        assert not problems, (viewport, problems)
        assert not overflow, (viewport, overflow)


_OVERLAPS_THE_TOOLS_JS = """
() => {
  const tools = document.querySelector('.object-tools');
  const title = document.querySelector('#content > h2');
  if (!tools || !title) return 'missing: ' + (!tools ? '.object-tools' : 'the subtitle');
  const a = tools.getBoundingClientRect();
  const range = document.createRange();
  range.selectNodeContents(title);
  // The subtitle's lines of text, not its box (a block as wide as the page).
  return [...range.getClientRects()]
    .filter((b) => !(a.right <= b.left || b.right <= a.left
      || a.bottom <= b.top || b.bottom <= a.top))
    .map((b) => `text ${Math.round(b.left)}-${Math.round(b.right)} under the History button`
      + ` ${Math.round(a.left)}-${Math.round(a.right)}`)
    .join('; ');
}
"""


def test_a_long_subtitle_does_not_run_under_the_history_button(open_page, reviewable_case):
    """A long proposal's name, the page's subtitle, ran under the History button at the
    page's top right: Django floats the button up beside the subtitle."""
    _, proposal = reviewable_case(
        change=address_change(name="Dana Whitfield-Montgomery of the Long Name Trading Company")
    )
    page = open_page(DESKTOP)
    login(page, "approver")
    page.goto(f"/admin/approvals/proposal/{proposal.pk}/change/")
    shot(page, "decision-page")

    assert page.evaluate(_OVERLAPS_THE_TOOLS_JS) == ""
