"""Input bounds: bad input is a 400 with the JSON error shape (or an admin page, never a 500),
and what is accepted is within bounds, whichever surface it comes through."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from cases.models import Case, CaseEvent, Status
from tests.support.fixtures import date_change

INTAKE = {
    "account": "ACC-100",
    "request_key": "email-northwind-1",
    "order_id": "ORD-7731",
    "note": "Move the delivery to Friday.",
}


def _today() -> dt.date:
    return timezone.localdate()


def _intake(requested_date: str | None = None, **overrides):
    date = requested_date or str(_today() + dt.timedelta(days=7))
    change = {"kind": "delivery_date", "delivery_date": date}
    return {**INTAKE, "kind": "delivery_date", "change": change, **overrides}


@pytest.fixture
def browser():
    """A test client that answers a server error with a 500 instead of raising it."""

    def login(user) -> Client:
        client = Client(raise_request_exception=False)
        client.force_login(user)
        return client

    return login


@pytest.fixture
def api_as():
    def client_for(user) -> APIClient:
        client = APIClient(raise_request_exception=False)
        client.force_authenticate(user=user)
        return client

    return client_for


# --- the 500s ---------------------------------------------------------------------------------


@pytest.mark.parametrize("param", ["owner", "responsible"])
def test_api_case_list_with_a_nul_in_a_user_filter_is_400(api_as, lead, case, param):
    response = api_as(lead).get("/api/cases/", {param: "\x00"})

    assert response.status_code == 400
    assert response.json()["error"] == "invalid"
    assert param in response.json()["fields"]


def test_api_body_nested_too_deep_is_400_and_writes_nothing(api_as, agent, account, writes):
    before = writes()
    body = "[" * 100_000 + "]" * 100_000

    response = api_as(agent).post("/api/cases/", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"] == "malformed_request"
    assert writes() == before


def test_api_body_nested_a_little_is_parsed(api_as, agent, account):
    response = api_as(agent).post(
        "/api/cases/", json.dumps(_intake(note=[[["x"]]])), content_type="application/json"
    )

    assert response.status_code == 400
    assert response.json()["error"] == "invalid"
    assert "note" in response.json()["fields"]


def test_an_api_number_too_long_to_read_is_400_in_plain_words(api_as, agent, account, writes):
    """Python's own words ("use sys.set_int_max_str_digits()") reached the caller."""
    before = writes()
    digits = "9" * 5000
    body = json.dumps({**_intake(), "note": digits}).replace(f'"{digits}"', digits)
    in_a_string = json.dumps({**_intake(), "note": "9" * 3000 + " fine"})

    response = api_as(agent).post("/api/cases/", body, content_type="application/json")
    after = writes()
    quoted = api_as(agent).post("/api/cases/", in_a_string, content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {
        "error": "malformed_request",
        "detail": "JSON parse error - a number has more than 4300 digits.",
    }
    assert after == before
    assert quoted.status_code == 201  # digits inside a string are text


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ('{"account": "ACC-100", "note":', "a value was expected at line 1, column 31."),
        ('{"account": "ACC-100" "note": ""}', "a comma was expected at line 1, column 23."),
        (
            '{"account": "ACC-100",}',
            "a field name in double quotes was expected at line 1, column 23.",
        ),
        ('{"note": "open}', "a string is not closed at line 1, column 10."),
        ("{}\n{}", "more follows the end of the JSON value at line 2, column 1."),
    ],
)
def test_a_body_that_is_not_json_is_400_in_words(api_as, agent, account, writes, body, detail):
    """Python's own words ("Expecting value: line 1 column 31 (char 30)") reached the caller."""
    before = writes()
    response = api_as(agent).post("/api/cases/", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json() == {
        "error": "malformed_request",
        "detail": f"JSON parse error - {detail}",
    }
    assert writes() == before


def test_nan_is_400_in_words(api_as, agent, account, writes):
    body = json.dumps({**_intake(), "note": "x"}).replace('"x"', "NaN")
    response = api_as(agent).post("/api/cases/", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["detail"] == "JSON parse error - NaN and Infinity are not JSON numbers."


@pytest.mark.parametrize("param", ["owner", "responsible", "team"])
@pytest.mark.parametrize("value", ["abc", "\x00", "99999999999999999999999"])
def test_admin_case_list_with_a_bad_filter_value_is_not_a_500(browser, lead, case, param, value):
    response = browser(lead).get(reverse("admin:cases_case_changelist"), {param: value})

    assert response.status_code in {200, 302}
    if response.status_code == 302:
        assert "e=1" in response["Location"]


def test_admin_case_list_filters_by_a_good_owner_value(browser, lead, backup, case):
    url = reverse("admin:cases_case_changelist")

    assert case.reference in browser(lead).get(url, {"owner": lead.pk}).text
    assert case.reference not in browser(lead).get(url, {"owner": backup.pk}).text


@pytest.mark.parametrize(
    ("url_name", "param"),
    [
        ("admin:cases_caseevent_changelist", "action__exact"),
        ("admin:cases_caseevent_changelist", "action"),
        ("admin:cases_caseevent_changelist", "reason__contains"),
        ("admin:cases_caseevent_changelist", "q"),
        ("admin:cases_case_changelist", "status__exact"),
        ("admin:cases_case_changelist", "waiting_on__exact"),
        ("admin:cases_case_changelist", "order_id"),
        ("admin:cases_case_changelist", "q"),
    ],
)
def test_admin_field_filter_with_a_nul_is_not_a_500(browser, lead, case, url_name, param):
    response = browser(lead).get(reverse(url_name), {param: "\x00"})

    assert response.status_code in {200, 302}


def test_admin_event_filter_with_a_good_action_still_filters(browser, lead, case):
    response = browser(lead).get(
        reverse("admin:cases_caseevent_changelist"), {"action__exact": "cases.case.created"}
    )

    assert response.status_code == 200
    assert "cases.case.created" in response.text


@pytest.mark.order_system
def test_admin_settle_form_with_a_huge_order_version_is_refused_not_a_500(
    browser, approved_case, lead
):
    from cases.kernel import Worker
    from reconciliation.claims import attempts_expire_leases, case_claim

    held = approved_case()
    case_claim(case_id=held.pk, worker=Worker("worker:test:bounds"))
    assert attempts_expire_leases(now=timezone.now() + dt.timedelta(hours=1)) == 1
    held.refresh_from_db()
    assert held.status == Status.HELD
    events = CaseEvent.objects.filter(case=held).count()

    client = browser(lead)
    response = client.post(
        reverse("admin:cases_case_settle", args=[held.pk]),
        {
            "settle-expected_version": held.version,
            "settle-outcome": "absent",
            "settle-external_reference": "ticket 7",
            "settle-summary": "The order screen shows the old date",
            "settle-order_version": str(10**30),
        },
    )

    assert response.status_code == 302
    assert CaseEvent.objects.filter(case=held).count() == events
    held.refresh_from_db()
    assert held.status == Status.HELD
    # The message says which field, not "fill in every field" (every field was filled in).
    page = client.get(response["Location"])
    text = " ".join(str(m) for m in page.context["messages"])
    assert "Settlement not recorded: Order version: " in text, text
    assert "fill in every field" not in text


# --- delivery dates ---------------------------------------------------------------------------


@pytest.fixture
def horizon(settings):
    settings.DELIVERY_DATE_HORIZON_DAYS = 365
    return 365


@pytest.mark.parametrize(
    "requested",
    [
        lambda today: dt.date(1, 1, 1),
        lambda today: dt.date(9999, 12, 31),
        lambda today: today - dt.timedelta(days=1),
        lambda today: today + dt.timedelta(days=366),
    ],
    ids=["year-1", "year-9999", "yesterday", "past-the-horizon"],
)
def test_intake_refuses_a_delivery_date_out_of_bounds(
    api_as, agent, account, writes, horizon, requested
):
    before = writes()

    response = api_as(agent).post(
        "/api/cases/", _intake(requested_date=str(requested(_today()))), format="json"
    )

    assert response.status_code == 400
    assert response.json()["error"] == "invalid"
    assert "change.delivery_date" in response.json()["fields"]
    assert writes() == before


def test_the_deprecated_date_body_is_refused_out_of_bounds_under_its_own_field_name(
    api_as, agent, account, writes, horizon
):
    before = writes()
    body = {**INTAKE, "requested_date": str(_today() - dt.timedelta(days=1))}

    response = api_as(agent).post("/api/cases/", body, format="json")

    assert response.status_code == 400
    assert "is in the past" in response.json()["fields"]["requested_date"][0]
    assert writes() == before


@pytest.mark.parametrize("days", [0, 365])
def test_intake_accepts_today_and_the_last_day_of_the_horizon(
    api_as, agent, account, horizon, days
):
    date = _today() + dt.timedelta(days=days)

    response = api_as(agent).post("/api/cases/", _intake(requested_date=str(date)), format="json")

    assert response.status_code == 201, response.json()
    assert response.json()["change"] == {"kind": "delivery_date", "delivery_date": str(date)}


def test_the_delivery_horizon_comes_from_settings(api_as, agent, account, settings):
    settings.DELIVERY_DATE_HORIZON_DAYS = 10
    late = _today() + dt.timedelta(days=11)

    response = api_as(agent).post("/api/cases/", _intake(requested_date=str(late)), format="json")

    assert response.status_code == 400
    assert "10-day horizon" in response.json()["fields"]["change.delivery_date"][0]


@pytest.mark.parametrize("date", [dt.date(1, 1, 1), dt.date(9999, 12, 31)])
def test_intake_service_called_directly_refuses_a_date_out_of_bounds(
    agent, account, writes, horizon, date
):
    from cases.exceptions import InvalidCaseInput
    from cases.services import case_open

    before = writes()

    with pytest.raises(InvalidCaseInput) as refused:
        case_open(
            actor=agent,
            account=account,
            request_key="k-1",
            order_id="ORD-1",
            kind="delivery_date",
            change=date_change(date),
        )

    assert set(refused.value.fields) == {"change.delivery_date"}
    assert writes() == before


def test_preparing_by_hand_refuses_a_past_date_in_the_api_and_the_service(
    api_as, agent, case, horizon
):
    from approvals.models import Proposal
    from approvals.services import proposal_prepare_by_hand
    from cases.exceptions import InvalidCaseInput

    yesterday = _today() - dt.timedelta(days=1)
    events = CaseEvent.objects.filter(case=case).count()

    response = api_as(agent).post(
        f"/api/cases/{case.reference}/proposals/",
        {"change": date_change(yesterday), "expected_version": case.version},
        format="json",
    )
    with pytest.raises(InvalidCaseInput) as refused:
        proposal_prepare_by_hand(
            case=case,
            actor=agent,
            change=date_change(dt.date(9999, 1, 1)),
            reason="",
            expected_version=case.version,
        )

    assert response.status_code == 400
    assert "change.delivery_date" in response.json()["fields"]
    assert set(refused.value.fields) == {"change.delivery_date"}
    assert CaseEvent.objects.filter(case=case).count() == events
    assert not Proposal.objects.filter(case=case).exists()


# --- keys and free text -----------------------------------------------------------------------

UNPRINTABLE = {
    "nul": "\x00",
    "escape": "\x1b",
    "newline": "\n",
    "rtl-override": "\u202e",
    "rtl-isolate": "\u2067",
    "zero-width-space": "\u200b",
    "bom": "\ufeff",
    "private-use": "\ue000",
    "line-separator": "\u2028",
    "no-break-space": "\u00a0",
}


@pytest.mark.parametrize("field", ["request_key", "order_id", "account"])
@pytest.mark.parametrize("char", UNPRINTABLE.values(), ids=UNPRINTABLE.keys())
def test_intake_refuses_unprintable_characters_in_keys(api_as, agent, account, writes, field, char):
    before = writes()
    value = {"request_key": "req-1", "order_id": "ORD-7731", "account": "ACC-100"}[field]

    response = api_as(agent).post(
        "/api/cases/", _intake(**{field: f"{value[:3]}{char}{value[3:]}"}), format="json"
    )

    assert response.status_code == 400
    assert response.json()["error"] == "invalid"
    assert field in response.json()["fields"]
    assert writes() == before


@pytest.mark.parametrize("field", ["request_key", "order_id"])
@pytest.mark.parametrize("char", UNPRINTABLE.values(), ids=UNPRINTABLE.keys())
def test_intake_service_refuses_unprintable_characters_in_keys(agent, account, writes, field, char):
    from cases.exceptions import InvalidCaseInput
    from cases.services import case_open

    before = writes()
    fields = {"request_key": "req-1", "order_id": "ORD-7731", field: f"AB{char}C"}

    with pytest.raises(InvalidCaseInput) as refused:
        case_open(
            actor=agent,
            account=account,
            kind="delivery_date",
            change=date_change(_today() + dt.timedelta(days=3)),
            **fields,
        )

    assert set(refused.value.fields) == {field}
    assert writes() == before


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("request_key", "Bestellung-Ü-42 №7"),
        ("order_id", "<script>alert(1)</script>"),
        ("order_id", ".."),
        ("order_id", "."),
        ("order_id", "ORD/7731"),
        ("order_id", "-ORD"),
        ("request_key", "k" * 65),
    ],
)
def test_intake_refuses_what_is_not_a_safe_identifier(api_as, agent, account, writes, field, value):
    before = writes()

    response = api_as(agent).post("/api/cases/", _intake(**{field: value}), format="json")

    assert response.status_code == 400, response.json()
    assert response.json()["error"] == "invalid"
    assert any("characters" in m for m in response.json()["fields"][field])
    assert writes() == before


def test_intake_service_refuses_an_order_id_that_climbs_out_of_its_path(agent, account, writes):
    from cases.exceptions import InvalidCaseInput
    from cases.services import case_open

    before = writes()
    with pytest.raises(InvalidCaseInput) as refused:
        case_open(
            actor=agent,
            account=account,
            kind="delivery_date",
            change=date_change(_today() + dt.timedelta(days=3)),
            request_key="k-1",
            order_id="..",
        )

    assert set(refused.value.fields) == {"order_id"}
    assert writes() == before


def test_intake_accepts_a_safe_identifier_of_the_longest_length(api_as, agent, account):
    key = "A1._:-" + "k" * 58
    response = api_as(agent).post(
        "/api/cases/", _intake(request_key=key, order_id="ORD-7731"), format="json"
    )

    assert response.status_code == 201, response.json()
    assert Case.objects.get().request_key == key


def test_intake_refuses_a_two_megabyte_note(api_as, agent, account, writes):
    from cases.exceptions import InvalidCaseInput
    from cases.services import case_open

    before = writes()
    huge = "x" * (2 * 1024 * 1024)

    response = api_as(agent).post("/api/cases/", _intake(note=huge), format="json")
    with pytest.raises(InvalidCaseInput):
        case_open(
            actor=agent,
            account=account,
            request_key="req-direct",
            order_id="ORD-7731",
            kind="delivery_date",
            change=date_change(_today() + dt.timedelta(days=3)),
            note=huge,
        )

    assert response.status_code == 400
    assert "note" in response.json()["fields"]
    assert writes() == before


def test_a_note_with_line_breaks_within_the_limit_is_kept(api_as, agent, account):
    from cases.validation import NOTE_MAX_LENGTH

    note = ("Line one\nLine two\t" * NOTE_MAX_LENGTH)[:NOTE_MAX_LENGTH]

    response = api_as(agent).post("/api/cases/", _intake(note=note), format="json")

    assert response.status_code == 201, response.json()
    assert Case.objects.get().note == note


@pytest.mark.parametrize("reason", ["x" * 2001, "stop\u202eevil", "nul\x00"])
def test_cancel_reason_is_bounded_in_the_api_and_the_service(api_as, agent, case, reason):
    from cases.exceptions import InvalidCaseInput
    from cases.services import case_cancel_request

    events = CaseEvent.objects.filter(case=case).count()

    response = api_as(agent).post(
        f"/api/cases/{case.reference}/cancel/", {"reason": reason}, format="json"
    )
    with pytest.raises(InvalidCaseInput):
        case_cancel_request(case=case, actor=agent, reason=reason, via="api")

    assert response.status_code == 400
    assert "reason" in response.json()["fields"]
    assert CaseEvent.objects.filter(case=case).count() == events


def test_approval_reasons_are_bounded():
    from approvals.serializers import ApproveSerializer, RejectSerializer

    assert not ApproveSerializer(data={"reason": "x" * 2_000_000}).is_valid()
    assert not RejectSerializer(data={"reason": "x" * 2001}).is_valid()
    assert ApproveSerializer(data={"reason": "Checked with the customer"}).is_valid()


# --- account changes: audited, all-or-nothing, team-checked ----------------------------------


def _account_form(account, **overrides):
    return {"name": account.name, "email": account.email, "change_reason": "", **overrides}


def test_changing_a_customer_email_in_the_admin_is_audited_on_each_open_case(
    browser, lead, agent, account, make_case
):
    first, second, closed = make_case(), make_case(), make_case()
    from cases.services import case_cancel_request

    case_cancel_request(case=closed, actor=agent, reason="Not needed", via="api")
    closed_events = CaseEvent.objects.filter(case=closed).count()

    response = browser(lead).post(
        reverse("admin:cases_customeraccount_change", args=[account.pk]),
        _account_form(
            account, email="new@northwind.example", change_reason="Customer asked by phone"
        ),
    )

    assert response.status_code == 302
    account.refresh_from_db()
    assert account.email == "new@northwind.example"
    for case in (first, second):
        event = CaseEvent.objects.filter(case=case).order_by("-id").first()
        assert event.action == "cases.account.updated"
        assert event.actor == lead
        assert event.detail == {"account": "ACC-100", "fields": ["email"]}
        assert "Customer asked by phone" in event.reason
        assert "new@northwind.example" not in json.dumps(event.detail) + event.reason
        assert event.version == Case.objects.get(pk=case.pk).version
    assert CaseEvent.objects.filter(case=closed).count() == closed_events


def test_changing_a_customer_email_without_a_reason_changes_nothing(
    browser, lead, account, case, writes
):
    before = writes()

    response = browser(lead).post(
        reverse("admin:cases_customeraccount_change", args=[account.pk]),
        _account_form(account, email="new@northwind.example"),
    )

    assert response.status_code == 200
    assert "Give a reason for the change." in response.text
    account.refresh_from_db()
    assert account.email == "orders@northwind.example"
    assert writes() == before


def test_account_update_by_another_teams_lead_changes_nothing(outsider, account, case, writes):
    from cases.exceptions import ActionNotPermitted
    from cases.services import account_update

    before = writes()

    with pytest.raises(ActionNotPermitted):
        account_update(account=account, actor=outsider, reason="Mine now", email="x@evil.example")

    account.refresh_from_db()
    assert account.email == "orders@northwind.example"
    assert writes() == before


def test_account_update_needs_a_reason_when_called_directly(lead, account, case, writes):
    from cases.exceptions import InvalidCaseInput
    from cases.services import account_update

    before = writes()

    with pytest.raises(InvalidCaseInput) as refused:
        account_update(account=account, actor=lead, reason=" ", email="new@northwind.example")

    assert set(refused.value.fields) == {"reason"}
    account.refresh_from_db()
    assert account.email == "orders@northwind.example"
    assert writes() == before


def test_account_revoke_by_another_teams_lead_changes_nothing(outsider, account, make_case, writes):
    from cases.exceptions import ActionNotPermitted
    from reconciliation.revocation import account_revoke_access

    cases = [make_case(), make_case()]
    before = writes()

    with pytest.raises(ActionNotPermitted):
        account_revoke_access(account=account, actor=outsider, reason="Not mine")

    account.refresh_from_db()
    assert account.access_active is True
    assert account.access_revoked_at is None
    assert writes() == before
    assert all(Case.objects.get(pk=c.pk).revoked_at is None for c in cases)


def test_account_revoke_refuses_before_writing_when_a_case_is_of_another_team(
    outsider, account, make_case, other_team, writes
):
    """The account moved to the other team; its old case stays in the first team, where the
    other team's lead has no authority: nothing is revoked, not even the account."""
    from cases.exceptions import ActionNotPermitted
    from cases.models import CustomerAccount
    from reconciliation.revocation import account_revoke_access

    old = make_case()
    CustomerAccount.objects.filter(pk=account.pk).update(team=other_team)
    account.refresh_from_db()
    before = writes()

    with pytest.raises(ActionNotPermitted):
        account_revoke_access(account=account, actor=outsider, reason="Contract ended")

    account.refresh_from_db()
    assert account.access_active is True
    assert writes() == before
    assert Case.objects.get(pk=old.pk).revoked_at is None


def test_account_revoke_records_the_account_change_on_each_case(lead, account, make_case):
    from reconciliation.revocation import account_revoke_access

    cases = [make_case(), make_case()]

    results = account_revoke_access(account=account, actor=lead, reason="Contract ended")

    assert len(results) == 2
    for case in cases:
        actions = list(
            CaseEvent.objects.filter(case=case).order_by("id").values_list("action", flat=True)
        )
        assert "cases.account.access_revoked" in actions
        assert actions.index("cases.account.access_revoked") < actions.index(
            "cases.revocation.requested"
        )
        event = CaseEvent.objects.get(case=case, action="cases.account.access_revoked")
        assert event.actor == lead
        assert event.detail["account"] == "ACC-100"
        assert event.detail["access_was_active"] is True
        assert Case.objects.get(pk=case.pk).status == Status.STOPPED


def test_account_revoke_failing_on_one_case_rolls_everything_back(
    lead, account, make_case, writes, monkeypatch
):
    """A failure while revoking the second case leaves the account, the first case and the
    audit trail exactly as they were."""
    import reconciliation.revocation as revocation

    first, second = make_case(), make_case()
    before = writes()
    real_case_revoke = revocation.case_revoke

    def failing_on_second(*, case, **kwargs):
        if case.pk == second.pk:
            raise RuntimeError("worker crashed mid-revocation")
        return real_case_revoke(case=case, **kwargs)

    monkeypatch.setattr(revocation, "case_revoke", failing_on_second)

    with pytest.raises(RuntimeError):
        revocation.account_revoke_access(account=account, actor=lead, reason="Contract ended")

    account.refresh_from_db()
    assert account.access_active is True
    assert writes() == before
    for case in (first, second):
        case.refresh_from_db()
        assert case.revoked_at is None
        assert case.status != Status.STOPPED


def test_brackets_inside_json_strings_do_not_count_as_nesting(api_as, agent, account):
    note = '[{"quoted \\" bracket' + "[" * 100 + "{" * 100

    response = api_as(agent).post(
        "/api/cases/", json.dumps(_intake(note=note)), content_type="application/json"
    )

    assert response.status_code == 201, response.json()
    assert Case.objects.get().note == note


# --- page numbers past any offset ---------------------------------------------------------------
# PostgreSQL's OFFSET and LIMIT are bigints and SQLite's integers 64-bit: a page number whose
# offset does not fit (?page=4303703354380503545786585604870373376) reached the database as the
# count's LIMIT and failed there ("bigint out of range"; SQLite's driver: OverflowError), a 500.

HUGE_PAGES = [
    "4303703354380503545786585604870373376",
    str(2**63 - 1),
    str(2**63),
    str(2**63 // 50 + 1),  # the page fits a bigint, its first row's offset does not
    str(10**30),
]


@pytest.mark.parametrize("url", ["/api/cases/", "/api/proposals/"])
@pytest.mark.parametrize("page", HUGE_PAGES)
def test_api_page_past_any_offset_is_404_in_the_error_shape(api_as, lead, case, url, page):
    response = api_as(lead).get(url, {"page": page})

    assert response.status_code == 404, (url, page, response.content[:300])
    assert response.json()["error"] == "not_found"
    assert response.json()["detail"].startswith("Invalid page"), response.json()


def test_api_pages_as_before_below_the_bound(api_as, lead, case):
    assert api_as(lead).get("/api/cases/", {"page": "1"}).json()["count"] == 1
    assert api_as(lead).get("/api/cases/", {"page": "2"}).status_code == 404


@pytest.mark.parametrize(
    "name",
    [
        f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"
        for model in admin.site._registry
    ],
)
def test_every_admin_list_answers_a_page_past_any_offset_with_the_list(browser, case, name):
    """Django's answer for a page past the last one: the list again (a redirect to ``?e=1``,
    the first page; the proposals' queue first adds its default filter), for any number."""
    client = browser(get_user_model().objects.create_superuser("root", "root@example.com", "pw"))
    for page in HUGE_PAGES:
        response = client.get(reverse(name), {"p": page}, follow=True)
        assert response.status_code == 200, (name, page, response.status_code)
        assert all(status == 302 for _, status in response.redirect_chain), response.redirect_chain
