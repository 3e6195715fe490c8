"""The approver's queue costs the same number of queries however many proposals it lists.

Each page reads the caller's teams and permissions once, and every row's relations in one
query per relation: a row adds no query (no N+1), in the API and in the admin.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from approvals import services

from .conftest import read_order


@pytest.fixture
def awaiting(make_case, agent):
    """``awaiting(n)``: ``n`` more proposals prepared by the agent, awaiting review."""

    def make(n: int) -> None:
        for _ in range(n):
            services.proposal_prepare(case=read_order(make_case()), actor=agent)

    return make


def _queries(call) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = call()
    assert response.status_code == 200
    return len(captured.captured_queries)


def test_api_queue_query_count_does_not_grow_with_the_rows(api, approver, awaiting):
    client = api(approver)

    def page():
        return client.get("/api/proposals/", {"status": "awaiting_review"})

    awaiting(2)
    assert len(page().json()["results"]) == 2
    few = _queries(page)
    awaiting(18)
    assert len(page().json()["results"]) == 20
    assert _queries(page) == few


def test_admin_review_queue_query_count_does_not_grow_with_the_rows(client, approver, awaiting):
    client.force_login(approver)
    url = reverse("admin:approvals_proposal_changelist")

    def page():
        return client.get(url, {"status": "awaiting_review"})

    awaiting(3)
    assert page().context["cl"].result_count == 3
    few = _queries(page)
    awaiting(27)
    assert page().context["cl"].result_count == 30
    assert _queries(page) == few


def _columns_of_the_rows(captured: CaptureQueriesContext) -> str:
    """What the page's one read of its proposal rows selects (before its FROM)."""
    [rows] = [
        q["sql"]
        for q in captured.captured_queries
        if q["sql"].startswith('SELECT "approvals_proposal"."id"')
    ]
    return rows.split(" FROM ")[0]


def test_api_queue_reads_of_each_case_only_what_its_row_says(api, approver, awaiting):
    """A case row is 37 columns, its JSON included; a queue row says its case's reference and
    status and decides by its team. Read whole, the cases were 10 of the 24 ms the page's
    read took at 1M cases (``approvals.selectors.queue_rows``). What the row shows is whole."""
    awaiting(3)
    with CaptureQueriesContext(connection) as captured:
        response = api(approver).get("/api/proposals/", {"status": "awaiting_review"})
    assert response.status_code == 200
    read = _columns_of_the_rows(captured)
    assert '"cases_case"."reference"' in read
    assert '"cases_case"."status"' in read
    for column in ("change", "note", "order_seen", "retry_counts", "last_error"):
        assert f'"cases_case"."{column}"' not in read
    assert '"cases_team"' not in read
    results = response.json()["results"]
    assert len(results) == 3
    assert all(row["case"] and row["change"] and row["operation_key"] for row in results)
    assert all(row["may_decide"] for row in results)


def test_admin_queue_reads_of_each_case_only_what_its_row_says(client, approver, awaiting):
    """The admin's queue reads its rows as the API's does (``selectors.queue_rows``); the
    decision page of one proposal reads it whole."""
    awaiting(2)
    client.force_login(approver)
    with CaptureQueriesContext(connection) as captured:
        response = client.get(
            reverse("admin:approvals_proposal_changelist"), {"status": "awaiting_review"}
        )
    assert response.status_code == 200
    read = _columns_of_the_rows(captured)
    assert '"cases_case"."reference"' in read
    for column in ("change", "note", "order_seen", "retry_counts", "last_error"):
        assert f'"cases_case"."{column}"' not in read
    proposals = response.context["cl"].result_list
    assert len(proposals) == 2
    assert all(f"for {p.case.reference}" in response.text for p in proposals)
