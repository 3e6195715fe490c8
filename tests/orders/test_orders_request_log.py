"""The order system logs one line per request: what reached it can be read afterwards.

Method, path, status and milliseconds for every request (refused ones too), plus the operation
key and fencing token a write carries -- never the approval grant or the credential.
"""

from __future__ import annotations

import logging

import pytest
from django.conf import settings

from orders.faults import fault_add
from orders.models import FaultRule
from tests.orders.helpers import ORDER_ID, make_grant, operation_body

pytestmark = pytest.mark.usefixtures("seeded")


@pytest.fixture
def request_lines(caplog):
    caplog.set_level(logging.INFO, logger="orders.requests")

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "orders.requests"]

    return lines


def test_a_write_is_logged_with_its_operation_key_and_fencing_token(api, request_lines):
    body = operation_body(operation_key="DATE-1-1", fencing_token=7)

    assert api.apply(body).status_code == 201

    (line,) = request_lines()
    assert line.startswith(f"POST /orders/{ORDER_ID}/operations 201 ")
    assert "ms operation_key=DATE-1-1 fencing_token=7" in line


def test_the_grant_and_the_credential_are_never_logged(api, request_lines, caplog):
    grant = make_grant(operation_key="DATE-1-1")
    api.apply(operation_body(operation_key="DATE-1-1", grant=grant))
    api.post(f"/orders/{ORDER_ID}/fence", {"fencing_token": 9})

    text = caplog.text + "\n".join(request_lines())
    assert len(request_lines()) == 2
    assert grant not in text
    assert grant.split(".")[2] not in text  # not even the signature
    assert settings.ORDERS_API_TOKEN not in text
    assert request_lines()[1].startswith(f"POST /orders/{ORDER_ID}/fence 200 ")
    assert request_lines()[1].endswith("fencing_token=9")


def test_refused_and_unauthenticated_requests_are_logged_too(client, api, request_lines):
    api.apply(operation_body(expected_version=5))
    client.get(f"/orders/{ORDER_ID}")  # no credential
    api.get("/operations/DATE-1-9")

    first, second, third = request_lines()
    assert first.startswith(f"POST /orders/{ORDER_ID}/operations 409 ")
    assert second.startswith(f"GET /orders/{ORDER_ID} 401 ")
    assert third.startswith("GET /operations/DATE-1-9 404 ")


def test_an_injected_fault_is_logged_with_the_status_the_client_got(api, faults_on, request_lines):
    fault_add(kind=FaultRule.Kind.UNAVAILABLE, path_prefix="/orders/")

    assert api.apply(operation_body()).status_code == 503

    (line,) = request_lines()
    assert line.startswith(f"POST /orders/{ORDER_ID}/operations 503 ")


def test_a_key_with_odd_characters_is_quoted_not_printed_raw(api, request_lines):
    body = {**operation_body(), "operation_key": "DATE-1-1\nPOST /forged 201"}

    assert api.apply(body).status_code == 422

    (line,) = request_lines()
    assert "\n" not in line
    assert "operation_key='DATE-1-1\\nPOST /forged 201'" in line
