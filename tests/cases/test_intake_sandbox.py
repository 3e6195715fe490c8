"""The probe's sandbox orders are reserved: intake refuses a case on one."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from cases.exceptions import InvalidCaseInput
from cases.kernel import SYSTEM
from cases.models import Case, CaseEvent
from cases.services import case_open
from tests.support.fixtures import date_change


@pytest.mark.parametrize("order_id", ["ORD-PROBE", " ORD-PROBE ", "ord-probe", "ORD-SANDBOX"])
def test_intake_refuses_a_case_on_a_sandbox_order(account, order_id):
    with pytest.raises(InvalidCaseInput) as refused:
        case_open(
            actor=SYSTEM,
            account=account,
            request_key="req-probe",
            order_id=order_id,
            kind="delivery_date",
            change=date_change(timezone.localdate() + dt.timedelta(days=7)),
        )

    assert "order_id" in refused.value.fields
    assert Case.objects.count() == 0
    assert CaseEvent.objects.count() == 0


def test_the_api_answers_400_for_a_sandbox_order(account, agent):
    client = APIClient()
    client.force_authenticate(agent)

    response = client.post(
        "/api/cases/",
        {
            "account": account.reference,
            "request_key": "email-probe",
            "order_id": "ORD-PROBE",
            "kind": "delivery_date",
            "change": date_change(timezone.localdate() + dt.timedelta(days=7)),
        },
        format="json",
    )

    assert response.status_code == 400, response.json()
    assert "order_id" in response.json()["fields"]
    assert not Case.objects.exists()


def test_intake_still_opens_cases_on_other_orders(make_case):
    assert make_case(order_id="ORD-PROBE-2").order_id == "ORD-PROBE-2"
