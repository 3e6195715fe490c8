"""Fixtures for Holdfast's own suite: teams, one user per role, an account, cases."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from cases.kernel import SYSTEM
from cases.models import CustomerAccount, Team
from cases.services import case_open


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


def date_change(date: dt.date) -> dict:
    """A delivery date change to ``date`` (the kind most tests use)."""
    return {"kind": "delivery_date", "delivery_date": date.isoformat()}


def requested_date(case) -> dt.date:
    """The date a delivery date case asks for."""
    return dt.date.fromisoformat(case.change["delivery_date"])


def address_change(**parts) -> dict:
    """A shipping address change (a British address unless ``parts`` say otherwise)."""
    address = {
        "name": "Dana Whitfield",
        "line1": "4 Quay Road",
        "city": "Bristol",
        "postal_code": "BS1 5TX",
        "country": "GB",
        **parts,
    }
    return {"kind": "shipping_address", "address": address}


def cancellation_change(reason_code: str = "customer_request") -> dict:
    return {"kind": "order_cancellation", "reason_code": reason_code}


# The orders a test's cases go to unless it names one: one open case per order and kind, so
# a second open case of a kind takes the next of them (``live_orders`` seeds these; more
# cases than that get orders the order system does not know).
DEFAULT_ORDERS = ("ORD-7731", *(f"ORD-7731-{n}" for n in range(2, 49)))


def _free_order(account, kind: str) -> str:
    from cases.models import Case

    taken = set(
        Case.objects.open().filter(account=account, kind=kind).values_list("order_id", flat=True)
    )
    more = (f"ORD-7731-{n}" for n in itertools.count(len(DEFAULT_ORDERS) + 1))
    return next(order for order in itertools.chain(DEFAULT_ORDERS, more) if order not in taken)


@pytest.fixture
def make_case(account):
    """Open a case through intake (``case_open``): a delivery date change a week ahead unless
    ``change`` (any kind) or ``delivery_date`` says otherwise, on ORD-7731 unless that order
    has an open case of the kind already (then the next of ``DEFAULT_ORDERS``)."""
    counter = {"n": 0}

    def make(*, delivery_date: dt.date | None = None, **overrides):
        counter["n"] += 1
        change = overrides.pop("change", None) or date_change(
            delivery_date or timezone.localdate() + dt.timedelta(days=7)
        )
        fields = {
            "account": account,
            "request_key": f"req-{counter['n']}",
            "order_id": overrides.pop("order_id", None) or _free_order(account, change["kind"]),
            "kind": change["kind"],
            "change": change,
        }
        fields.update(overrides)
        case, _ = case_open(actor=SYSTEM, **fields)
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
    """The order system process, seeded with ACC-100's orders (ORD-7731 and the others of
    ``DEFAULT_ORDERS``), and Holdfast pointed at it with the shared grant key. Slots for the
    next four weeks have room."""
    from tests.support.order_system import DEFAULT_GRANT_KEY

    settings.ORDER_SYSTEM_URL = order_system.base_url
    settings.APPROVAL_GRANT_KEY = DEFAULT_GRANT_KEY
    order_system.seed(
        accounts=[{"account_id": account.reference, "name": account.name, "access_active": True}],
        orders=[
            {
                "order_id": order,
                "account_id": account.reference,
                "delivery_date": str(days_ahead(3)),
            }
            for order in DEFAULT_ORDERS
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
