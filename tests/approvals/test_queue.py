"""The approver's queue and the pages a decision rests on (API and admin)."""

from __future__ import annotations

import datetime as dt
import html
import re

import pytest
from django.urls import reverse
from django.utils import timezone

from approvals import services
from cases.models import CustomerAccount

from .conftest import read_order, reload


@pytest.fixture
def queue(make_case, agent, approver, outsider, other_team):
    """Three proposals submitted in the order 3, 1, 2; one approved; one of another team."""
    drafts = [
        services.proposal_prepare(case=read_order(make_case()), actor=agent, submit=False)
        for _ in range(3)
    ]
    for index in (2, 0, 1):
        services.proposal_submit(proposal=drafts[index], actor=agent)
        drafts[index].refresh_from_db()
    approved = services.proposal_prepare(case=read_order(make_case()), actor=agent)
    services.proposal_approve(proposal=approved, actor=approver)
    other_account = CustomerAccount.objects.create(
        reference="ACC-200", name="Southwind", team=other_team, verified=True
    )
    foreign = services.proposal_prepare(
        case=read_order(make_case(account=other_account, request_key="far-1")), actor=outsider
    )
    return {
        "oldest_first": [drafts[2], drafts[0], drafts[1]],
        "approved": approved,
        "foreign": foreign,
    }


def test_api_queue_lists_proposals_awaiting_review_oldest_first(api, approver, queue):
    response = api(approver).get("/api/proposals/", {"status": "awaiting_review"})
    assert response.status_code == 200
    results = response.json()["results"]
    assert [p["id"] for p in results] == [p.pk for p in queue["oldest_first"]]
    first = results[0]
    assert first["operation_key"] == queue["oldest_first"][0].operation.key
    assert first["change"] == queue["oldest_first"][0].change
    assert first["prepared_by"] == "agent"
    assert first["evidence_order_version"] == 1
    assert first["can_decide"] is True
    assert first["would_expire_at"]
    # Every time of the answer in one form: DRF's "…Z" (it was "…+00:00" beside "…Z").
    assert first["would_expire_at"].endswith("Z"), first["would_expire_at"]
    assert first["created_at"].endswith("Z"), first["created_at"]


def test_api_queue_rejects_an_unknown_status(api, approver, queue):
    response = api(approver).get("/api/proposals/", {"status": "maybe"})
    assert response.status_code == 400


def test_api_lists_one_cases_proposals_by_its_reference_and_nothing_of_another_team(
    api, approver, queue
):
    """`?case=D-41` was ignored: a client filtering by case got every proposal."""
    mine = queue["oldest_first"][1]
    foreign = queue["foreign"]

    def ids(case: str) -> list[int]:
        response = api(approver).get("/api/proposals/", {"case": case})
        assert response.status_code == 200
        return [p["id"] for p in response.json()["results"]]

    assert ids(mine.case.reference) == [mine.pk]
    assert ids(foreign.case.reference) == []  # another team's case reads as an unknown one
    assert ids("NOPE-1") == []


def test_admin_changelist_defaults_to_the_queue_oldest_first(client, approver, queue):
    client.force_login(approver)
    url = reverse("admin:approvals_proposal_changelist")
    redirect = client.get(url)
    assert redirect.status_code == 302
    assert redirect["Location"] == f"{url}?status=awaiting_review"

    body = client.get(redirect["Location"]).content.decode()
    positions = [body.index(f"Proposal #{p.pk} ") for p in queue["oldest_first"]]
    assert positions == sorted(positions)
    assert f"Proposal #{queue['approved'].pk} " not in body
    assert f"Proposal #{queue['foreign'].pk} " not in body


def test_admin_lists_every_proposal_from_the_filters_all(client, approver, queue):
    """The status filter's "All" linked to the bare list, which opens the approvers' queue:
    the approved proposal could be found only under its own status. "All" is ``status=all``."""
    client.force_login(approver)
    url = reverse("admin:approvals_proposal_changelist")
    queue_page = client.get(url, {"status": "awaiting_review"})
    choices = queue_page.context["cl"].filter_specs[0].choices(queue_page.context["cl"])
    assert next(choices)["query_string"] == "?status=all"
    page = client.get(url, {"status": "all"})
    assert page.status_code == 200
    listed = {p.pk for p in page.context["cl"].result_list}
    assert listed == {p.pk for p in queue["oldest_first"]} | {queue["approved"].pk}


def test_admin_search_shows_all_proposals_from_its_show_all(client, approver, queue):
    """A search's "Show all" linked to the bare list, which opens the approvers' queue: after
    a search for an approved proposal, "Show all" showed fewer proposals than the search."""
    client.force_login(approver)
    url = reverse("admin:approvals_proposal_changelist")
    approved = queue["approved"]

    found = client.get(url, {"q": approved.case.reference})
    body = found.content.decode()
    assert f"Proposal #{approved.pk} " in body
    show_all = re.search(r'\(<a href="([^"]*)">Show all</a>\)', body)
    assert show_all is not None, body
    page = client.get(url + html.unescape(show_all.group(1)))

    assert page.status_code == 200
    listed = {p.pk for p in page.context["cl"].result_list}
    assert listed == {p.pk for p in queue["oldest_first"]} | {approved.pk}


def test_admin_queue_row_names_the_proposal_and_case_once_and_who_prepared_it(
    client, approver, queue
):
    """Each row: "Proposal #N for D-x" (the link), the exact change once, the evidence version
    and who prepared it. The first column repeated the exact change; a column named as the
    model's ``prepared_by`` field would show the field (empty for a worker), not the label."""
    client.force_login(approver)
    url = reverse("admin:approvals_proposal_changelist")
    body = client.get(url, {"status": "awaiting_review"}).content.decode()
    first = queue["oldest_first"][0]
    link = reverse("admin:approvals_proposal_change", args=[first.pk])
    opening = body.index(f'<a href="{link}?')
    row = body[body.rindex("<tr", 0, opening) : body.index("</tr>", opening)]
    assert f'<a href="{link}?_changelist_filters=status%3Dawaiting_review">' in row, row
    assert f"Proposal #{first.pk} for {first.case.reference}</a>" in row, row
    assert row.count(first.description) == 1, row
    assert '<td class="field-preparer">agent</td>' in row, row
    assert '<td class="field-evidence_version">1</td>' in row, row


def test_admin_proposal_page_shows_the_exact_change_evidence_preparer_and_default_expiry(
    client, approver, proposal, settings
):
    client.force_login(approver)
    default = dt.timedelta(minutes=settings.APPROVAL_DEFAULT_MINUTES)
    before = timezone.now() + default
    response = client.get(reverse("admin:approvals_proposal_change", args=[proposal.pk]))
    after = timezone.now() + default
    body = response.content.decode()

    assert f"Decide: ORD-7731 — {proposal.description}" in body
    assert proposal.description.startswith("the delivery moves to ")
    assert "rests on order version <strong>1</strong>" in body
    assert "prepared by <strong>agent</strong>" in body
    assert f"operation <strong>{proposal.operation.key}</strong>" in body
    assert any(
        f"expires by default at {moment:%Y-%m-%d %H:%M} UTC" in body for moment in (before, after)
    )
    assert "Approve this exact proposal" in body
    # The evidence in words (its list), not the rows' ids ("Evidence ids: [5]").
    assert "Evidence ids" not in body
    assert 'id="hf-evidence"' in body


def test_admin_case_page_shows_proposal_history_operation_key_and_live_approval(
    client, lead, approval, proposal, agent
):
    client.force_login(lead)
    response = client.get(reverse("admin:cases_case_change", args=[proposal.case_id]))
    body = response.content.decode()
    assert response.status_code == 200
    assert "Proposal history" in body
    assert f"<dd>{proposal.operation.key} (kept by this proposal's retries" in body
    expires = f"{timezone.localtime(approval.expires_at):%Y-%m-%d %H:%M} UTC"
    assert f"{approval.reference} by approver, expires {expires}" in body


def test_admin_case_page_shows_no_approval_once_it_expired(client, lead, approval, proposal):
    services.approvals_expire_due(now=approval.expires_at + dt.timedelta(seconds=1))
    client.force_login(lead)
    body = client.get(reverse("admin:cases_case_change", args=[proposal.case_id])).content
    assert f"{approval.reference} by approver, expires" not in body.decode()
    assert reload(proposal.case).status == "awaiting_review"
