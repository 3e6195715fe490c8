"""``manage.py load_demo``: the D-41 demo, idempotent, with a login per role and an API token."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from rest_framework.authtoken.models import Token

from cases.management.commands.load_demo import DEMO_PASSWORD
from cases.models import Case, CaseEvent, CustomerAccount, Status, Team, WaitingOn

# The order system's demo account (``orders.services.DEMO_ACCOUNT``; that app is another
# system's, not installed here).
ORDER_SYSTEM_DEMO_ACCOUNT = ("ACC-100", "Northwind Traders")

ROLES = {
    "lead": "lead",
    "backup": "lead",
    "agent": "agent",
    "approver": "approver",
    "auditor": "auditor",
    "operator": "operator",
    "integration": "agent",
}
# Runs Holdfast, works no team's cases.
TEAMLESS = {"operator"}


def _load_demo() -> str:
    out = io.StringIO()
    call_command("load_demo", stdout=out)
    return out.getvalue()


@pytest.fixture
def demo_output(db):
    return _load_demo()


def test_load_demo_opens_case_d41_waiting_for_the_order_source(demo_output):
    case = Case.objects.get(reference="D-41")

    assert case.status == Status.WAITING_SOURCE
    assert case.waiting_on == WaitingOn.ORDER_SYSTEM
    assert (case.owner.username, case.backup.username) == ("lead", "backup")
    assert case.account.reference == "ACC-100"
    assert case.account.verified
    # The name the order system knows the account by (its orders' and the customer mail's).
    assert (case.account.reference, case.account.name) == ORDER_SYSTEM_DEMO_ACCOUNT
    assert case.order_id == "ORD-7731"
    assert "Demo case: D-41" in demo_output


def test_load_demo_opens_a_case_per_change_kind_on_the_demo_orders(demo_output):
    cases = {c.reference: c for c in Case.objects.order_by("number")}

    assert [(ref, c.order_id, c.kind) for ref, c in cases.items()] == [
        ("D-41", "ORD-7731", "delivery_date"),
        ("D-42", "ORD-7732", "shipping_address"),
        ("D-43", "ORD-7733", "order_cancellation"),
    ]
    assert cases["D-42"].change["address"]["country"] == "GB"
    assert cases["D-43"].change == {"kind": "order_cancellation", "reason_code": "customer_request"}
    assert {c.status for c in cases.values()} == {Status.WAITING_SOURCE}
    for reference in cases:
        assert f"Demo case: {reference} (" in demo_output


def test_load_demo_creates_one_user_per_role_in_the_right_group(demo_output):
    users = get_user_model().objects.filter(username__in=ROLES)

    assert {u.username: [g.name for g in u.groups.all()] for u in users} == {
        name: [role] for name, role in ROLES.items()
    }
    team = Team.objects.get(name="Deliveries")
    assert set(team.members.values_list("username", flat=True)) == set(ROLES) - TEAMLESS
    assert (team.default_owner.username, team.default_backup.username) == ("lead", "backup")
    assert all(u.check_password(DEMO_PASSWORD) for u in users)
    assert not users.get(username="integration").is_staff
    assert users.get(username="auditor").is_staff


def test_load_demo_prints_the_logins_and_the_api_token(demo_output):
    token = Token.objects.get(user__username="integration")

    assert DEMO_PASSWORD in demo_output
    assert f"API token for integration: {token.key}" in demo_output
    for username in ROLES:
        assert f"  {username} " in demo_output


def test_load_demo_twice_changes_nothing(demo_output):
    before = (
        Case.objects.count(),
        CaseEvent.objects.count(),
        get_user_model().objects.count(),
        CustomerAccount.objects.count(),
        Team.objects.count(),
        Token.objects.get(user__username="integration").key,
    )

    second = _load_demo()

    after = (
        Case.objects.count(),
        CaseEvent.objects.count(),
        get_user_model().objects.count(),
        CustomerAccount.objects.count(),
        Team.objects.count(),
        Token.objects.get(user__username="integration").key,
    )
    assert after == before
    assert Case.objects.filter(reference="D-41").count() == 1
    assert before[:2] == (3, 6)
    assert "already there" in second
    assert f"API token for integration: {before[-1]}" in second


def test_demo_token_authenticates_the_integration_user_on_the_api(demo_output, client):
    token = Token.objects.get(user__username="integration")

    response = client.get("/api/cases/D-41/", HTTP_AUTHORIZATION=f"Token {token.key}")

    assert response.status_code == 200
    assert response.json()["reference"] == "D-41"
    assert response.json()["allowed_transitions"] == ["escalate", "cancel"]


def test_the_demo_account_has_its_creation_on_its_own_trail(demo_output):
    """Its history was empty: the demo wrote the row, not the service."""
    from cases.models import AccountEvent

    account = CustomerAccount.objects.get(reference="ACC-100")

    (created,) = AccountEvent.objects.filter(account=account)
    assert created.detail["verified"] is True
    assert created.reason == "Demo account (load_demo)"
    _load_demo()
    assert AccountEvent.objects.filter(account=account).count() == 1
