"""Fixtures for Holdfast's own suite: teams, one user per role, an account, cases."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from cases.kernel import SYSTEM
from cases.models import CustomerAccount, Team
from cases.services import case_intake


@pytest.fixture(autouse=True)
def isolated_state_dir(settings, tmp_path):
    """Each test remembers database epochs in its own place (restore detection); the
    sandbox orders the probe tests use are reserved."""
    settings.HOLDFAST_STATE_DIR = str(tmp_path / "state")
    settings.ORDER_SYSTEM_SANDBOX_ORDERS = ["ORD-PROBE", "ORD-SANDBOX"]
    # The suite's fixed dates reach 2031; tests of the horizon itself set it (test_input_bounds).
    settings.DELIVERY_DATE_HORIZON_DAYS = 3650


@pytest.fixture
def roles(db):
    """The role groups, recreated if a transactional test flushed the migrated rows."""
    from cases.roles import ensure_roles

    ensure_roles()


def _user(username: str, role: str, **extra):
    """A staff member of ``role`` with an address to be mailed at (as the demo users have)."""
    extra.setdefault("is_staff", True)
    extra.setdefault("email", f"{username}@example.com")
    user = get_user_model().objects.create_user(username=username, password="pw", **extra)
    user.groups.add(Group.objects.get(name=role))
    return user


@pytest.fixture
def team(db):
    return Team.objects.create(name="Deliveries")


@pytest.fixture
def other_team(db):
    return Team.objects.create(name="Returns")


@pytest.fixture
def make_user(db, roles):
    def make(username: str, role: str = "agent", *, teams=(), **extra):
        user = _user(username, role, **extra)
        for t in teams:
            t.members.add(user)
        return user

    return make


@pytest.fixture
def lead(make_user, team):
    user = make_user("lead", "lead", teams=[team], first_name="Lena", last_name="Lead")
    team.default_owner = user
    team.save()
    return user


@pytest.fixture
def backup(make_user, team):
    user = make_user("backup", "lead", teams=[team], first_name="Bo", last_name="Backup")
    team.default_backup = user
    team.save()
    return user


@pytest.fixture
def agent(make_user, team):
    return make_user("agent", "agent", teams=[team])


@pytest.fixture
def approver(make_user, team):
    return make_user("approver", "approver", teams=[team])


@pytest.fixture
def auditor(make_user, team):
    return make_user("auditor", "auditor", teams=[team])


@pytest.fixture
def outsider(make_user, other_team):
    """A lead of another team: sees none of this team's cases."""
    user = make_user("outsider", "lead", teams=[other_team])
    other_team.default_owner = user
    other_team.save()
    return user


@pytest.fixture
def account(team, lead, backup):
    return CustomerAccount.objects.create(
        reference="ACC-100",
        name="Northwind Bakery",
        team=team,
        verified=True,
        email="orders@northwind.example",
    )


@pytest.fixture
def make_case(account):
    counter = {"n": 0}

    def make(**overrides):
        counter["n"] += 1
        fields = {
            "account": account,
            "request_key": f"req-{counter['n']}",
            "order_id": "ORD-7731",
            "requested_date": timezone.localdate() + dt.timedelta(days=7),
        }
        fields.update(overrides)
        case, _ = case_intake(actor=SYSTEM, **fields)
        return case

    return make


@pytest.fixture
def case(make_case):
    """D-41 style: a verified account's case, waiting for the order source."""
    return make_case()


# --- Holdfast wired to a live reference order system ------------------------------------------


def days_ahead(days: int) -> dt.date:
    return timezone.localdate() + dt.timedelta(days=days)


@pytest.fixture
def live_orders(order_system, settings, account):
    """The order system process, seeded with ACC-100's order ORD-7731, and Holdfast pointed at
    it with the shared grant key. Slots for the next four weeks have room."""
    from tests.support.order_system import DEFAULT_GRANT_KEY

    settings.ORDER_SYSTEM_URL = order_system.base_url
    settings.APPROVAL_GRANT_KEY = DEFAULT_GRANT_KEY
    order_system.seed(
        accounts=[{"account_id": account.reference, "name": account.name, "access_active": True}],
        orders=[
            {
                "order_id": "ORD-7731",
                "account_id": account.reference,
                "delivery_date": str(days_ahead(3)),
            }
        ],
        slots=[{"date": str(days_ahead(d)), "capacity": 5} for d in range(1, 29)],
    )
    return order_system


@pytest.fixture
def autonomous(live_orders):
    """Run the real capability probe against the live order system (it must pass)."""
    from reconciliation.probe import order_system_probe

    live_orders.seed(
        accounts=[{"account_id": "ACC-PROBE", "name": "Probe", "access_active": True}],
        orders=[
            {
                "order_id": "ORD-PROBE",
                "account_id": "ACC-PROBE",
                "delivery_date": str(days_ahead(40)),
            }
        ],
        slots=[{"date": str(days_ahead(40)), "capacity": 5}],
    )
    profile = order_system_probe(sandbox_order_id="ORD-PROBE")
    assert profile.autonomy == "autonomous", profile.evidence
    return profile


@pytest.fixture
def approved_case(live_orders, autonomous, make_case, approver):
    """A case taken from intake to 'ready' through the real services and the live source."""
    from approvals.models import Proposal
    from approvals.services import proposal_approve
    from reconciliation.sources import source_check
    from reconciliation.tasks import prepare_proposal

    def make(**overrides):
        case = make_case(**overrides)
        assert source_check(case_id=case.pk) == "checked"
        assert prepare_proposal(case.pk) == "submitted"
        proposal = Proposal.objects.get(case=case, status=Proposal.Status.AWAITING_REVIEW)
        proposal_approve(proposal=proposal, actor=approver)
        case.refresh_from_db()
        assert case.status == "ready"
        return case

    return make
