"""A case's detail answers its guards from the rows it shows: the same answers as a look of
their own, without the look."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import Proposal
from cases.actions import allowed_transitions
from cases.models import Attempt, CancellationRequest, Case, Status
from cases.next_action import describe_next_action
from tests.cases.helpers import make_attempt, make_operation


def _applied(case):
    """An operation confirmed at the order system, of an approved proposal."""
    Proposal.objects.create(
        case=case,
        order_id=case.order_id,
        change=case.change,
        evidence_order_version=1,
        content_hash="0" * 64,
        operation=make_operation(case, confirmed=True),
        prepared_by_label="worker",
        status="approved",
    )


def _cancellation(case, outcome):
    CancellationRequest.objects.create(
        case=case, reason="cancel please", via="api", requested_by_label="customer", outcome=outcome
    )


SITUATIONS = {
    "nothing yet": lambda case: None,
    "an attempt running": lambda case: make_attempt(case, Attempt.State.RUNNING),
    "an attempt cancel requested": lambda case: make_attempt(case, Attempt.State.CANCEL_REQUESTED),
    "an attempt finished": lambda case: make_attempt(case, Attempt.State.FAILED),
    "an operation confirmed": _applied,
    "an operation not confirmed": make_operation,
    "a cancellation pending": lambda case: _cancellation(case, "pending"),
    "a cancellation after the change": lambda case: _cancellation(case, "after_change"),
}
STATUSES = [Status.READY, Status.APPLYING, Status.NEEDS_ATTENTION, Status.DONE]


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("situation", SITUATIONS)
def test_the_detail_says_what_a_look_of_its_own_says(api, lead, make_case, status, situation):
    case = make_case()
    SITUATIONS[situation](case)
    Case.objects.filter(pk=case.pk).update(status=status)

    with CaptureQueriesContext(connection) as reads:
        body = api(lead).get(f"/api/cases/{case.reference}/").json()

    fresh = Case.objects.get(pk=case.pk)
    assert body["next_action"] == describe_next_action(fresh).text
    assert body["allowed_transitions"] == allowed_transitions(fresh, lead)
    looks = [
        q["sql"]
        for q in reads.captured_queries
        if q["sql"].startswith('SELECT 1 AS "a" FROM "cases_attempt"')
        or q["sql"].startswith('SELECT 1 AS "a" FROM "cases_cancellationrequest"')
    ]
    assert looks == []  # they were read with the case: 3 looks each before
