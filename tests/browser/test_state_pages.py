"""Every status's case page, read in the browser and checked against the case's facts.

One case per status (and the held and ready cases in each of their two situations) is brought
there by the services and the real worker tasks against the live order system, never by writing
the status. The lead and the agent then open each page; its heading, headline, "why", "who",
"when", "permitted now" and the buttons it offers are checked against what the database says
about that case: its attempts and operations, its next check, its follow-up, the actions the
registry offers that person.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.utils import timezone

from approvals.models import Proposal
from approvals.services import proposal_reject
from cases.actions import case_actions
from cases.models import Case, CustomerAccount, Status, WaitingOn
from cases.next_action import describe_next_action, person, status_label
from cases.services import case_cancel_request, case_transition
from reconciliation.apply import apply_case
from reconciliation.claims import case_claim
from reconciliation.settle import case_reconcile
from reconciliation.sources import source_check
from reconciliation.tasks import prepare_proposal
from tests.browser.conftest import login, panel_status, shot
from tests.support.fixtures import days_ahead

pytestmark = [pytest.mark.browser, pytest.mark.order_system]

PANEL = "section[aria-label='What may happen next']"
MINUTE = "%Y-%m-%d %H:%M"
REASON = "Brought here by the state-pages test"


def _panel(page) -> dict[str, str]:
    return page.locator(PANEL).first.evaluate(
        """(section) => {
          const out = {};
          section.querySelectorAll('dl > dt').forEach((dt) => {
            const dd = dt.nextElementSibling;
            out[dt.innerText.trim()] = dd ? dd.innerText.trim().replace(/\\s+/g, ' ') : '';
          });
          out.__headline = section.querySelector(':scope > p > strong').innerText.trim();
          out.__buttons = [...section.querySelectorAll('.hf-actions a.button, .hf-actions button')]
            .map((el) => el.innerText.trim().replace(/…$/, ''));
          out.__now = (document.querySelector('.hf-path-now strong') || {}).innerText || '';
          return out;
        }"""
    )


def _moment(value: dt.datetime) -> str:
    return timezone.localtime(value).strftime(MINUTE)


@pytest.fixture
def every_state(live_orders, autonomous, make_case, staff, team, settings):
    """``{name: case}``: one case in each status, each reached through the services."""
    lead, approver = staff["lead"], staff["approver"]
    dates = iter(range(5, 28))

    def make(**overrides):
        return make_case(delivery_date=days_ahead(next(dates)), **overrides)

    def reviewable():
        case = make()
        assert source_check(case_id=case.pk) == "checked"
        assert prepare_proposal(case.pk) == "submitted"
        return Case.objects.get(pk=case.pk)

    def approved():
        from approvals.services import proposal_approve

        case = reviewable()
        proposal = Proposal.objects.get(case=case, status=Proposal.Status.AWAITING_REVIEW)
        proposal_approve(proposal=proposal, actor=approver)
        return Case.objects.get(pk=case.pk)

    def held():
        case = approved()
        live_orders.set_fault(
            "drop_after_commit", path_prefix=f"/orders/{case.order_id}/operations"
        )
        assert apply_case(case_id=case.pk) == "effect_unknown"
        live_orders.clear_faults()
        return Case.objects.get(pk=case.pk)

    unverified = CustomerAccount.objects.create(
        reference="ACC-NEW", name="Unverified Ltd", team=team, verified=False
    )
    cases: dict[str, Case] = {}
    cases["new"] = make(account=unverified, order_id="ORD-NEW-1")

    cases["waiting_source"] = make()

    preparing = make()
    assert source_check(case_id=preparing.pk) == "checked"
    cases["preparing_proposal"] = preparing

    cases["awaiting_review"] = reviewable()

    rejected = reviewable()
    proposal_reject(
        proposal=Proposal.objects.get(case=rejected, status=Proposal.Status.AWAITING_REVIEW),
        actor=approver,
        reason="The customer must confirm the date first",
    )
    cases["proposal_rejected"] = rejected

    cases["ready"] = approved()

    applying = approved()
    from cases.kernel import Worker

    case_claim(case_id=applying.pk, worker=Worker("worker:test:state-pages"))
    cases["applying"] = applying

    cases["held_workers"] = held()

    settings.RECONCILE_ATTEMPT_LIMIT = 1
    by_person = held()
    live_orders.set_fault("unavailable", path_prefix=f"/orders/{by_person.order_id}/fence")
    assert case_reconcile(case_id=by_person.pk) == "still held: a person settles it"
    live_orders.clear_faults()
    cases["held_person"] = by_person
    settings.RECONCILE_ATTEMPT_LIMIT = 10

    after_apply = held()
    assert case_reconcile(case_id=after_apply.pk) == "applied"
    cases["ready_after_apply"] = after_apply

    attention = make()
    case_transition(
        case=attention, transition="escalate", expected_version=attention.version,
        reason=REASON, actor=lead,
    )  # fmt: skip
    cases["needs_attention"] = attention

    done = approved()
    assert apply_case(case_id=done.pk) == "done"
    cases["done"] = done

    cancelled = make()
    case_cancel_request(
        case=cancelled, actor=lead, reason=REASON, via="admin", expected_version=cancelled.version
    )
    cases["cancelled"] = cancelled

    stopped = make()
    case_transition(
        case=stopped, transition="stop", expected_version=stopped.version, reason=REASON,
        actor=lead,
    )  # fmt: skip
    cases["stopped"] = stopped

    fresh = {name: Case.objects.get(pk=case.pk) for name, case in cases.items()}
    covered = {case.status for case in fresh.values()}
    assert covered == set(Status), f"statuses not covered: {set(Status) - covered}"
    return fresh


def _check_page(page, name: str, case: Case, user) -> list[str]:
    """The page of ``case`` as ``user`` sees it, against the case's facts; the problems."""
    page.goto(f"/admin/cases/case/{case.pk}/change/")
    page.wait_for_load_state()
    shown = _panel(page)
    facts = describe_next_action(case, actor=user)
    where = f"{name} ({case.reference}, {case.status}) as {user.username}"
    problems: list[str] = []

    def check(ok: bool, what: str) -> None:
        if not ok:
            problems.append(f"{where}: {what}; the page shows {shown}")

    text = page.locator(PANEL).inner_text()
    # The heading and the status path name the status the same way.
    check(panel_status(page) == status_label(case), f"heading is not {status_label(case)!r}")
    check(shown["__now"] == status_label(case), "the status path's 'Now' differs")
    check(shown["__headline"] == facts.headline, f"headline is not {facts.headline!r}")
    # The buttons are exactly the registry's actions for this person, and "Permitted now"
    # says the same.
    offered = [a.label_for(case) for a in case_actions(case, user) if not a.form]
    check(shown["__buttons"] == offered, f"buttons are not {offered}")
    check(shown.get("Permitted now") == facts.permitted_text, "permitted-now differs")

    # Nothing claims "nothing has been sent" once a worker has claimed the case.
    if case.attempts.exists():
        check("nothing has been sent" not in text.lower(), "says nothing has been sent")
    # A cancellation is offered only to an open case; its words follow what it would meet.
    labels = " ".join(shown["__buttons"])
    if case.is_terminal:
        check("Cancel" not in labels, "a finished case offers a cancellation")
        check(shown.get("Follow-up", "").startswith(("Closed", "")), "finished but a clock")
    if not case.nothing_applied() and not case.is_terminal:
        check("Record the customer's cancellation" in labels, "applied: wrong cancel label")
        check("already applied" in shown.get("Permitted now", ""), "applied: no 'already applied'")

    who = shown.get("Who must answer", "")
    responsible = person(case.responsible_now)
    if case.status == Status.HELD:
        if case.next_check_at is not None:
            check(who.startswith("nobody yet: the workers settle it themselves"), "held: who")
            check(
                f"The workers look again at {_moment(case.next_check_at)}"
                in shown.get("Follow-up", ""),
                "held: the workers' next look is not named",
            )
            check(panel_status(page) == "Held: the workers are reconciling it", "held: heading")
        else:
            check(who.startswith(f"{responsible}, the responsible person, must settle"), "who")
            check("workers look again" not in text, "held by a person: names a next look")
    elif case.waiting_on in {WaitingOn.OWNER, WaitingOn.CUSTOMER}:
        check(responsible in who, f"who does not name {responsible}")
    elif case.status == Status.AWAITING_REVIEW:
        check(who.startswith("Ari Approver (approver)"), "review: approvers not named")
    elif case.status in {Status.WAITING_SOURCE, Status.PREPARING_PROPOSAL}:
        check(f"{responsible} is responsible for following up" in who, "who follows up")
    # A held case is decided from the order system's evidence, shown beside it in words.
    if case.status == Status.HELD:
        read = page.locator("#hf-order-read")
        key = case.operations.get().key
        check(read.count() == 1, "held: no consistent read of the operation")
        if read.count():
            check(read.get_attribute("data-read") == "found", "held: the read is not 'found'")
            check(f"has {key} applied" in read.inner_text(), "held: the read names no key")
            check("order at version 2" in read.inner_text(), "held: no order version")
        cites = page.locator("#hf-settle-cites li")
        if any(a.name == "settle" for a in case_actions(case, user)):
            check(cites.count() >= 1, "held: the settlement form cites nothing")
            if cites.count() and read.count():
                check(cites.first.inner_text() == read.inner_text(), "held: cites another read")
        else:
            check(cites.count() == 0, "held: a settlement form for someone who may not settle")
    # When: the page names the case's own clock.
    follow_up = shown.get("Follow-up", "")
    if not case.is_terminal:
        if case.follow_up_at is not None:
            check(_moment(case.follow_up_at) in follow_up, "the follow-up time is not named")
        elif case.next_check_at is not None:
            check(_moment(case.next_check_at) in follow_up, "the next check is not named")
        else:
            check(follow_up in {"", "No follow-up time is set."}, "a clock that is not set")
    if facts.why_waiting:
        label = "What is left" if facts.finished else "Why it waits"
        check(shown.get(label) == facts.why_waiting, f"{label} differs")
    return problems


def test_every_status_page_tells_the_truth(page, every_state, staff):
    problems: list[str] = []
    login(page, "lead")
    for name, case in every_state.items():
        problems += _check_page(page, name, case, staff["lead"])
        shot(page, f"state-{name}")
    page.context.clear_cookies()
    login(page, "agent")
    for name in ("held_workers", "ready_after_apply", "done", "awaiting_review"):
        problems += _check_page(page, name, every_state[name], staff["agent"])
    assert not problems, "\n".join(problems)


def test_a_done_case_has_no_cancel_confirm_page(page, every_state):
    done = every_state["done"]
    login(page, "agent")

    page.goto(f"/admin/cases/case/{done.pk}/transition/cancel/")
    page.wait_for_load_state()

    assert re.search(rf"/admin/cases/case/{done.pk}/change/$", page.url), page.url
    text = page.locator("#content").inner_text() + page.locator(".messagelist").inner_text()
    assert "Nothing has been sent" not in text
    assert f"is not possible now: {done.reference} is done" in text
