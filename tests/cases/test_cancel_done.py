"""A cancellation of a done case is refused, answered in plain words, and kept on record."""

from __future__ import annotations

import pytest

from cases.exceptions import TransitionRejected
from cases.models import CancellationRequest, CaseEvent, Status
from cases.services import case_cancel_request
from reconciliation.apply import apply_case
from tests.cases.helpers import reload

pytestmark = pytest.mark.order_system


@pytest.fixture
def done_case(approved_case):
    case = approved_case()
    assert apply_case(case_id=case.pk) == "done"
    return reload(case)


def test_cancel_of_a_done_case_answers_409_in_plain_words_over_the_api(api, agent, done_case):
    response = api(agent).post(
        f"/api/cases/{done_case.reference}/cancel/",
        {"reason": "customer changed their mind"},
        format="json",
    )

    assert response.status_code == 409
    detail = response.json()["detail"]
    assert "is done: the change is applied at the order system" in detail
    assert "Reversing it is a new proposal that needs its own approval" in detail


def test_cancel_of_a_done_case_records_a_refused_request_and_an_event(api, agent, done_case):
    before = done_case.version

    api(agent).post(
        f"/api/cases/{done_case.reference}/cancel/", {"reason": "too late"}, format="json"
    )

    request = CancellationRequest.objects.get(case=done_case)
    assert request.outcome == CancellationRequest.Outcome.REFUSED
    assert request.settled_at is not None
    assert request.requested_by == agent
    assert request.via == "api"
    event = CaseEvent.objects.filter(case=done_case).latest("id")
    assert event.action == "cases.cancellation.refused"
    assert event.detail["cancellation_id"] == request.pk
    assert "too late" in event.reason
    case = reload(done_case)
    assert case.status == Status.DONE
    assert case.version == before + 1
    # A refused request is not a late cancellation: the customer was not told anything new.
    assert not case.has_late_cancellation()


def test_the_service_raises_after_the_refusal_is_committed(agent, done_case):
    with pytest.raises(TransitionRejected):
        case_cancel_request(case=done_case, actor=agent, reason="again", via="admin")

    assert CancellationRequest.objects.filter(case=done_case, outcome="refused").count() == 1
