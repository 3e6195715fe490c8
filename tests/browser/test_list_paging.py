"""A lead pages through a case list longer than the count's bound (``cases/paging.py``): the
page says "1,000+ cases" instead of counting every case, and paging still reaches cases past
the first thousand, as a person clicks through it."""

from __future__ import annotations

import re

import pytest

from cases.models import Case
from cases.paging import COUNT_CAP
from tests.browser.conftest import login, shot

pytestmark = [pytest.mark.browser, pytest.mark.order_system]

EXTRA = 60  # cases past the bound


def _many_cases(make_case) -> list[Case]:
    """COUNT_CAP + EXTRA cases on the demo team, written in one go (the admin only lists them)."""
    first = make_case()
    rows = [
        Case(
            reference=f"D-L{n}",
            number=first.number + n,
            account=first.account,
            request_key=f"paging-{n}",
            order_id=f"ORD-L{n}",
            kind=first.kind,
            change=first.change,
            team=first.team,
            owner=first.owner,
        )
        for n in range(1, COUNT_CAP + EXTRA)
    ]
    Case.objects.bulk_create(rows, batch_size=500)
    return [first, *rows]


def test_a_long_case_list_shows_a_bounded_count_and_pages_past_it(open_page, make_case, staff):
    cases = _many_cases(make_case)
    assert len(cases) == COUNT_CAP + EXTRA
    page = open_page()
    login(page, "lead")
    page.goto("/admin/cases/case/")
    page.wait_for_load_state()
    shot(page, "case-list-bounded-count")
    content = page.locator("#content").inner_text()
    assert f"{COUNT_CAP:,}+" in content, content[:500]
    assert f"{COUNT_CAP + EXTRA:,}" not in content  # it did not count them all

    per_page = page.locator("#result_list tbody tr").count()
    assert per_page > 0
    # Page by page, as a person would, through the paginator's own links: each time the
    # furthest page it offers, until it offers none further.
    current = 1
    for _ in range(6):
        links = page.locator("p.paginator a")
        further = [int(t) for t in links.all_inner_texts() if t.strip().isdigit()]
        further = [n for n in further if n > current]
        if not further:
            break
        current = max(further)
        page.locator("p.paginator a", has_text=re.compile(rf"^{current}$")).first.click()
        page.wait_for_load_state()
    shot(page, "case-list-past-the-bound")
    assert "p=" in page.url
    reached = int(re.search(r"[?&]p=(\d+)", page.url).group(1))
    assert reached == current
    # The last page: what is left of the cases after the full pages before it.
    left = COUNT_CAP + EXTRA - (reached - 1) * per_page
    assert 0 < left <= per_page, (reached, per_page)
    assert page.locator("#result_list tbody tr").count() == left
    # The last page reached holds cases past the thousandth: paging was not cut at the bound.
    assert (reached - 1) * per_page >= COUNT_CAP, (reached, per_page)
    rows = page.locator("#result_list tbody tr").all_inner_texts()
    assert any("D-L" in row for row in rows)
