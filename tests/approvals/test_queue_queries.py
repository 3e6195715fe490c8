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
