"""Opening a case from the admin (issue 23): every kind, found from the home page and the
account's page by the roles that may open cases, the order's current value read from the real
order system, one case per request however often the form is sent."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from cases.models import Case, CaseEvent

INTAKE = reverse("admin:cases_case_intake")


@pytest.fixture
def as_user(client):
    def login(user):
        client.force_login(user)
        return client

    return login


def _choose(client, account, order_id: str, kind: str):
    return client.get(INTAKE, {"kind": kind, "account": account.pk, "order_id": order_id})


def _request_key(page) -> str:
    return re.search(r'name="change-request_key" value="([^"]+)"', page.content.decode())[1]


def _url(account, order_id: str, kind: str) -> str:
    return f"{INTAKE}?kind={kind}&account={account.pk}&order_id={order_id}"


ADDRESS = {
    "change-name": "Dana Whitfield",
    "change-line1": "4 Quay Road",
    "change-line2": "",
    "change-city": "Bristol",
    "change-postal_code": "BS1 5TX",
    "change-country": "gb",
    "change-note": "New office from Monday.",
}


@pytest.mark.parametrize("role", ["agent", "lead"])
def test_who_may_open_cases_finds_the_intake_on_the_home_page_and_the_account_page(
    as_user, account, role, request
):
    client = as_user(request.getfixturevalue(role))

    home = client.get(reverse("admin:index")).content.decode()
    page = client.get(reverse("admin:cases_customeraccount_change", args=[account.pk]))

    assert 'id="hf-intake-home"' in home
    assert f'href="{INTAKE}"' in home
    assert f"{INTAKE}?kind=order_cancellation" in home
    assert f'href="{INTAKE}?account={account.pk}"' in page.content.decode()
    assert client.get(reverse("admin:cases_case_add")).url == INTAKE


@pytest.mark.parametrize("role", ["approver", "auditor"])
def test_who_may_not_open_cases_sees_no_intake_and_is_refused(as_user, account, role, request):
    client = as_user(request.getfixturevalue(role))

    home = client.get(reverse("admin:index")).content.decode()

    assert 'id="hf-intake-home"' not in home
    assert client.get(INTAKE).status_code == 403
    assert client.get(reverse("admin:cases_case_add")).status_code == 403
    assert not Case.objects.exists()


@pytest.mark.order_system
def test_the_page_shows_the_orders_current_value_and_opens_one_case_per_request(
    as_user, live_orders, account, agent
):
    client = as_user(agent)
    page = _choose(client, account, "ORD-7731", "shipping_address")
    body = page.content.decode()
    assert "The order now</strong> (order version 1): shipping to Goods In, 1 Dock Road" in body
    key = _request_key(page)
    assert key.startswith("admin-")
    url = _url(account, "ORD-7731", "shipping_address")

    first = client.post(url, {**ADDRESS, "change-request_key": key})
    second = client.post(url, {**ADDRESS, "change-request_key": key})  # a double submit

    case = Case.objects.get()
    assert first.url == second.url == reverse("admin:cases_case_change", args=[case.pk])
    assert (case.kind, case.order_id, case.note) == (
        "shipping_address",
        "ORD-7731",
        "New office from Monday.",
    )
    assert case.change["address"] == {
        "name": "Dana Whitfield",
        "line1": "4 Quay Road",
        "city": "Bristol",
        "postal_code": "BS1 5TX",
        "country": "GB",
    }
    created = CaseEvent.objects.get(case=case, action="cases.case.created")
    assert created.actor == agent
    assert _request_key(_choose(client, account, "ORD-7731", "shipping_address")) != key


@pytest.mark.order_system
def test_errors_stand_beside_their_fields_and_nothing_typed_is_lost(
    as_user, live_orders, account, agent
):
    client = as_user(agent)
    key = _request_key(_choose(client, account, "ORD-7731", "shipping_address"))

    page = client.post(
        _url(account, "ORD-7731", "shipping_address"),
        {**ADDRESS, "change-request_key": key, "change-postal_code": "BS1 <5TX>"},
    )

    body = page.content.decode()
    assert page.status_code == 200
    postal = body.index('name="change-postal_code"')
    assert "letters, digits, spaces and hyphens" in body[postal - 600 : postal]
    assert 'value="BS1 &lt;5TX&gt;"' in body
    assert 'value="Dana Whitfield"' in body
    assert "New office from Monday." in body
    assert f'value="{key}"' in body  # the same request when sent again
    assert not Case.objects.exists()


def test_a_note_too_long_is_said_once(as_user, live_orders, account, agent):
    """Django's "Ensure this value has at most 4000 characters" stood under the field's own."""
    client = as_user(agent)
    key = _request_key(_choose(client, account, "ORD-7731", "shipping_address"))

    page = client.post(
        _url(account, "ORD-7731", "shipping_address"),
        {**ADDRESS, "change-request_key": key, "change-note": "n" * 5000},
    )

    body = page.content.decode()
    assert page.status_code == 200
    assert body.count("At most 4000 characters (this has 5000).") == 1
    assert "Ensure this value has at most" not in body
    assert 'maxlength="4000"' in body  # the browser still stops at the bound
    assert not Case.objects.exists()


@pytest.mark.order_system
def test_a_second_request_for_an_order_with_an_open_case_of_its_kind_links_to_it(
    as_user, live_orders, account, agent, make_case
):
    open_case = make_case()  # a delivery date change to ORD-7731
    client = as_user(agent)
    key = _request_key(_choose(client, account, "ORD-7731", "delivery_date"))

    page = client.post(
        _url(account, "ORD-7731", "delivery_date"),
        {"change-delivery_date": open_case.change["delivery_date"], "change-request_key": key},
    )

    body = page.content.decode()
    link = reverse("admin:cases_case_change", args=[open_case.pk])
    assert f'<a href="{link}">{open_case.reference}</a>' in body
    assert "already has an open delivery date case" in body
    assert Case.objects.count() == 1


@pytest.mark.order_system
def test_a_cancellation_says_it_cannot_be_undone_and_an_order_not_open_says_so(
    as_user, live_orders, account, agent
):
    live_orders.seed(
        orders=[
            {
                "order_id": "ORD-SHIPPED",
                "account_id": account.reference,
                "delivery_date": "2030-01-04",
                "status": "shipped",
            }
        ]
    )
    client = as_user(agent)

    body = _choose(client, account, "ORD-SHIPPED", "order_cancellation").content.decode()

    assert "This cannot be undone." in body
    assert "order shipped; the order is shipped, not open" in body


@pytest.mark.order_system
def test_the_page_never_describes_an_order_of_another_account(as_user, live_orders, account, agent):
    live_orders.seed(
        accounts=[{"account_id": "ACC-999", "name": "Someone else", "access_active": True}],
        orders=[{"order_id": "ORD-THEIRS", "account_id": "ACC-999", "delivery_date": "2030-01-04"}],
    )
    client = as_user(agent)

    body = _choose(client, account, "ORD-THEIRS", "shipping_address").content.decode()

    assert "The order system has no order ORD-THEIRS of account ACC-100" in body
    assert "Dock Road" not in body
    assert "ACC-999" not in body


@pytest.mark.order_system
def test_an_order_the_order_system_has_not_reads_as_another_account_s(
    as_user, live_orders, account, agent
):
    # Told apart before ("does not know order …"): anyone who may open a case learnt whether an
    # order id exists at the order system.
    live_orders.seed(
        accounts=[{"account_id": "ACC-999", "name": "Someone else", "access_active": True}],
        orders=[{"order_id": "ORD-THEIRS", "account_id": "ACC-999", "delivery_date": "2030-01-04"}],
    )
    client = as_user(agent)

    def problem(order_id):
        body = _choose(client, account, order_id, "delivery_date").content.decode()
        said = re.search(r'<p class="hf-order-problem"[^>]*>(.*?)</p>', body, re.S)
        assert said is not None, body
        return said.group(1).replace(order_id, "ORDER")

    assert problem("ORD-NOPE-1") == problem("ORD-THEIRS")
    assert "does not know" not in problem("ORD-NOPE-1")


def test_an_account_of_another_team_cannot_be_chosen(as_user, account, other_account, agent):
    client = as_user(agent)

    page = _choose(client, other_account, "ORD-1", "delivery_date")

    body = page.content.decode()
    assert "Select a valid choice" in body
    assert 'name="change-request_key"' not in body


@pytest.mark.order_system
def test_a_request_for_a_customer_who_lost_access_is_refused_beside_the_account(
    as_user, live_orders, account, agent, lead
):
    """The agent had the form open when the lead revoked the customer's access: the request
    is refused beside the account, what was typed stays, and no case opens."""
    from reconciliation.revocation import account_revoke_access

    client = as_user(agent)
    key = _request_key(_choose(client, account, "ORD-7731", "shipping_address"))
    account_revoke_access(account=account, actor=lead, reason="Contract ended")

    page = client.post(
        _url(account, "ORD-7731", "shipping_address"), {**ADDRESS, "change-request_key": key}
    )

    body = page.content.decode()
    assert page.status_code == 200
    assert "ACC-100 lost access on" in body
    assert "no new request is taken for it." in body
    assert "New office from Monday." in body  # nothing typed is lost
    assert Case.objects.count() == 0
