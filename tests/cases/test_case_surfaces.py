"""Legal holds, and proposals prepared by hand through the admin and the API."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from approvals.models import Proposal
from cases.exceptions import ActionNotPermitted, InvalidCaseInput
from cases.services import case_set_legal_hold
from tests.support.fixtures import date_change, requested_date


def test_legal_hold_is_set_and_lifted_with_an_event_each(case, lead):
    version = case.version

    case = case_set_legal_hold(case=case, actor=lead, hold=True, reason="Litigation notice")
    assert case.legal_hold is True
    assert case.version == version + 1
    case = case_set_legal_hold(case=case, actor=lead, hold=False, reason="Matter closed")

    assert case.legal_hold is False
    actions = list(case.events.values_list("action", flat=True))
    assert actions[-2:] == ["cases.case.legal_hold_set", "cases.case.legal_hold_lifted"]


def test_legal_hold_needs_a_lead_and_a_reason(case, agent, lead):
    with pytest.raises(ActionNotPermitted):
        case_set_legal_hold(case=case, actor=agent, hold=True, reason="mine")
    with pytest.raises(InvalidCaseInput):
        case_set_legal_hold(case=case, actor=lead, hold=True, reason="  ")
    case.refresh_from_db()
    assert case.legal_hold is False


def test_admin_button_places_a_legal_hold(client, lead, case):
    client.force_login(lead)

    client.post(
        reverse("admin:cases_case_action", args=[case.pk, "place_legal_hold"]),
        {"expected_version": case.version, "reason": "Regulator asked"},
    )

    case.refresh_from_db()
    assert case.legal_hold is True
    assert case.events.last().reason == "Regulator asked"


@pytest.fixture
def preparing_case(make_case):
    """A case whose order was read (as the source check records it), ready for a proposal."""
    from cases.kernel import SYSTEM, apply_transition, lock_case

    case = make_case()
    from django.db import transaction

    with transaction.atomic():
        locked = lock_case(case)
        apply_transition(
            locked,
            "source_checked",
            actor=SYSTEM,
            reason="order read",
            last_checked_order_version=1,
        )
    case.refresh_from_db()
    return case


def test_a_person_prepares_a_proposal_with_another_date_over_the_api(preparing_case, agent):
    api = APIClient()
    api.force_authenticate(agent)
    new_date = requested_date(preparing_case) + dt.timedelta(days=2)

    response = api.post(
        f"/api/cases/{preparing_case.reference}/proposals/",
        {
            "change": date_change(new_date),
            "expected_version": preparing_case.version,
            "reason": "Customer confirmed Saturday by phone",
        },
        format="json",
    )

    assert response.status_code == 201, response.json()
    assert response.json()["status"] == "awaiting_review"
    proposal = Proposal.objects.get(case=preparing_case)
    assert proposal.change == date_change(new_date)
    assert proposal.prepared_by == agent
    assert proposal.operation.key == f"DATE-{preparing_case.number}-1"


def test_preparing_by_hand_with_a_stale_version_is_a_conflict(preparing_case, agent):
    api = APIClient()
    api.force_authenticate(agent)

    response = api.post(
        f"/api/cases/{preparing_case.reference}/proposals/",
        {
            "change": date_change(dt.date(2031, 1, 3)),
            "expected_version": preparing_case.version - 1,
        },
        format="json",
    )

    assert response.status_code == 409
    assert response.json()["error"] == "version_conflict"
    assert not Proposal.objects.filter(case=preparing_case).exists()


def test_admin_prepare_form_submits_a_proposal_the_preparer_cannot_approve(
    client, preparing_case, lead
):
    client.force_login(lead)
    page = client.get(reverse("admin:cases_case_change", args=[preparing_case.pk]))
    assert b"Prepare a proposal by hand" in page.content

    client.post(
        reverse("admin:cases_case_prepare", args=[preparing_case.pk]),
        {
            "prepare-expected_version": preparing_case.version,
            "prepare-delivery_date": requested_date(preparing_case).isoformat(),
            "prepare-reason": "",
        },
    )

    proposal = Proposal.objects.get(case=preparing_case)
    assert proposal.status == "awaiting_review"
    assert proposal.prepared_by == lead


def test_system_check_warns_when_one_order_system_call_outlives_a_dispatch_lease(settings):
    from cases.checks import one_request_fits_every_unrenewed_lease

    assert one_request_fits_every_unrenewed_lease(None) == []
    short = {"lease_seconds": 5.0, "heartbeat_seconds": 1.0}
    # An apply attempt renews its lease during the call: a short apply lease is fine.
    settings.LEASES = {**settings.LEASES, "apply": short}
    assert one_request_fits_every_unrenewed_lease(None) == []
    settings.LEASES = {**settings.LEASES, "source_check": short}

    (warning,) = one_request_fits_every_unrenewed_lease(None)
    assert warning.id == "holdfast.W001"
    assert "source_check lease is 5s" in warning.msg


def test_verifying_an_account_starts_its_new_cases(make_case, account, lead):
    from cases.models import CustomerAccount
    from cases.services import account_verify

    CustomerAccount.objects.filter(pk=account.pk).update(verified=False)
    account.refresh_from_db()
    case = make_case()
    assert case.status == "new"

    assert account_verify(account=account, actor=lead) == 1

    case.refresh_from_db()
    assert case.status == "waiting_source"
    assert case.next_check_at is not None
    account.refresh_from_db()
    assert account.verified is True


def test_agents_cannot_verify_accounts(account, agent):
    from cases.services import account_verify

    with pytest.raises(ActionNotPermitted):
        account_verify(account=account, actor=agent)
