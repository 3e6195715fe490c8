"""A lead searches the events page and the accounts page as a person does: types into the
search box and presses Search (``cases.admin.search``: each field asks its own index). The rows
shown are the rows the admin's own search (an ``OR`` of ``icontains``) finds."""

from __future__ import annotations

import re

import pytest

from cases.models import CaseEvent
from tests.browser.conftest import login, shot

pytestmark = [pytest.mark.browser, pytest.mark.order_system]


def _search(page, path: str, words: str) -> list[str]:
    page.goto(path)
    page.locator("#searchbar").fill(words)
    with page.expect_navigation():
        page.locator("#changelist-search input[type=submit]").click()
    page.wait_for_load_state()
    return page.locator("#result_list tbody tr").all_inner_texts()


def _matching(words: str) -> list[CaseEvent]:
    """The events each word matches in the case reference, the reason or the actor."""
    events = CaseEvent.objects.select_related("case")
    for word in words.split():
        events = (
            events.filter(case__reference__icontains=word)
            | events.filter(reason__icontains=word)
            | events.filter(actor_label__icontains=word)
        )
    return list(events)


def test_a_lead_finds_events_by_case_reason_and_actor_and_accounts_by_name(
    open_page, make_case, account
):
    case, other = make_case(), make_case(request_key="search-other", order_id="ORD-8842")
    page = open_page()
    login(page, "lead")

    rows = _search(page, "/admin/cases/caseevent/", case.reference)
    shot(page, "events-search-case")
    assert len(rows) == CaseEvent.objects.filter(case=case).count() > 0, rows
    assert all(case.reference in row for row in rows), rows
    assert not any(other.reference in row for row in rows), rows

    # A word of a reason (longest first: the one fewest events share), case-insensitively.
    reason = CaseEvent.objects.filter(case=case).exclude(reason="").latest("id").reason
    word = max(re.findall(r"[A-Za-z]{4,}", reason), key=len).upper()
    rows = _search(page, "/admin/cases/caseevent/", word)
    shot(page, "events-search-reason")
    expected = _matching(word)
    assert len(rows) == len(expected) > 0, (word, rows)
    assert all(word.lower() in row.lower() for row in rows), rows

    # Two words, each matching a different field: the actor, and the other case's reference.
    rows = _search(page, "/admin/cases/caseevent/", f"SYST {other.reference}")
    expected = _matching(f"SYST {other.reference}")
    assert len(rows) == len(expected) > 0, rows
    assert all(other.reference in row and "system" in row for row in rows), rows

    assert _search(page, "/admin/cases/caseevent/", "zz-nothing-has-this") == []

    rows = _search(page, "/admin/cases/customeraccount/", account.name.split()[-1])
    shot(page, "accounts-search-name")
    assert any(account.reference in row for row in rows), rows
