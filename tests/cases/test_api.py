"""The cases REST API (CONTRACT §2): intake, list, detail, transitions and their refusals."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from cases.models import Case, CaseEvent, Status
from cases.services import case_assign, case_update_followup
from tests.cases.helpers import last_event_id, reload

INTAKE = {
    "account": "ACC-100",
    "request_key": "email-2030-01-01-northwind",
    "order_id": "ORD-7731",
    "kind": "delivery_date",
    "change": {"kind": "delivery_date", "delivery_date": "2030-01-04"},
    "note": "Move the delivery to Friday.",
}
# The body before change kinds: still the delivery date kind (deprecated in the schema).
LEGACY_INTAKE = {
    **{k: v for k, v in INTAKE.items() if k not in ("kind", "change")},
    "requested_date": "2030-01-04",
}
TOMORROW = timezone.now() + dt.timedelta(days=1)
LAST_YEAR = timezone.now() - dt.timedelta(days=365)


@pytest.fixture
def token_client(agent):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=agent).key}")
    return client


def _transition(client, case, transition, *, version=None, reason="Because"):
    return client.post(
        f"/api/cases/{case.reference}/transitions/",
        {
            "transition": transition,
            "expected_version": case.version if version is None else version,
            "reason": reason,
        },
        format="json",
    )


# --- intake ---------------------------------------------------------------------------------


def test_intake_with_token_auth_opens_a_case_then_returns_it(
    token_client, account, agent, lead, writes
):
    first = token_client.post("/api/cases/", INTAKE, format="json")
    second = token_client.post("/api/cases/", INTAKE, format="json")

    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["reference"] == second.json()["reference"]
    assert second.json() == first.json()
    body = first.json()
    assert body["status"] == Status.WAITING_SOURCE
    assert body["version"] == 2
    assert (body["owner"], body["backup"], body["responsible_now"]) == ("lead", "backup", "lead")
    assert (body["kind"], body["change"]) == (
        "delivery_date",
        {"kind": "delivery_date", "delivery_date": "2030-01-04"},
    )
    assert body["change_description"] == "the delivery moves to Friday 04 January 2030"
    assert [e["action"] for e in body["events"]] == [
        "cases.case.created",
        "cases.case.transitioned",
    ]
    assert {e["actor"] for e in body["events"]} == {"agent"}
    assert writes() == (1, 2)


def test_the_token_sent_as_bearer_is_the_same_token(agent, account):
    """``Authorization: Bearer <key>``, what OAuth clients send, was answered "Authentication
    credentials were not provided." with a valid key; a forged one is still refused."""
    key = Token.objects.create(user=agent).key
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    opened = client.post("/api/cases/", INTAKE, format="json")
    listed = client.get("/api/cases/")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key[:-1]}x")
    forged = client.get("/api/cases/")

    assert opened.status_code == 201, opened.content
    assert opened.json()["events"][0]["actor"] == "agent"
    assert [c["reference"] for c in listed.json()["results"]] == [opened.json()["reference"]]
    assert forged.status_code in {401, 403}
    assert (forged.json()["error"], forged.json()["detail"]) == (
        "authentication_failed",
        "Invalid token.",
    )


def test_an_invalid_filter_on_a_read_does_not_say_nothing_was_written(token_client):
    """A read with a bad filter said "…; nothing was written." as a refused write does."""
    response = token_client.get("/api/cases/", {"status": "bogus"})

    assert response.status_code == 400
    assert response.json()["error"] == "invalid"
    assert response.json()["detail"] == "The request has invalid fields."
    assert "status" in response.json()["fields"]


def test_the_schema_names_both_forms_of_the_token(client):
    schema = client.get("/api/schema/?format=json").json()

    schemes = schema["components"]["securitySchemes"]
    assert schemes["tokenAuth"]["description"].startswith(
        'Token-based authentication with required prefix "Token"'
    )
    assert schemes["bearerAuth"] == {"type": "http", "scheme": "bearer"}
    assert {"bearerAuth": []} in schema["paths"]["/api/cases/"]["get"]["security"]


def test_intake_repeated_with_different_details_returns_the_original(api, agent, account):
    client = api(agent)
    first = client.post("/api/cases/", INTAKE, format="json")

    again = client.post("/api/cases/", {**INTAKE, "order_id": "ORD-CHANGED"}, format="json")

    assert again.status_code == 200
    assert again.json()["reference"] == first.json()["reference"]
    assert again.json()["order_id"] == "ORD-7731"
    assert Case.objects.count() == 1
    # The answer says the request differs from the one the case keeps, and where: a 200
    # alone read as "done" to a sender whose second request asked for something else.
    assert again["Holdfast-Replayed"] == "true"
    assert again["Holdfast-Request-Differs"] == "order_id"
    changed = {"kind": "delivery_date", "delivery_date": "2030-01-05"}
    later = client.post("/api/cases/", {**INTAKE, "change": changed, "note": ""}, format="json")
    assert later["Holdfast-Request-Differs"] == "change, note"
    assert later.json()["change"]["delivery_date"] == "2030-01-04"
    other_kind = {"kind": "order_cancellation", "change": {"reason_code": "customer_request"}}
    assert (
        client.post("/api/cases/", {**INTAKE, **other_kind}, format="json")[
            "Holdfast-Request-Differs"
        ]
        == "kind, change"
    )
    # The same request again (the change in another but equal form): replayed, no difference.
    same = client.post(
        "/api/cases/", {**INTAKE, "change": {"delivery_date": "2030-01-04"}}, format="json"
    )
    assert same["Holdfast-Replayed"] == "true"
    assert "Holdfast-Request-Differs" not in same
    assert "Holdfast-Replayed" not in first


def test_bad_token_is_refused(account, writes):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")

    response = client.post("/api/cases/", INTAKE, format="json")

    # 403 rather than 401: session auth comes first and sends no WWW-Authenticate challenge.
    assert response.status_code in {401, 403}
    assert response.json()["error"] == "authentication_failed"
    assert writes() == (0, 0)


def test_the_older_body_with_a_date_still_opens_a_delivery_date_case(token_client, account):
    response = token_client.post("/api/cases/", LEGACY_INTAKE, format="json")

    assert response.status_code == 201, response.json()
    assert response.json()["change"] == INTAKE["change"]
    assert Case.objects.get().kind == "delivery_date"


@pytest.mark.parametrize("body", [INTAKE, LEGACY_INTAKE], ids=["kinds", "older body"])
def test_an_intake_naming_a_field_it_does_not_take_is_refused_naming_it(
    token_client, account, writes, body
):
    # Dropped without a word before: a caller's owner, status or misspelt note was ignored.
    response = token_client.post(
        "/api/cases/", {**body, "status": "done", "owner": "lead", "notes": "x"}, format="json"
    )

    assert response.status_code == 400
    fields = response.json()["fields"]
    assert sorted(fields) == ["notes", "owner", "status"]
    assert fields["status"] == ["Unknown field: this intake does not take it."]
    assert writes() == (0, 0)


def test_an_unknown_field_is_named_beside_the_other_errors(token_client, account):
    response = token_client.post(
        "/api/cases/", {**INTAKE, "order_id": "", "colour": "red"}, format="json"
    )

    assert response.status_code == 400
    assert {"order_id", "colour"} <= set(response.json()["fields"])


@pytest.mark.parametrize(
    ("path", "body", "unknown"),
    [
        (
            "transitions",
            {"transition": "hold", "reason": "x", "expectedversion": 2},
            "expectedversion",
        ),
        ("cancel", {"reason": "Customer changed their mind", "force": True}, "force"),
    ],
)
def test_a_case_request_naming_a_field_it_does_not_take_is_400_naming_it_and_does_nothing(
    api, lead, case, writes, path, body, unknown
):
    before = writes()

    response = api(lead).post(f"/api/cases/{case.reference}/{path}/", body, format="json")

    assert response.status_code == 400
    assert response.json()["fields"][unknown] == ["Unknown field: this request does not take it."]
    assert writes() == before


def test_a_value_too_long_gets_one_message_saying_by_how_much(token_client, account):
    """DRF's own "Ensure this field has no more than …" came beside the field's message."""
    from cases.validation import IDENTIFIER_MAX_LENGTH, NOTE_MAX_LENGTH

    long_note = "n" * 100_000
    response = token_client.post(
        "/api/cases/",
        {**INTAKE, "note": long_note, "order_id": "O" * (IDENTIFIER_MAX_LENGTH + 1)},
        format="json",
    )

    fields = response.json()["fields"]
    assert fields["note"] == [f"At most {NOTE_MAX_LENGTH} characters (this has 100000)."]
    assert fields["order_id"] == [f"At most {IDENTIFIER_MAX_LENGTH} characters."]


def test_a_null_character_gets_one_message(token_client, account):
    """ "U+0000 … is not allowed in text." came with DRF's "Null characters are not allowed."."""
    response = token_client.post("/api/cases/", {**INTAKE, "note": "a\x00b"}, format="json")

    assert response.status_code == 400
    (message,) = response.json()["fields"]["note"]
    assert message.startswith("U+0000"), message


@pytest.mark.parametrize("path", ["/api/cases/", "/api/hooks/orders/"])
def test_a_body_past_the_upload_limit_is_413_in_the_api_shape(
    token_client, account, settings, writes, path
):
    """Django refuses to read it; its HTML "Bad Request" page was the answer."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    before = writes()

    response = token_client.post(path, {**INTAKE, "note": "n" * 20_000}, format="json")

    assert response.status_code == 413
    assert response["Content-Type"].startswith("application/json")
    assert response.json() == {
        "error": "request_too_large",
        "detail": "The request body is larger than 10,000 bytes; nothing was read or written.",
    }
    assert writes() == before


def test_an_address_change_and_a_cancellation_open_cases_of_their_kinds(token_client, account):
    address = {
        "name": "Dana Whitfield",
        "line1": "4 Quay Road",
        "city": "Bristol",
        "postal_code": "BS1 5TX",
        "country": "gb",
    }
    moved = token_client.post(
        "/api/cases/",
        {**INTAKE, "request_key": "a", "kind": "shipping_address", "change": {"address": address}},
        format="json",
    )
    cancelled = token_client.post(
        "/api/cases/",
        {
            **INTAKE,
            "request_key": "c",
            "kind": "order_cancellation",
            "change": {"reason_code": "duplicate"},
        },
        format="json",
    )

    assert (moved.status_code, cancelled.status_code) == (201, 201)
    assert moved.json()["change"] == {
        "kind": "shipping_address",
        "address": {**address, "country": "GB"},
    }
    assert cancelled.json()["change"] == {"kind": "order_cancellation", "reason_code": "duplicate"}
    assert "cannot be undone" in cancelled.json()["change_description"]


def test_a_second_intake_for_an_order_and_kind_with_an_open_case_is_409_naming_it(
    token_client, account, writes
):
    first = token_client.post("/api/cases/", INTAKE, format="json").json()
    before = writes()

    again = token_client.post(
        "/api/cases/", {**INTAKE, "request_key": "phone-2030-01-02"}, format="json"
    )

    assert again.status_code == 409
    assert again.json()["error"] == "open_case_exists"
    assert again.json()["reference"] == first["reference"]
    assert first["reference"] in again.json()["detail"]
    assert writes() == before


def test_the_kinds_list_names_each_kind_its_schema_and_proven_autonomy(token_client):
    response = token_client.get("/api/kinds/")

    assert response.status_code == 200
    rows = {row["code"]: row for row in response.json()}
    assert list(rows) == ["delivery_date", "shipping_address", "order_cancellation"]
    assert [rows[c]["key_prefix"] for c in rows] == ["DATE", "ADDR", "CANCEL"]
    assert [rows[c]["irreversible"] for c in rows] == [False, False, True]
    assert rows["shipping_address"]["change_schema"]["properties"]["address"]["required"] == [
        "name",
        "line1",
        "city",
        "postal_code",
        "country",
    ]
    # Never probed: every kind is review-only, and says why.
    assert {row["autonomy"] for row in rows.values()} == {"review_only"}
    assert all(row["autonomy_reason"] for row in rows.values())


def test_anonymous_caller_is_refused(api, case):
    response = api().get("/api/cases/")

    assert response.status_code in {401, 403}
    assert response.json()["error"] == "not_authenticated"


@pytest.mark.parametrize(
    ("payload", "bad_fields"),
    [
        ({**INTAKE, "account": "ACC-999"}, {"account"}),
        ({**INTAKE, "account": "ACC-200"}, {"account"}),  # exists, but another team's
        ({**INTAKE, "change": {"delivery_date": "next friday"}}, {"change.delivery_date"}),
        ({**INTAKE, "change": {"delivery_date": "2030-02-30"}}, {"change.delivery_date"}),
        ({**INTAKE, "change": {"delivery_date": "2030-01-04", "x": 1}}, {"change.x"}),
        ({**INTAKE, "change": "2030-01-04"}, {"change"}),
        ({**INTAKE, "kind": "gift_wrap"}, {"kind"}),
        ({**INTAKE, "change": {"kind": "order_cancellation"}}, {"change.kind"}),
        ({**LEGACY_INTAKE, "requested_date": "next friday"}, {"requested_date"}),
        ({**LEGACY_INTAKE, "requested_date": "2030-02-30"}, {"requested_date"}),
        ({**LEGACY_INTAKE, "kind": "delivery_date"}, {"requested_date"}),
        ({}, {"account", "request_key", "order_id", "kind", "change"}),
        ({"account": "ACC-100", "request_key": "k"}, {"order_id", "kind", "change"}),
        ({**INTAKE, "request_key": ""}, {"request_key"}),
    ],
    ids=[
        "unknown-account",
        "other-teams-account",
        "malformed-date",
        "impossible-date",
        "unknown-change-field",
        "change-not-an-object",
        "unknown-kind",
        "change-of-another-kind",
        "legacy-malformed-date",
        "legacy-impossible-date",
        "legacy-and-kind-both",
        "empty",
        "missing-fields",
        "blank-key",
    ],
)
def test_bad_intake_is_400_with_field_errors_and_writes_nothing(
    api, agent, account, other_account, writes, payload, bad_fields
):
    before = writes()

    response = api(agent).post("/api/cases/", payload, format="json")

    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid"
    assert set(body["fields"]) == bad_fields
    assert writes() == before


def test_another_teams_account_is_reported_like_an_unknown_one(api, agent, account, other_account):
    theirs = api(agent).post("/api/cases/", {**INTAKE, "account": "ACC-200"}, format="json")
    missing = api(agent).post("/api/cases/", {**INTAKE, "account": "ACC-999"}, format="json")

    assert theirs.json()["fields"]["account"] == ["Unknown account 'ACC-200'."]
    assert missing.json()["fields"]["account"] == ["Unknown account 'ACC-999'."]


def test_malformed_json_is_400_and_writes_nothing(api, agent, account, writes):
    response = api(agent).post("/api/cases/", "{not json", content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"] == "malformed_request"
    assert writes() == (0, 0)


def test_auditor_cannot_open_a_case_over_the_api(api, auditor, account, writes):
    response = api(auditor).post("/api/cases/", INTAKE, format="json")

    assert response.status_code == 403
    assert response.json()["error"] == "not_permitted"
    assert writes() == (0, 0)


# --- list and detail --------------------------------------------------------------------------


def test_list_filters_by_status_waiting_on_owner_and_overdue(api, lead, backup, make_case):
    waiting, escalated, overdue, handed_over = (make_case() for _ in range(4))
    # Intake asks for a check "now"; only one case keeps a follow-up time in the past.
    for case, when in (
        (waiting, TOMORROW),
        (escalated, TOMORROW),
        (handed_over, TOMORROW),
        (overdue, LAST_YEAR),
    ):
        case_update_followup(
            case=case, expected_version=case.version, actor=lead, next_check_at=when
        )
    _transition(api(lead), reload(escalated), "escalate")
    handed_over = reload(handed_over)
    case_assign(
        case=handed_over,
        expected_version=handed_over.version,
        owner=backup,
        backup=lead,
        reason="handover",
        actor=lead,
    )
    client = api(lead)

    def refs(**params):
        response = client.get("/api/cases/", params)
        assert response.status_code == 200, response.json()
        return {c["reference"] for c in response.json()["results"]}

    every = {waiting.reference, escalated.reference, overdue.reference, handed_over.reference}
    assert refs() == every
    assert refs(status="needs_attention") == {escalated.reference}
    assert refs(status="waiting_source") == every - {escalated.reference}
    assert refs(waiting_on="owner") == {escalated.reference}
    assert refs(owner="backup") == {handed_over.reference}
    assert refs(owner="lead") == every - {handed_over.reference}
    assert refs(overdue="true") == {overdue.reference}


def test_list_overdue_false_excludes_overdue_cases(api, lead, make_case):
    """Like the admin's "Not overdue" filter: ``overdue=false`` is a filter, not "no filter"."""
    on_time, late = make_case(), make_case()
    for case, when in ((on_time, TOMORROW), (late, LAST_YEAR)):
        case_update_followup(
            case=case, expected_version=case.version, actor=lead, next_check_at=when
        )

    response = api(lead).get("/api/cases/", {"overdue": "false"})

    assert response.status_code == 200
    assert [c["reference"] for c in response.json()["results"]] == [on_time.reference]


def test_list_search_each_word_must_match_a_field_through_the_bounded_search(
    api, lead, account, make_case
):
    """``q``: each word in the reference, order id, account reference or name, or request key
    (``cases.search``, the admin's case search): two words narrow, a word nothing has finds
    nothing, and a search costs the same queries for one match as for two."""
    first = make_case(order_id="ORD-5551001")
    second = make_case(order_id="ORD-5551002")
    make_case(order_id="ORD-7770001")
    client = api(lead)

    def refs(q):
        response = client.get("/api/cases/", {"q": q})
        assert response.status_code == 200, response.json()
        return {c["reference"] for c in response.json()["results"]}

    assert refs("555100") == {first.reference, second.reference}
    assert refs(f"ORD-5551002 {account.name.split()[0]}") == {second.reference}
    assert refs(f"{first.reference} {account.reference}") == {first.reference}
    assert refs("ORD-5551002 zz-nothing") == set()
    with CaptureQueriesContext(connection) as one:
        refs("ORD-5551001")
    with CaptureQueriesContext(connection) as two:
        refs("555100")
    assert len(one) == len(two)


@pytest.mark.parametrize(
    "params", [{"status": "bogus"}, {"waiting_on": "moon"}, {"overdue": "maybe"}]
)
def test_list_with_unknown_filter_value_is_400(api, lead, case, params):
    response = api(lead).get("/api/cases/", params)

    assert response.status_code == 400
    assert set(response.json()["fields"]) == set(params)
    if "overdue" not in params:  # a choice among values: the answer names them
        (message,) = response.json()["fields"][next(iter(params))]
        assert "; one of " in message, message


def test_detail_has_the_contract_fields(api, lead, case):
    response = api(lead).get(f"/api/cases/{case.reference}/")

    assert response.status_code == 200
    body = response.json()
    for field in (
        "version",
        "status",
        "next_action",
        "waiting_on",
        "owner",
        "backup",
        "responsible_now",
        "next_check_at",
        "outstanding_question",
        "last_checked_order_version",
        "evidence",
        "events",
    ):
        assert field in body, field
    assert body["version"] == case.version
    assert body["allowed_transitions"] == ["escalate", "cancel", "stop"]
    assert body["next_action"].startswith("Waiting for the order system")
    assert [e["version"] for e in body["events"]] == [1, 2]


def test_detail_lists_only_transitions_the_caller_may_make(api, agent, auditor, case):
    as_agent = api(agent).get(f"/api/cases/{case.reference}/").json()
    as_auditor = api(auditor).get(f"/api/cases/{case.reference}/").json()

    assert as_agent["allowed_transitions"] == ["escalate", "cancel"]
    assert as_auditor["allowed_transitions"] == []


def test_owner_away_makes_the_backup_responsible_in_the_api(api, lead, case, owner_away):
    body = api(lead).get(f"/api/cases/{case.reference}/").json()

    assert body["owner"] == "lead"
    assert body["responsible_now"] == "backup"
    assert "Bo Backup (backup)" in body["next_action"]
    listed = api(lead).get("/api/cases/").json()["results"]
    assert [c["responsible_now"] for c in listed] == ["backup"]


# --- transitions ---------------------------------------------------------------------------


def test_transition_over_the_api_writes_one_event_and_returns_the_case(api, lead, case):
    before = last_event_id(case)

    response = _transition(api(lead), case, "escalate", reason="Customer called twice")

    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["version"]) == ("needs_attention", case.version + 1)
    new = list(CaseEvent.objects.filter(case=case, id__gt=before))
    assert len(new) == 1
    assert (new[0].version, new[0].actor, new[0].reason) == (
        case.version + 1,
        lead,
        "Customer called twice",
    )
    assert body["events"][-1]["version"] == body["version"]


def test_stale_expected_version_is_409_version_conflict(api, lead, case):
    client = api(lead)
    seen = case.version
    assert _transition(client, case, "escalate").status_code == 200
    before = last_event_id(case)

    response = _transition(client, case, "cancel", version=seen)

    assert response.status_code == 409
    body = response.json()
    assert body["error"] == "version_conflict"
    assert (body["expected_version"], body["current_version"]) == (seen, seen + 1)
    fresh = reload(case)
    assert (fresh.status, fresh.version) == (Status.NEEDS_ATTENTION, seen + 1)
    assert last_event_id(case) == before


def test_forbidden_transition_is_409_listing_the_allowed_ones(api, lead, case):
    before = last_event_id(case)

    response = _transition(api(lead), case, "request_source_check")

    assert response.status_code == 409
    body = response.json()
    assert body["error"] == "transition_not_allowed"
    assert body["allowed"] == ["escalate", "cancel", "stop"]
    assert last_event_id(case) == before
    assert reload(case).version == case.version


def test_worker_only_transition_is_refused_over_the_api(api, lead, case):
    before = last_event_id(case)

    response = _transition(api(lead), case, "claim")

    assert response.status_code == 400
    assert "transition" in response.json()["fields"]
    assert last_event_id(case) == before
    assert reload(case).status == Status.WAITING_SOURCE


@pytest.mark.parametrize(
    "payload",
    [
        {"transition": "escalate", "reason": "x"},
        {"transition": "escalate", "expected_version": "two", "reason": "x"},
        {"transition": "escalate", "expected_version": 2},
        {"transition": "escalate", "expected_version": 2, "reason": ""},
    ],
    ids=["no-version", "bad-version", "no-reason", "blank-reason"],
)
def test_bad_transition_request_is_400_and_writes_nothing(api, lead, case, payload):
    before = last_event_id(case)

    response = api(lead).post(f"/api/cases/{case.reference}/transitions/", payload, format="json")

    assert response.status_code == 400
    assert response.json()["error"] == "invalid"
    assert last_event_id(case) == before


@pytest.mark.parametrize("transition", ["escalate", "cancel", "stop"])
def test_auditor_transition_over_the_api_is_403(api, auditor, case, transition):
    before = last_event_id(case)

    response = _transition(api(auditor), case, transition)

    assert response.status_code == 403
    assert response.json()["error"] == "not_permitted"
    assert last_event_id(case) == before
    assert reload(case).version == case.version


def test_auditor_cannot_cancel_over_the_api(api, auditor, case):
    response = api(auditor).post(
        f"/api/cases/{case.reference}/cancel/", {"reason": "customer asked"}, format="json"
    )

    assert response.status_code == 403
    assert not case.cancellations.exists()
    assert reload(case).status == Status.WAITING_SOURCE


def test_cancel_before_anything_was_sent_cancels_the_case(api, agent, case):
    response = api(agent).post(
        f"/api/cases/{case.reference}/cancel/",
        {"reason": "customer changed their mind"},
        format="json",
    )

    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert case.cancellations.get().outcome == "cancelled"


# --- the schema ------------------------------------------------------------------------------


def test_openapi_schema_renders_and_documents_the_cases_api(client):
    response = client.get("/api/schema/", {"format": "json"})

    assert response.status_code == 200
    paths = response.json()["paths"]
    assert "/api/cases/" in paths
    assert {"get", "post"} <= set(paths["/api/cases/"])
    assert "/api/cases/{reference}/" in paths
    assert "/api/cases/{reference}/transitions/" in paths


def test_openapi_schema_renders_as_yaml_by_default(client):
    response = client.get("/api/schema/")

    assert response.status_code == 200
    assert b"/api/cases/:" in response.content
