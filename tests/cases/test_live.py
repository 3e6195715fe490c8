"""The JSON endpoints open admin pages poll to notice that a case or a queue changed."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import httpx
import pytest
from django.contrib.staticfiles import finders
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from approvals.services import proposal_prepare, proposal_reject
from cases.kernel import SYSTEM, apply_transition, lock_case
from cases.live import queue_state
from cases.models import Case
from cases.services import case_transition, case_update_followup
from reconciliation.client import OrderSystemClient
from reconciliation.sources import source_check


def case_url(reference: str) -> str:
    return reverse("live-case", args=[reference])


def queue_url(name: str) -> str:
    return reverse("live-queue", args=[name])


def hold(case: Case) -> Case:
    """Hold the case the way recovery after a restore does (a real transition and event)."""
    with transaction.atomic():
        locked = lock_case(case)
        apply_transition(
            locked, "hold_for_recovery", actor=SYSTEM, reason="Restored: reconcile first"
        )
    return Case.objects.get(pk=case.pk)


def follow_up(case: Case, actor, *, question: str) -> Case:
    case = Case.objects.get(pk=case.pk)
    return case_update_followup(
        case=case,
        expected_version=case.version,
        actor=actor,
        outstanding_question=question,
        reason="Asked the customer",
    )


def read_order(case: Case) -> Case:
    """Run the real source check against an order system answering through MockTransport."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/orders/"):
            return httpx.Response(
                200,
                json={
                    "order_id": case.order_id,
                    "account_id": case.account.reference,
                    "status": "open",
                    "delivery_date": str(timezone.localdate() + dt.timedelta(days=3)),
                    "version": 1,
                },
            )
        if request.url.path.startswith("/slots/"):
            date = request.url.path.rsplit("/", 1)[-1]
            return httpx.Response(200, json={"date": date, "capacity": 5, "taken": 1})
        return httpx.Response(404, json={"error": "not_found", "detail": "no such path"})

    timeouts = {"connect": 1.0, "read": 2.0, "write": 2.0, "pool": 1.0}
    with OrderSystemClient(
        "http://orders.test", timeouts=timeouts, transport=httpx.MockTransport(handler)
    ) as client:
        assert source_check(case_id=case.pk, client=client) == "checked"
    return Case.objects.get(pk=case.pk)


# --- the case endpoint ---------------------------------------------------------------------------


def test_case_endpoint_answers_the_version_and_status_uncached(client, lead, case):
    client.force_login(lead)
    response = client.get(case_url(case.reference))

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    body = response.json()
    assert body == {
        "reference": case.reference,
        "version": case.version,
        "status": case.status,
        "status_display": case.get_status_display(),
        "next_check_at": case.next_check_at.isoformat() if case.next_check_at else None,
        "updated_at": case.updated_at.isoformat(),
    }


def test_case_endpoint_follows_a_change_made_through_a_service(client, lead, case):
    client.force_login(lead)
    before = client.get(case_url(case.reference)).json()

    case_transition(
        case=case,
        transition="escalate",
        expected_version=case.version,
        reason="Customer asks for a person",
        actor=lead,
    )

    after = client.get(case_url(case.reference)).json()
    assert after["version"] == before["version"] + 1
    assert (after["status"], after["status_display"]) == ("needs_attention", "Needs attention")


def test_case_endpoint_hides_another_teams_case_as_not_found(client, outsider, case):
    client.force_login(outsider)
    response = client.get(case_url(case.reference))

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["error"] == "not_found"
    assert case.reference in body["detail"]
    assert "version" not in body


def test_case_endpoint_refuses_anonymous_and_non_staff_callers(client, make_user, team, case):
    response = client.get(case_url(case.reference))
    assert response.status_code == 401
    assert response.json()["error"] == "not_authenticated"

    member = make_user("nonstaff", "agent", teams=[team])
    member.is_staff = False
    member.save()
    client.force_login(member)
    assert client.get(case_url(case.reference)).status_code == 401


def test_live_endpoints_are_read_only(client, lead, case):
    client.force_login(lead)
    assert client.post(case_url(case.reference)).status_code == 405
    assert client.post(queue_url("held")).status_code == 405


# --- the queue endpoint --------------------------------------------------------------------------


def test_held_digest_changes_when_a_held_case_changes_version_and_only_then(
    client, lead, make_case
):
    held = hold(make_case())
    elsewhere = make_case()  # waiting for the source: not in the held queue
    client.force_login(lead)
    first = client.get(queue_url("held"))
    assert first.status_code == 200
    assert "no-store" in first["Cache-Control"]
    assert first.json()["count"] == 1

    assert client.get(queue_url("held")).json() == first.json()
    follow_up(elsewhere, lead, question="Which address?")
    assert client.get(queue_url("held")).json() == first.json()

    follow_up(held, lead, question="Did the order system apply it?")
    changed = client.get(queue_url("held")).json()
    assert changed["count"] == 1
    assert changed["digest"] != first.json()["digest"]


def test_held_digest_changes_when_a_case_joins_the_queue(client, lead, make_case):
    hold(make_case())
    waiting = make_case()
    client.force_login(lead)
    one = client.get(queue_url("held")).json()

    hold(waiting)

    two = client.get(queue_url("held")).json()
    assert two["count"] == 2
    assert two["digest"] != one["digest"]


def test_attention_queue_follows_a_case_that_joins_and_then_leaves(client, lead, case):
    client.force_login(lead)
    empty = client.get(queue_url("needs_attention")).json()
    assert empty["count"] == 0

    case = case_transition(
        case=case,
        transition="escalate",
        expected_version=case.version,
        reason="Customer asks for a person",
        actor=lead,
    )
    joined = client.get(queue_url("needs_attention")).json()
    assert joined["count"] == 1
    assert joined["digest"] != empty["digest"]

    case_transition(
        case=case,
        transition="cancel",
        expected_version=case.version,
        reason="Customer withdrew the request",
        actor=lead,
    )
    left = client.get(queue_url("needs_attention")).json()
    assert left["count"] == 0
    assert left["digest"] != joined["digest"]


def test_queue_is_scoped_to_the_callers_teams(client, lead, outsider, make_case):
    hold(make_case())
    client.force_login(outsider)
    mine = client.get(queue_url("held")).json()
    assert mine["count"] == 0
    client.force_login(lead)
    assert client.get(queue_url("held")).json()["count"] == 1


def test_review_queue_follows_proposals_awaiting_review(client, approver, outsider, agent, case):
    checked = read_order(case)
    client.force_login(approver)
    empty = client.get(queue_url("review")).json()
    assert empty["count"] == 0

    proposal = proposal_prepare(case=checked, actor=agent)
    waiting = client.get(queue_url("review")).json()
    assert waiting["count"] == 1
    assert waiting["digest"] != empty["digest"]
    client.force_login(outsider)
    assert client.get(queue_url("review")).json()["count"] == 0

    proposal_reject(proposal=proposal, actor=approver, reason="Wrong date")
    client.force_login(approver)
    decided = client.get(queue_url("review")).json()
    assert decided["count"] == 0
    assert decided["digest"] != waiting["digest"]


def test_unknown_queue_is_not_found_in_json(client, lead):
    client.force_login(lead)
    response = client.get(queue_url("everything"))
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_queue_digest_is_one_aggregate_query(lead, make_case, django_assert_num_queries):
    for _ in range(3):
        hold(make_case())
    # The look at the person's teams (``selectors.team_ids_of``), then the one aggregate.
    with django_assert_num_queries(2) as captured:
        state = queue_state(lead, "held")
    assert "cases_team_members" in captured.captured_queries[0]["sql"]
    assert state["count"] == 3


# --- the pages render with what the endpoints answer -----------------------------------------


@pytest.mark.parametrize(
    ("changelist", "name"),
    [
        ("admin:cases_heldcase_changelist", "held"),
        ("admin:cases_attentioncase_changelist", "needs_attention"),
        ("admin:approvals_proposal_changelist", "review"),
    ],
)
def test_queue_page_renders_the_banner_with_the_current_digest(
    client, lead, make_case, changelist, name
):
    hold(make_case())
    client.force_login(lead)
    page = client.get(reverse(changelist), follow=True)
    assert page.status_code == 200
    digest = client.get(queue_url(name)).json()["digest"]
    html = page.content.decode()
    assert f'data-live-url="{queue_url(name)}"' in html
    assert f'data-live-version="{digest}"' in html
    assert 'aria-live="polite"' in html


def test_case_page_include_renders_the_banner_for_the_case_endpoint(rf, case):
    from django.template.loader import render_to_string

    html = render_to_string(
        "admin/_live_banner.html",
        {"live_url": case_url(case.reference), "live_version": case.version},
        request=rf.get("/"),
    )
    assert f'data-live-url="{case_url(case.reference)}"' in html
    assert f'data-live-version="{case.version}"' in html
    assert 'aria-live="polite"' in html
    # The poller is a static file (the Content-Security-Policy allows no inline script).
    assert '<script src="/static/holdfast/live.js"></script>' in html
    assert "<script>" not in html
    script = Path(finders.find("holdfast/live.js")).read_text()
    assert 'credentials: "same-origin"' in script
