"""The case page's status path and timeline: drawn from the state machine and the audit log."""

from __future__ import annotations

import ast
import datetime as dt
import re
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.template import Context, Template
from django.template.loader import render_to_string

from cases import case_story
from cases.case_story import Edge, edges_from
from cases.codes import Action
from cases.kernel import Worker
from cases.models import CaseEvent, Status
from cases.services import case_transition
from cases.templatetags.holdfast_case import status_path_context, timeline_context

ROOT = Path(__file__).resolve().parents[2]
CLAIMER = Worker("worker:host-1:1234")


class _Items(HTMLParser):
    """The ``<li>`` elements of rendered HTML, with their attributes and text."""

    def __init__(self):
        super().__init__()
        self.items: list[dict] = []
        self._open: list[dict] = []

    def handle_starttag(self, tag, attrs):
        if tag == "li":
            item = {**dict(attrs), "text": ""}
            self.items.append(item)
            self._open.append(item)

    def handle_endtag(self, tag):
        if tag == "li" and self._open:
            self._open.pop()

    def handle_data(self, data):
        for item in self._open:
            item["text"] += data


def _items(html: str) -> dict[str, dict]:
    parser = _Items()
    parser.feed(html)
    return {i["data-status"]: i for i in parser.items if "data-status" in i}


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def _render(tag: str, case) -> str:
    return Template("{% load holdfast_case %}{% " + tag + " case %}").render(
        Context({"case": case})
    )


def _move(case, transition, actor, reason):
    return case_transition(
        case=case, transition=transition, expected_version=case.version, reason=reason, actor=actor
    )


# --- the graph ------------------------------------------------------------------------------


def test_edges_are_the_state_machines_transitions():
    edges = set(edges_from(case_story.case_transitions()))
    declared = {
        (source, meta.target, name)
        for name in dir(case_story.Case)
        if (meta_holder := getattr(getattr(case_story.Case, name, None), "_django_fsm", None))
        for source, meta in meta_holder.transitions.items()
    }

    assert {(e.source, e.target, e.transition) for e in edges} == declared
    assert Edge(Status.READY, Status.APPLYING, "claim") in edges
    assert Edge(Status.APPLYING, Status.HELD, "hold") in edges


def test_wildcard_sources_expand_and_self_loops_are_dropped():
    stub = [
        SimpleNamespace(name="panic", source="*", target=Status.HELD),
        SimpleNamespace(name="poke", source="+", target=Status.NEW),
        SimpleNamespace(name="touch", source=Status.READY, target=None),
    ]

    edges = edges_from(stub)

    assert {e.source for e in edges if e.transition == "panic"} == set(Status.values) - {"held"}
    assert {e.source for e in edges if e.transition == "poke"} == set(Status.values) - {"new"}
    assert not [e for e in edges if e.transition == "touch"]


def test_the_real_main_line_is_linked_step_by_step(case):
    path = status_path_context(case)["path"]

    assert [s.status for s in path.steps] == list(case_story.MAIN_LINE)
    assert all(step.linked for step in path.steps[1:])
    held = next(b for b in path.branches if b.status == Status.HELD)
    assert Status.APPLYING in held.sources
    assert Status.DONE in held.targets
    assert "Done" in held.leads_to


def test_removing_or_adding_a_transition_changes_the_rendered_path(case):
    real = case_story.case_transitions()
    without = [t for t in real if t.name != "source_checked"]
    extra = [*real, SimpleNamespace(name="give_up", source=Status.DONE, target=Status.STOPPED)]

    html_real = render_to_string("admin/cases/case/_status_path.html", status_path_context(case))
    html_without = render_to_string(
        "admin/cases/case/_status_path.html", status_path_context(case, transitions=without)
    )
    html_extra = render_to_string(
        "admin/cases/case/_status_path.html", status_path_context(case, transitions=extra)
    )

    gap = "no direct step from Waiting for the order source"
    assert gap not in html_real
    assert gap in _items(html_without)[Status.PREPARING_PROPOSAL]["text"]
    assert "Done" not in _items(html_real)[Status.STOPPED]["text"].split("From:")[1]
    assert "Done" in _items(html_extra)[Status.STOPPED]["text"].split("From:")[1]


# --- the status path on a real case -----------------------------------------------------------


def test_status_path_lights_the_current_step_and_marks_passed_ones(case):
    html = _render("case_status_path", case)
    items = _items(html)

    assert case.status == Status.WAITING_SOURCE
    assert html.count('aria-current="step"') == 1
    assert items[Status.WAITING_SOURCE].get("aria-current") == "step"
    assert "hf-step--current" in items[Status.WAITING_SOURCE]["class"]
    assert "hf-step--done" in items[Status.NEW]["class"]
    assert "hf-step--todo" in items[Status.READY]["class"]
    assert "Finished" not in html


def test_status_path_of_an_escalated_case_lights_the_branch(case, lead, django_assert_num_queries):
    _move(case, "escalate", lead, "The customer sent a new address")
    case.refresh_from_db()

    with django_assert_num_queries(1):
        html = _render("case_status_path", case)
    items = _items(html)

    assert items[Status.NEEDS_ATTENTION].get("aria-current") == "step"
    assert "hf-branch--current" in items[Status.NEEDS_ATTENTION]["class"]
    assert "hf-step--left" in items[Status.WAITING_SOURCE]["class"]
    assert "left the path here" in items[Status.WAITING_SOURCE]["text"]
    assert "hf-step--done" in items[Status.NEW]["class"]
    assert html.count('aria-current="step"') == 1
    # Where needs attention can be reached from and where it leads, from the transitions.
    assert "From: every step from New to Applying" in _text(items[Status.NEEDS_ATTENTION]["text"])
    assert "Ready to apply" in items[Status.NEEDS_ATTENTION]["text"].split("Then:")[1]


def test_a_cancelled_case_looks_finished(case, lead):
    _move(case, "cancel", lead, "The customer withdrew the request")
    case.refresh_from_db()

    html = _render("case_status_path", case)
    items = _items(html)

    assert case.status == Status.CANCELLED
    assert "hf-path--finished" in html
    assert "Finished" in html
    assert items[Status.CANCELLED].get("aria-current") == "step"
    assert "Final: nothing follows" in items[Status.CANCELLED]["text"]


# --- the timeline on real cases ---------------------------------------------------------------


def test_timeline_tells_an_applied_case_in_words(approved_case, approver):
    from reconciliation.apply import apply_case

    approver.first_name, approver.last_name = "Ari", "Approver"
    approver.save()
    case = approved_case()
    assert apply_case(case_id=case.pk, worker=CLAIMER) == "done"
    case.refresh_from_db()

    timeline = _text(_render("case_timeline", case))
    path = _render("case_status_path", case)

    assert "Approved by Ari Approver" in timeline
    assert f"Claimed by worker host-1:1234 as {case.reference}-a1" in timeline
    assert "Moved from Waiting for the order source to Preparing a proposal" in timeline
    assert "Done: the change is confirmed" in timeline
    assert "Case opened by the system" in timeline
    # Newest first.
    assert (
        timeline.index("Done: the change")
        < timeline.index("Approved by")
        < timeline.index("Case opened")
    )
    # The reason comes after the sentence.
    assert timeline.index("Approved by Ari Approver") < timeline.index("approves proposal")
    # Everything happened within seconds: times to the second, exact time on hover.
    assert re.search(
        r'<time datetime="[^"]+" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC">'
        r"\d\d:\d\d:\d\d UTC</time>",
        _render("case_timeline", case),
    )
    assert "hf-path--finished" in path
    assert _items(path)[Status.DONE].get("aria-current") == "step"
    assert all("hf-step--done" in _items(path)[s]["class"] for s in case_story.MAIN_LINE[:-1])


def test_timeline_says_a_held_case_is_held(approved_case):
    from reconciliation.claims import attempts_expire_leases, case_claim

    case = approved_case()
    attempt = case_claim(case_id=case.pk, worker=CLAIMER)
    assert attempts_expire_leases(now=attempt.lease_expires_at + dt.timedelta(seconds=1)) == 1
    case.refresh_from_db()

    timeline = _text(_render("case_timeline", case))
    items = _items(_render("case_status_path", case))

    assert case.status == Status.HELD
    assert "Held: the outcome is unknown" in timeline
    assert "by the watchdog" in timeline
    assert f"The lease of {attempt.reference} expired" in timeline
    assert items[Status.HELD].get("aria-current") == "step"
    assert "hf-step--left" in items[Status.APPLYING]["class"]
    assert "hf-step--done" in items[Status.READY]["class"]


def test_timeline_shows_only_this_case_in_one_query(make_case, lead, django_assert_num_queries):
    mine, other = make_case(), make_case()
    _move(mine, "escalate", lead, "Mine: the address is unclear")
    _move(other, "escalate", lead, "Other: a different reason altogether")
    mine.refresh_from_db()
    _move(mine, "request_source_check", lead, "<b>bold</b> customer")

    with django_assert_num_queries(1):
        html = _render("case_timeline", mine)

    assert "Mine: the address is unclear" in html
    assert "Other: a different reason" not in html
    assert "Escalated to a person by Lena Lead" in html
    assert "&lt;b&gt;bold&lt;/b&gt; customer" in html  # reasons are escaped
    assert html.count("<li") == CaseEvent.objects.filter(case=mine).count()


def test_timeline_is_capped_and_says_so(case, lead):
    for n in range(3):
        _move(case, "escalate" if n % 2 == 0 else "request_source_check", lead, f"Step {n}")
        case.refresh_from_db()

    context = timeline_context(case, limit=2)
    html = render_to_string("admin/cases/case/_timeline.html", context)

    assert len(context["entries"]) == 2
    assert "Only the newest 2 events are shown" in html
    assert "Step 2" in html
    assert "Step 0" not in html


# --- words and times, from events in memory ----------------------------------------------------


def _event(action, at, **fields):
    fields.setdefault("actor_label", "system")
    return CaseEvent(action=action, created_at=at, version=1, **fields)


def test_times_are_to_the_second_near_other_events_otherwise_relative():
    t0 = dt.datetime(2026, 12, 1, 10, 40, 12, tzinfo=dt.UTC)
    first = _event("cases.case.created", t0, pk=1)
    second = _event("cases.evidence.recorded", t0 + dt.timedelta(seconds=115), pk=2)
    third = _event("cases.step.notified", t0 + dt.timedelta(minutes=10), pk=3)

    entries = case_story.timeline([first, third, second], now=t0 + dt.timedelta(minutes=15))

    assert [e.event.pk for e in entries] == [3, 2, 1]  # newest first
    assert entries[0].shown.replace("\xa0", " ") == "5 minutes ago"
    assert entries[1].shown == "10:42:07 UTC"  # near the one before it, with its zone
    assert entries[1].exact == "2026-12-01 10:42:07 UTC"
    assert entries[1].iso == "2026-12-01T10:42:07+00:00"
    assert entries[2].shown == "10:40:12 UTC"  # near the one after it


def test_events_more_than_two_minutes_apart_read_as_how_long_ago():
    t0 = dt.datetime(2026, 12, 1, 10, 40, 0, tzinfo=dt.UTC)
    events = [
        _event("cases.case.created", t0, pk=1),
        _event("cases.case.purged", t0 + dt.timedelta(seconds=121), pk=2),
    ]

    entries = case_story.timeline(events, now=t0 + dt.timedelta(hours=3))

    assert [e.shown.replace("\xa0", " ") for e in entries] == ["2 hours ago", "3 hours ago"]


def test_sentences_use_the_detail_and_fall_back_for_unknown_codes():
    at = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    claimed = _event(
        "cases.case.claimed", at, detail={"attempt": "D-41-a1"}, actor_label="worker:host-1:1234"
    )
    moved = _event(
        "cases.case.transitioned",
        at,
        from_status="waiting_source",
        to_status="preparing_proposal",
        detail={"transition": "no_such_transition"},
    )
    unknown = _event("cases.widget.frobbed_twice", at, detail={"x": "{attempt}"})

    assert case_story.event_sentence(claimed).text == "Claimed by worker host-1:1234 as D-41-a1"
    assert case_story.event_sentence(moved).text == (
        "Moved from Waiting for the order source to Preparing a proposal"
    )
    assert case_story.event_sentence(unknown).text == "Frobbed twice (cases.widget.frobbed_twice)"
    assert case_story.event_sentence(unknown).actor_named is False


# --- every code written has words ------------------------------------------------------------


def _action_codes_written() -> dict[str, list[str]]:
    """Action codes passed to ``record_event`` / ``record_fact`` anywhere in the apps, read
    from the source. A code held in a variable is found among the strings assigned to it in
    the same function."""
    codes: dict[str, list[str]] = {}
    unresolved = []
    for app in ("cases", "approvals", "reconciliation"):
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            for func in ast.walk(tree):
                if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for call in ast.walk(func):
                    if not isinstance(call, ast.Call):
                        continue
                    name = getattr(call.func, "id", None) or getattr(call.func, "attr", None)
                    if name not in {"record_event", "record_fact"}:
                        continue
                    action = next((k.value for k in call.keywords if k.arg == "action"), None)
                    if action is None:
                        continue  # a pass-through (record_fact(**event))
                    found = _strings(action)
                    for ref in ast.walk(action):
                        if isinstance(ref, ast.Name):
                            # A local variable, else a module-level constant.
                            found |= _assigned_codes(func, ref.id) or _assigned_codes(
                                tree, ref.id, top_level=True
                            )
                    where = f"{path.relative_to(ROOT)}:{call.lineno}"
                    if not found and not _typed_pass_through(func, action):
                        unresolved.append(where)
                    for code in found:
                        codes.setdefault(code, []).append(where)
    assert not unresolved, f"action codes not found in the source at {unresolved}"
    return codes


def _strings(node) -> set[str]:
    """Codes written as string literals or as ``Action.MEMBER`` (an unknown member raises)."""
    literals = {
        n.value
        for n in ast.walk(node)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and re.fullmatch(r"[a-z_]+(\.[a-z_]+)+", n.value)
    }
    members = {
        Action[n.attr].value
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "Action"
    }
    return literals | members


def _typed_pass_through(func, action) -> bool:
    """``action`` is a parameter of ``func`` annotated ``Action``: its callers pass a member
    (mypy checks that) and the writer refuses any other string at runtime."""
    if not isinstance(action, ast.Name):
        return False
    params = [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]
    return any(
        p.arg == action.id and p.annotation is not None and "Action" in ast.unparse(p.annotation)
        for p in params
    )


def _assigned_codes(func, name: str, *, top_level: bool = False) -> set[str]:
    found: set[str] = set()
    for node in func.body if top_level else ast.walk(func):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            found |= _strings(node.value)
    return found


def test_every_action_code_written_has_words():
    codes = _action_codes_written()

    assert "cases.case.transitioned" in codes
    assert "cases.revocation.fenced" in codes  # written through a variable
    missing = {code: where for code, where in codes.items() if code not in case_story.ACTION_WORDS}
    assert not missing, f"add these to cases.case_story.ACTION_WORDS: {missing}"


def test_every_action_has_words_and_every_word_is_for_an_action():
    assert set(Action) - set(case_story.ACTION_WORDS) == set()
    assert all(type(code) is Action for code in case_story.ACTION_WORDS)


def test_every_code_written_is_a_registered_action():
    """The writer refuses unregistered codes at runtime; this finds them without running."""
    unregistered = {
        code: where for code, where in _action_codes_written().items() if code not in set(Action)
    }
    assert not unregistered, f"add these to cases.codes.Action: {unregistered}"


def test_every_transition_has_words():
    names = {t.name for t in case_story.case_transitions()}

    assert names - set(case_story.TRANSITION_WORDS) == set()


@pytest.mark.parametrize("code", sorted(case_story.ACTION_WORDS))
def test_every_mapped_code_renders_without_a_placeholder(code):
    event = _event(code, dt.datetime(2026, 12, 1, tzinfo=dt.UTC))

    text = case_story.event_sentence(event).text

    assert "{" not in text
    assert text[0].isupper()


def test_a_released_claim_is_written_under_its_new_code_and_old_events_read_the_same():
    """An attempt's claim was once called its "execution slot" (a delivery slot is another
    thing). The audit log is append-only: events stored under the old code stay and read as
    before, and nothing writes that code again."""
    codes = _action_codes_written()
    at = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    old = _event("cases.attempt.slot_released", at, detail={"attempt": "D-41-a1"})
    new = _event("cases.attempt.claim_released", at, detail={"attempt": "D-41-a1"})

    assert "cases.attempt.claim_released" in codes
    assert "cases.attempt.slot_released" not in codes
    assert case_story.event_sentence(old).text == "D-41-a1 released its claim"
    assert case_story.event_sentence(new).text == "D-41-a1 released its claim"
