"""Intake decides on the account as it is under its lock, not as the caller read it.

Whether a new case starts (reads the order) or waits depends on the account: verified, with
access. Its verification moves the account's waiting cases on, and its loss of access revokes
its open cases; each under the account's lock. An intake that decided on the caller's copy of
the account, without that lock, missed a verification or a loss of access that committed in
between, and neither of those found the case: a case left waiting for a verification that had
happened (nothing moves it on), or started for a customer without access (and never revoked)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction
from django.utils import timezone

import cases.services as services
from cases.exceptions import InvalidCaseInput
from cases.kernel import SYSTEM
from cases.models import Case, CustomerAccount, Status
from reconciliation.revocation import account_revoke_access
from tests.support.fixtures import date_change
from tests.support.lock_waits import Waiter


def change_of(change: dict) -> dict:
    """The API's intake fields of ``change``: its kind, and the change itself."""
    return {"kind": change["kind"], "change": change}


def _open(account, key="r-1"):
    change = date_change(timezone.localdate() + dt.timedelta(days=7))
    case, created = services.case_open(
        actor=SYSTEM,
        account=account,
        request_key=key,
        order_id="ORD-7731",
        kind=change["kind"],
        change=change,
    )
    assert created
    return Case.objects.get(pk=case.pk)


@pytest.fixture
def unverified(team, lead, backup):
    return CustomerAccount.objects.create(
        reference="ACC-200", name="New customer", team=team, verified=False, email="n@x.example"
    )


@pytest.mark.django_db
def test_a_case_opened_with_a_copy_from_before_the_verification_starts(unverified, lead):
    copy = CustomerAccount.objects.get(pk=unverified.pk)
    services.account_verify(account=unverified, actor=lead)

    case = _open(copy)

    assert case.status == Status.WAITING_SOURCE


@pytest.mark.django_db
def test_a_request_with_a_copy_from_before_the_loss_of_access_is_refused(account, lead):
    """The loss of access came first: the request is refused, beside the account, and nothing
    is written. Before, a case opened (and, with the caller's copy, started to read the order)
    for a customer without access, and nothing ever revoked it."""
    copy = CustomerAccount.objects.get(pk=account.pk)
    account_revoke_access(account=account, actor=lead, reason="Contract ended")
    cases_before = Case.objects.count()

    with pytest.raises(InvalidCaseInput) as refused:
        _open(copy)

    today = timezone.localdate().isoformat()
    assert refused.value.extra["fields"] == {
        "account": [f"ACC-100 lost access on {today}: no new request is taken for it."]
    }
    assert Case.objects.count() == cases_before


@pytest.mark.django_db
def test_the_api_refuses_a_request_for_an_account_without_access(account, lead, agent):
    from rest_framework.test import APIClient

    account_revoke_access(account=account, actor=lead, reason="Contract ended")
    client = APIClient()
    client.force_authenticate(agent)
    change = date_change(timezone.localdate() + dt.timedelta(days=7))

    response = client.post(
        "/api/cases/",
        {"account": "ACC-100", "request_key": "r-9", "order_id": "ORD-7731", **change_of(change)},
        format="json",
    )

    assert response.status_code == 400, response.json()
    assert response.json()["error"] == "invalid"
    assert "lost access" in response.json()["fields"]["account"][0]
    assert not Case.objects.filter(request_key="r-9").exists()


def _during_intake(monkeypatch, body) -> dict[str, Waiter]:
    """Start ``body`` on a connection of its own inside the intake's transaction, once the
    intake has decided on the account (at its numbering); let the intake go on once ``body``
    waits for it, or has ended (it did not wait): ``waited`` says which."""
    real = services.case_number_next
    started: dict[str, object] = {}

    def numbered(team):
        other = Waiter(lambda found: body())
        started["other"], started["waited"] = other, other.waits()
        return real(team)

    monkeypatch.setattr(services, "case_number_next", numbered)
    return started


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_verification_during_an_intake_waits_for_it_and_starts_its_case(
    monkeypatch, unverified, lead
):
    started = _during_intake(
        monkeypatch,
        lambda: services.account_verify(
            account=CustomerAccount.objects.get(pk=unverified.pk), actor=lead
        ),
    )

    case = _open(CustomerAccount.objects.get(pk=unverified.pk))

    assert started["other"].join() == {}
    assert started["waited"], "the verification never waited for the intake"
    case.refresh_from_db()
    assert case.status == Status.WAITING_SOURCE


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_loss_of_access_during_an_intake_waits_for_it_and_revokes_its_case(
    monkeypatch, account, lead
):
    started = _during_intake(
        monkeypatch,
        lambda: account_revoke_access(
            account=CustomerAccount.objects.get(pk=account.pk), actor=lead, reason="Ended"
        ),
    )

    case = _open(CustomerAccount.objects.get(pk=account.pk))

    assert started["other"].join() == {}
    assert started["waited"], "the loss of access never waited for the intake"
    case.refresh_from_db()
    assert case.revoked_at is not None
    with transaction.atomic():
        assert not CustomerAccount.objects.get(pk=account.pk).access_active
