"""Every button and form of the admin, for every role, clicked as a person clicks it.

The walk is generic: it reads the controls each page offers (the case page renders exactly
``case_actions(case, user)``, the queues their bulk actions, the decision page its forms) and
performs each one, so a new button is covered without editing this file. Each offered action
either takes effect (the page then shows the new state and version) or is refused in plain
words; for a person who may act, an offered action that is refused is a bug, and an auditor is
offered nothing that changes a case.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest
from django.utils import timezone

from cases.models import Case
from cases.next_action import status_label
from reconciliation.models import Autonomy
from reconciliation.selectors import current_autonomy, current_profile
from tests.browser.conftest import (
    ARTIFACTS,
    act,
    action_labels,
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

ROLES = ["lead", "backup", "agent", "approver", "auditor"]
# Backup holds the lead role: its lists must equal the lead's; the lead walks them.
SAME_AS = {"backup": "lead"}
SMELLS = ("Traceback", "Exception", "None", "{'", "object at 0x")
REASON = "Checked by the browser walk"

# Every control a person can reach in the case page's content area, by kind:
# "button" posts at once, "link" opens a confirm page, "form" is a <details> form,
# "save" the admin's own change form, "delete" its delete link (an authority revocation).
CONTROLS_JS = """() => {
  const text = (el) => (el.textContent || el.value || '').trim().replace(/\\s+/g, ' ');
  const out = [];
  document.querySelectorAll('#content .hf-actions form button').forEach(
    (el) => out.push({kind: 'button', label: text(el)}));
  document.querySelectorAll('#content .hf-actions a.button').forEach(
    (el) => out.push({kind: 'link', label: text(el)}));
  document.querySelectorAll('#content .hf-forms details').forEach((d) => {
    d.querySelectorAll('form button[type=submit], form input[type=submit]').forEach(
      (el) => out.push({kind: 'form', label: text(el),
                        summary: d.querySelector('summary').innerText.trim()}));
  });
  document.querySelectorAll('#content .submit-row input[type=submit]').forEach(
    (el) => out.push({kind: 'save', label: el.value, name: el.name}));
  document.querySelectorAll('#content .submit-row a.deletelink').forEach(
    (el) => out.push({kind: 'delete', label: text(el)}));
  return out;
}"""

EDITABLE_JS = """() => [...document.querySelectorAll(
    '#content input:not([type=hidden]), #content select, #content textarea')]
  .filter((el) => !el.closest('#changelist-search, #changelist-filter'))
  .map((el) => el.name || el.id || el.tagName)"""


TIMES: dict[str, float] = {}


class timed:
    """Adds the block's wall time to ``TIMES[name]`` (the report's breakdown)."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        self.start = time.monotonic()

    def __exit__(self, *exc):
        TIMES[self.name] = TIMES.get(self.name, 0.0) + time.monotonic() - self.start


# --- what a person does -----------------------------------------------------------------------


def exact(label: str) -> re.Pattern:
    return re.compile("^" + re.escape(label) + "$")


def navigate(page, click: Callable[[], None]) -> int:
    """Click something that loads a page; the new page's HTTP status."""
    with page.expect_navigation() as nav:
        click()
    page.wait_for_load_state()
    response = nav.value
    return response.status if response else 0


def outcome(page) -> tuple[str, str]:
    """``assert_plain_outcome``, plus a warning (the admin's level for a revocation)."""
    if messages(page, "error") or messages(page, "success"):
        return assert_plain_outcome(page)
    text = " ".join(messages(page, "warning"))
    assert text, f"Neither a success nor a refusal shown on {page.url}: {messages(page)}"
    for smell in SMELLS:
        assert smell not in text, f"The warning is not plain words: {text!r}"
    return "warning", text


_SAVES = itertools.count(1)
FIELD_VALUES = {
    "external_reference": "WALK-REF-1",
    "kind": "customer_request",
    "summary": "The order screen shows the change",
    "reason": REASON,
}


def fill_form(form) -> None:
    """Fill every field a person must fill, with sensible values; optional ones stay empty."""
    for field in form.locator("input:not([type=hidden]), select, textarea").all():
        name = (field.get_attribute("name") or "").split("-")[-1]
        kind = field.get_attribute("type") or field.evaluate("(el) => el.tagName.toLowerCase()")
        required = field.get_attribute("required") is not None
        if kind == "radio":
            # The settlement: what the evidence truly shows (the held change was applied).
            value = field.get_attribute("value")
            if value == "applied" or (required and name != "outcome" and not value):
                field.check()
            continue
        if name == "delivery_date" or kind == "date":
            field.fill(f"{days_ahead(12):%Y-%m-%d}")
        elif name in FIELD_VALUES:
            field.fill(FIELD_VALUES[name])
        elif kind == "select":
            options = [o for o in field.locator("option").all() if o.get_attribute("value")]
            if required or not field.input_value():
                field.select_option(options[0].get_attribute("value"))
        elif required and kind == "number":
            field.fill("1")
        elif required:
            field.fill("Browser walk")


def perform(page, control: dict) -> None:
    """Do what a person does with one control of the case page (which is open)."""
    kind, label = control["kind"], control["label"]
    if kind == "button":
        press(page, exact(label))
    elif kind == "link":
        act(page, exact(label), reason=REASON)
    elif kind == "form":
        details = page.locator("#content .hf-forms details").filter(
            has=page.get_by_text(control["summary"], exact=True)
        )
        if details.first.get_attribute("open") is None:
            details.first.locator("summary").click()
        form = details.first.locator("form")
        fill_form(form)
        press(page, exact(label))
    elif kind == "save":
        # A new question each time, so that each save really changes the case.
        page.locator("textarea[name=outstanding_question]").fill(
            f"Walk {next(_SAVES)}: does the customer accept {days_ahead(12):%A}?"
        )
        page.locator("input[name=change_reason]").fill(REASON)
        navigate(page, page.locator(f"#content .submit-row input[name='{control['name']}']").click)
    elif kind == "delete":
        navigate(page, page.locator("#content .submit-row a.deletelink").click)
        shot(page, "confirm-delete")
        navigate(page, page.locator("#content form input[type=submit]").first.click)
    else:
        raise AssertionError(f"Unknown control {control}")


def case_page(page, case) -> None:
    page.goto(f"/admin/cases/case/{case.pk}/change/")
    page.wait_for_load_state()
    assert page.locator(".hf-panel").count(), f"No case panel on {page.url}"


def open_case_from_home(page, case) -> None:
    """Home, the 'Cases' link, the case's link: as a person finds it."""
    page.goto("/admin/")
    page.wait_for_load_state()
    link = page.get_by_role("link", name="Cases", exact=True)
    navigate(page, link.and_(page.locator("[href$='/cases/case/']")).first.click)
    case_link = page.locator("#changelist").get_by_role("link", name=case.reference, exact=True)
    assert case_link.count(), f"{case.reference} not in the case list: {visible_text(page)}"
    navigate(page, case_link.first.click)
    assert page.locator(".hf-panel").count(), f"No case panel on {page.url}"


def controls_of(page) -> list[dict]:
    """The case page's controls; every action a person can reach must be one of them (so a
    new kind of control fails here instead of going unwalked)."""
    controls = page.evaluate(CONTROLS_JS)
    known = {c["label"] for c in controls}
    unknown = [label for label in action_labels(page) if label not in known]
    assert not unknown, f"Controls the walk does not know how to use on {page.url}: {unknown}"
    return controls


def park(pages: dict) -> None:
    """Leave every page on a blank one before the test thread writes: an open case page polls
    the server, and SQLite's shared in-memory test database refuses a read while the test
    thread's write transaction holds the table ("database table is locked")."""
    for page in pages.values():
        if page.url != "about:blank":
            page.goto("about:blank")


def heading_version(page) -> int:
    heading = page.locator(".hf-panel h2").first.inner_text()
    match = re.search(r"\(version (\d+)\)", heading)
    assert match, heading
    return int(match.group(1))


# --- states built with the real services ------------------------------------------------------


@pytest.fixture
def states(case_in_state):
    """``build(state)``: a fresh case in that state, each on its own order (the suite's
    ``case_in_state``)."""
    return case_in_state


def use_autonomy(autonomy: str) -> None:
    """A newer profile of the same order system with fencing verified or not (supervised)."""
    profile = current_profile()
    assert profile is not None
    profile.pk = None
    profile.probed_at = timezone.now()
    profile.fencing_enforced = autonomy == Autonomy.AUTONOMOUS
    profile.derive_autonomy()
    profile.save()
    assert current_autonomy().autonomy == autonomy, profile.autonomy_reason


# --- the case page: every action, every role, every state -------------------------------------

# "ready" last: it needs a supervised order system, the others were built under an autonomous one.
STATES = ["waiting_source", "awaiting_review", "needs_attention", "held", "done", "ready"]
# To keep the walk fast, each (state, control) is walked once, by the role offered the fewest
# controls among those offered it: the agent walks what agents and leads share, the lead the
# rest (the test checks that a role with more permissions is offered a superset). A refusal the
# lead alone would meet needs a rule refusing more permissions; HOLDFAST_WALK_EVERY_ROLE=1 walks
# each role's whole list.
WALK_EVERY_ROLE = os.environ.get("HOLDFAST_WALK_EVERY_ROLE") == "1"


def walk_plan(offered: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Who walks which control: ``{role: [control, ...]}``."""
    walkers = [r for r in ROLES if r not in SAME_AS and offered[r]]
    if WALK_EVERY_ROLE:
        return {role: list(offered[role]) for role in walkers}
    plan: dict[str, list[dict]] = {}
    taken: set[tuple[str, str]] = set()
    for role in sorted(walkers, key=lambda r: len(offered[r])):
        for control in offered[role]:
            key = (control["kind"], control["label"])
            if key not in taken:
                taken.add(key)
                plan.setdefault(role, []).append(control)
    return plan


def clear_messages(page) -> None:
    """Drop the messages of the last action, so the next action's messages are its own."""
    page.evaluate("() => document.querySelectorAll('.messagelist').forEach((m) => m.remove())")


def test_every_case_page_action_for_every_role_takes_effect_or_is_refused_plainly(
    open_page, states, staff
):
    started = time.monotonic()
    pages = {}
    with timed("login"):
        for role in ROLES:
            pages[role] = open_page()
            login(pages[role], role)
    perms = {role: staff[role].get_all_permissions() for role in ROLES}
    table: list[dict] = []
    bugs: list[str] = []
    followed: dict[str, set] = {role: set() for role in ROLES}

    for number, state in enumerate(STATES):
        if state == "ready":
            use_autonomy(Autonomy.SUPERVISED)
        park(pages)
        with timed("build"):
            seen = states(state)
        offered: dict[str, list[dict]] = {}
        for role in ROLES:
            page = pages[role]
            with timed("find"):
                if number == 0:
                    open_case_from_home(page, seen)
                else:
                    case_page(page, seen)
            if number == 0 or role == "lead":
                with timed("shot"):
                    shot(page, f"{role}-{state}")
            offered[role] = controls_of(page)
            if role == "auditor":
                assert offered[role] == [], f"An auditor is offered {offered[role]} ({state})"
                assert page.evaluate(EDITABLE_JS) == [], f"An auditor can edit fields ({state})"
                assert page.locator("#content .hf-actions").count() == 0
        for weaker, stronger in itertools.permutations(ROLES, 2):
            if perms[weaker] <= perms[stronger]:
                missing = [c for c in offered[weaker] if c not in offered[stronger]]
                assert not missing, (
                    f"{stronger} holds every permission of {weaker} but is not offered "
                    f"{missing} on a {state} case"
                )
        for role, same in SAME_AS.items():
            assert offered[role] == offered[same], (
                f"{role} and {same} hold the same role but see different actions on a "
                f"{state} case: {offered[role]} vs {offered[same]}"
            )
        for role in ROLES:
            if not offered[role]:
                table.append({"role": role, "state": state, "control": "(none offered)"})
            elif role in SAME_AS:
                table.append(
                    {"role": role, "state": state, "control": f"(same as {SAME_AS[role]})"}
                )
        if state == "ready":
            lead_labels = [c["label"] for c in offered["lead"]]
            assert "Start the apply (supervised)" in lead_labels, lead_labels

        spare = [seen]  # untouched cases in this state
        for role, queue in walk_plan(offered).items():
            page = pages[role]
            queue = list(queue)
            # The case open on the page, and which controls may be walked on it next: any, while
            # it offers what a fresh case offers; else only the controls an action just revealed.
            current, reusable = None, []
            while queue:
                control = queue.pop(0)
                if current is not None and control in reusable:
                    clear_messages(page)
                    case = current
                else:
                    if spare:
                        case = spare.pop()
                    else:
                        park(pages)
                        with timed("build"):
                            case = states(state)
                    with timed("open"):
                        case_page(page, case)
                    assert controls_of(page) == offered[role], (
                        f"A fresh {state} case offers {role} other controls than the first"
                    )
                before = Case.objects.get(pk=case.pk)
                before_events = before.events.count()
                with timed(control["kind"]):
                    perform(page, control)
                level, text = outcome(page)
                after = Case.objects.get(pk=case.pk)
                table.append(
                    {
                        "role": role,
                        "state": state,
                        "kind": control["kind"],
                        "control": control["label"],
                        "outcome": level,
                        "text": text,
                        "status": f"{before.status} -> {after.status}",
                    }
                )
                where = f"{role} on a {state} case, {control['kind']} {control['label']!r}"
                current, reusable = None, []
                if level == "error":
                    bugs.append(f"{where}: offered but refused: {text}")
                    continue
                if after.version <= before.version and after.events.count() <= before_events:
                    bugs.append(f"{where}: said {text!r} but nothing changed")
                    continue
                if not page.locator(".hf-panel").count():
                    case_page(page, after)  # "Save" and "Delete" land on the case list
                shown = heading_version(page)
                assert shown == after.version, (
                    f"{where}: the page shows version {shown}, the case is at {after.version}"
                )
                assert panel_status(page) == status_label(after), where
                if after.status != state:
                    continue
                now = controls_of(page)
                if now == offered[role]:
                    current, reusable = after, now
                    continue
                # A control that appears only after an action (e.g. "Lift the legal hold"):
                # walked next, on this case, once per role.
                revealed = [
                    c
                    for c in now
                    if c not in offered[role] and (c["kind"], c["label"]) not in followed[role]
                ]
                for new in revealed:
                    followed[role].add((new["kind"], new["label"]))
                queue[:0] = revealed
                current, reusable = after, revealed
        if state == "ready":
            use_autonomy(Autonomy.AUTONOMOUS)

    elapsed = time.monotonic() - started
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "every-button-case-page.json").write_text(
        json.dumps({"seconds": round(elapsed, 1), "rows": table}, indent=2)
    )
    for row in table:
        print(
            f"{row['role']:9} {row['state']:16} {row.get('kind', ''):7} {row['control'][:52]:52} "
            f"{row.get('outcome', ''):8} {row.get('status', '')}"
        )
    print(f"case-page walk: {len(table)} rows in {elapsed:.1f} s; {TIMES}")
    assert not bugs, "Offered actions that did not take effect:\n" + "\n".join(bugs)


# --- the other pages: home, queues, case list, proposals, the probe ---------------------------

NEEDS_A_PERSON = "#content .module:has(h2:text-is('Needs a person')) a"
BULK_OPTIONS_JS = """() => [...document.querySelectorAll('#changelist select[name=action] option')]
  .filter((o) => o.value).map((o) => o.textContent.trim())"""
QUEUES = {"held": "/admin/cases/heldcase/", "needs_attention": "/admin/cases/attentioncase/"}


def run_bulk_action(page, case, option: str) -> tuple[str, str]:
    """On a change list: tick the case's row, choose the action, press Go; the outcome."""
    row = page.locator("#result_list tbody tr").filter(
        has=page.get_by_role("link", name=case.reference, exact=True)
    )
    assert row.count() == 1, f"{case.reference} is not a row of {page.url}: {visible_text(page)}"
    row.locator("input.action-select").check()
    page.locator("#changelist select[name=action]").select_option(label=option)
    navigate(page, page.locator("#changelist button[name=index]").first.click)
    if not page.locator(".messagelist").count() and page.locator("#content form").count():
        answer_the_action_page(page)
    return outcome(page)


def answer_the_action_page(page) -> None:
    """An action that asks first, on a page of its own (who takes the cases, why): answer it
    as a person would, a different person in each choice and a reason, and confirm."""
    form = page.locator("#content form").first
    selects = form.locator("select")
    for index in range(selects.count()):
        values = [
            value
            for value in selects.nth(index)
            .locator("option")
            .evaluate_all("(options) => options.map((o) => o.value)")
            if value
        ]
        if values:
            selects.nth(index).select_option(values[min(index, len(values) - 1)])
    reason = form.get_by_label(re.compile("reason", re.I))
    if reason.count():
        reason.first.fill(REASON)
    navigate(page, form.locator("button[type=submit]").first.click)


def back_home(page) -> None:
    """The browser's Back button until the home page (a cached page: no new request)."""
    for _ in range(5):
        if urlsplit(page.url).path.rstrip("/").endswith("/admin"):
            return
        page.go_back()
    raise AssertionError(f"Back does not lead home from {page.url}")


def away_form_people(page) -> list[str]:
    return page.locator("#hf-away-user option").all_inner_texts()


def test_every_other_page_for_every_role_offers_only_what_succeeds(
    open_page, states, staff, live_orders
):
    from approvals.models import Proposal

    started = time.monotonic()
    table: list[dict] = []
    bugs: list[str] = []
    awaiting = states("awaiting_review")
    proposal = Proposal.objects.get(case=awaiting, status=Proposal.Status.AWAITING_REVIEW)
    decided = Proposal.objects.filter(case=states("ready")).get()
    listed = {state: states(state) for state in QUEUES}
    pages = {}
    with timed("login"):
        for role in ROLES:
            pages[role] = open_page()
            login(pages[role], role)
    bulk_offered: dict[tuple[str, str], list[str]] = {}

    for role in ROLES:
        page = pages[role]
        me = staff[role]
        # Home: every "Needs a person" link opens its page.
        page.goto("/admin/")
        shot(page, f"{role}-home")
        links = [
            (a.inner_text().strip(), a.get_attribute("href"))
            for a in page.locator(NEEDS_A_PERSON).all()
        ]
        assert len(links) >= 5, f"The home page lists too few queues: {links}"
        for number, (label, href) in enumerate(links):
            if number:
                back_home(page)
            link = page.locator(NEEDS_A_PERSON).filter(has_text=label).first
            status = navigate(page, link.click)
            errors = messages(page, "error") + page.locator(".errornote").all_inner_texts()
            table.append({"role": role, "page": "home", "control": label, "outcome": status})
            assert status == 200, f"{role}: {label!r} ({href}) answered {status}"
            assert not errors, f"{role}: {label!r} ({href}) shows errors: {errors}"
            assert page.locator("#content").count(), f"{role}: {label!r} opens no content"
            if "/cases/heldcase/" in page.url or "/cases/attentioncase/" in page.url:
                queue = "held" if "/heldcase/" in page.url else "needs_attention"
                shot(page, f"{role}-{queue}-queue")
                assert listed[queue].reference in visible_text(page), (role, queue)
                bulk_offered[(role, queue)] = page.evaluate(BULK_OPTIONS_JS)
            if "/approvals/proposal/" in page.url:
                shot(page, f"{role}-proposals")
                link = page.get_by_role("link", name=re.compile(rf"^Proposal #{proposal.pk}\b"))
                assert link.count(), f"{role} does not find the proposal in {label!r}"
                navigate(page, link.first.click)
                shot(page, f"{role}-decision")
                decision = action_labels(page)
                why_not = page.locator("#hf-why-not")
                may_decide = staff[role].has_perm("approvals.approve_proposal")
                table.append({"role": role, "page": "decision", "control": decision or "(none)"})
                if may_decide:
                    assert "Approve this exact proposal" in decision, decision
                    assert "Reject" in decision, decision
                else:
                    assert decision == [], f"{role} may not decide but is offered {decision}"
                    assert why_not.count(), f"{role} is not told why there is no decision"
                    assert len(why_not.inner_text().split()) >= 5, why_not.inner_text()
                # A decided proposal offers nobody a decision.
                page.goto(f"/admin/approvals/proposal/{decided.pk}/change/")
                assert action_labels(page) == [], f"{role}: a decided proposal offers buttons"

        # The "Away and back" form lists only the people this role may mark away.
        page.goto("/admin/")
        people = away_form_people(page)
        if me.has_perm("cases.lead_case"):
            assert len(people) == len(staff), f"A lead may mark each team member: {people}"
            other = staff["backup" if role == "lead" else "agent"]
        else:
            name = me.get_full_name() or me.username
            assert people == [f"{name} ({me.username}) — me"], (
                f"{role} may mark only themself away, but the form lists {people}"
            )
            assert not any("lead" in p for p in people)
            other = me
        page.locator("#hf-away-user").select_option(str(other.pk))
        page.locator("#hf-away-until").fill(f"{days_ahead(2):%Y-%m-%d}")
        press(page, "Mark away")
        level, text = outcome(page)
        table.append({"role": role, "page": "home", "control": "Mark away", "outcome": level})
        if level != "success":
            bugs.append(f"{role} marking {other} away: {text}")
        else:
            name = other.get_full_name() or other.username
            assert f"Away now: {name}" in visible_text(page), visible_text(page)
            page.locator("#hf-back-user").select_option(str(other.pk))
            press(page, "Mark back")
            level, text = outcome(page)
            table.append({"role": role, "page": "home", "control": "Mark back", "outcome": level})
            if level != "success":
                bugs.append(f"{role} marking {other} back: {text}")

        # The case list: its search, and its bulk actions.
        page.goto("/admin/")
        cases_link = page.get_by_role("link", name="Cases", exact=True)
        navigate(page, cases_link.and_(page.locator("[href$='/cases/case/']")).first.click)
        shot(page, f"{role}-case-list")
        page.locator("#searchbar").fill(awaiting.reference)
        navigate(page, page.locator("#changelist-search input[type=submit]").click)
        found = page.locator("#result_list").get_by_role("link", name=awaiting.reference)
        assert found.count() == 1, f"{role}: the search finds no {awaiting.reference}"
        bulk_offered[(role, "case list")] = page.evaluate(BULK_OPTIONS_JS)

    # Each bulk action offered takes effect when run as a person runs it; none for an auditor.
    assert all(not options for (role, _), options in bulk_offered.items() if role == "auditor"), (
        bulk_offered
    )
    for (role, where), options in bulk_offered.items():
        if role in SAME_AS:
            assert options == bulk_offered[(SAME_AS[role], where)], (role, where, options)
            continue
        for option in options:
            park(pages)
            state = where if where in QUEUES else "waiting_source"
            case = states(state)
            page = pages[role]
            page.goto(QUEUES.get(where, "/admin/cases/case/"))
            before = Case.objects.get(pk=case.pk)
            level, text = run_bulk_action(page, case, option)
            after = Case.objects.get(pk=case.pk)
            table.append(
                {
                    "role": role,
                    "page": where,
                    "control": option,
                    "outcome": level,
                    "text": text,
                    "status": f"{before.status} -> {after.status}",
                }
            )
            if level == "error" or after.version <= before.version:
                bugs.append(f"{role} on the {where}: {option!r} offered, outcome {level}: {text}")
    lead_bulk = {where: bulk_offered[("lead", where)] for where in (*QUEUES, "case list")}
    assert lead_bulk["held"] == ["Reconcile now (fence, then look)"], lead_bulk
    assert any(o.startswith("Check the source now") for o in lead_bulk["needs_attention"])
    assert bulk_offered[("agent", "held")] == [], "Reconciling is for leads"

    # The settle form with a verdict the order system's evidence contradicts: refused plainly.
    park(pages)
    held = states("held")
    page = pages["lead"]
    case_page(page, held)
    form = page.locator("#hf-settle")
    form.get_by_label("The change is NOT applied").check()
    form.locator("input[name=settle-external_reference]").fill("TICKET-WALK")
    form.locator("input[name=settle-summary]").fill("The screen shows the old date")
    press(page, "Record settlement")
    level, text = outcome(page)
    table.append(
        {"role": "lead", "page": "case", "control": "settle: NOT applied", "outcome": level}
    )
    assert level == "error", f"A settlement the evidence contradicts was accepted: {text}"
    assert Case.objects.get(pk=held.pk).status == "held"

    # The probe page: found from the home page; run by whoever is offered it.
    for role in ROLES:
        page = pages[role]
        page.goto("/admin/")
        profiles = page.get_by_role("link", name="Order system profiles", exact=True)
        if not profiles.count():
            table.append({"role": role, "page": "probe", "control": "(not listed)"})
            continue
        navigate(page, profiles.first.click)
        shot(page, f"{role}-profiles")
        run = page.locator("#content .object-tools").get_by_role("link", name="Run probe")
        may_run = staff[role].has_perm("reconciliation.run_probe")
        assert bool(run.count()) == may_run, f"{role}: 'Run probe' offered={run.count()}"
        table.append(
            {"role": role, "page": "probe", "control": "Run probe" if may_run else "(none)"}
        )
        if role == "auditor":
            assert action_labels(page) == [], f"An auditor is offered {action_labels(page)}"
        if not may_run or role in SAME_AS:
            continue
        navigate(page, run.first.click)
        shot(page, f"{role}-run-probe")
        press(page, "Run probe")
        level, text = outcome(page)
        table[-1]["outcome"] = level
        if level != "success":
            bugs.append(f"{role} running the probe: {text}")
        else:
            assert "Autonomous" in text, text
            assert "Autonomous" in page.locator(".field-autonomy").inner_text()

    elapsed = time.monotonic() - started
    (ARTIFACTS / "every-button-other-pages.json").write_text(
        json.dumps({"seconds": round(elapsed, 1), "rows": table}, indent=2, default=str)
    )
    for row in table:
        control = str(row["control"])[:60]
        print(f"{row['role']:9} {row['page']:16} {control:60} {row.get('outcome', '')}")
    print(f"other pages: {len(table)} rows in {elapsed:.1f} s")
    assert not bugs, "Offered controls that did not take effect:\n" + "\n".join(bugs)
