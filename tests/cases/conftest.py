"""Fixtures for the case tests: API clients, another team's case, an absent owner."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from cases.kernel import SYSTEM
from cases.models import Case, CaseEvent, CustomerAccount, StaffProfile
from cases.services import case_open
from tests.support.fixtures import date_change


@pytest.fixture
def api():
    """An API client authenticated as ``user`` (``force_authenticate``), anonymous for None."""

    def client_for(user=None) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_authenticate(user=user)
        return client

    return client_for


@pytest.fixture
def writes():
    """Counts of cases and events, to show that a refused request wrote nothing."""

    def count() -> tuple[int, int]:
        return Case.objects.count(), CaseEvent.objects.count()

    return count


@pytest.fixture
def other_account(other_team, outsider):
    return CustomerAccount.objects.create(
        reference="ACC-200", name="Southwind Mill", team=other_team, verified=True
    )


@pytest.fixture
def other_case(other_account):
    """A case of the other team, with a distinctive order id to look for in responses."""
    case, _ = case_open(
        actor=SYSTEM,
        account=other_account,
        request_key="other-req-1",
        order_id="ORD-SECRET-9000",
        kind="delivery_date",
        change=date_change(dt.date(2030, 1, 4)),
    )
    return case


@pytest.fixture
def owner_away(lead):
    """The team lead, owner of every new case, is away for the next three days."""
    return StaffProfile.objects.create(
        user=lead, away_until=timezone.localdate() + dt.timedelta(days=3)
    )
