"""The signed approval grant: one issuer, a strict verifier, the binding v1 format."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json

import pytest

from approvals.grants import GrantExpired, GrantInvalid, grant_issue, grant_verify

KEY = "grant-test-key"
NOW = dt.datetime(2030, 5, 10, 12, 0, 0, tzinfo=dt.UTC)
FIELDS = {
    "operation_key": "DATE-41-1",
    "order_id": "ORD-41",
    "change": {"kind": "delivery_date", "delivery_date": "2030-05-17"},
    "approval_id": "AP-9",
    "expires_at": NOW + dt.timedelta(hours=1),
}


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _resign(payload: dict, key: str = KEY) -> str:
    """A grant built by hand to the binding format (independent of ``grant_issue``)."""
    body = _b64(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode())
    sig = hmac.new(key.encode(), f"v1.{body}".encode(), hashlib.sha256).digest()
    return f"v1.{body}.{_b64(sig)}"


def _payload(token: str) -> dict:
    return json.loads(_unb64(token.split(".")[1]))


def test_issued_grant_has_the_binding_v1_format_and_verifies():
    token = grant_issue(key=KEY, **FIELDS)
    assert token.split(".")[0] == "v1"
    assert "=" not in token
    assert _payload(token) == {
        "approval_id": "AP-9",
        "change": {"kind": "delivery_date", "delivery_date": "2030-05-17"},
        "expires_at": "2030-05-10T13:00:00Z",
        "operation_key": "DATE-41-1",
        "order_id": "ORD-41",
    }
    assert token == _resign(_payload(token))
    grant = grant_verify(token, key=KEY, now=NOW)
    assert grant.change == {"kind": "delivery_date", "delivery_date": "2030-05-17"}
    assert grant.expires_at == dt.datetime(2030, 5, 10, 13, 0, tzinfo=dt.UTC)
    assert (grant.operation_key, grant.order_id, grant.approval_id) == (
        "DATE-41-1",
        "ORD-41",
        "AP-9",
    )


def test_grant_expiry_is_written_in_utc_whole_seconds():
    expires = dt.datetime(
        2030, 5, 10, 15, 30, 5, 999_000, tzinfo=dt.timezone(dt.timedelta(hours=2))
    )
    token = grant_issue(key=KEY, **{**FIELDS, "expires_at": expires})
    assert _payload(token)["expires_at"] == "2030-05-10T13:30:05Z"


def test_grant_refuses_a_naive_expiry():
    with pytest.raises(ValueError, match="timezone-aware"):
        grant_issue(key=KEY, **{**FIELDS, "expires_at": dt.datetime(2030, 5, 10, 13, 0)})


def test_grant_key_defaults_to_the_setting(settings):
    settings.APPROVAL_GRANT_KEY = "from-settings"
    token = grant_issue(**FIELDS)
    assert grant_verify(token, key="from-settings", now=NOW).approval_id == "AP-9"
    with pytest.raises(GrantInvalid):
        grant_verify(token, key=KEY, now=NOW)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("approval_id", "AP-10"),
        ("operation_key", "DATE-41-2"),
        ("order_id", "ORD-42"),
        ("change", {"kind": "delivery_date", "delivery_date": "2030-05-18"}),
        ("change", {"kind": "order_cancellation", "reason_code": "other"}),
        ("expires_at", "2030-05-11T13:00:00Z"),
    ],
)
def test_grant_with_any_field_altered_fails_verification(field, value):
    token = grant_issue(key=KEY, **FIELDS)
    _, _, signature = token.split(".")
    altered = {**_payload(token), field: value}
    forged_body = _resign(altered).split(".")[1]
    with pytest.raises(GrantInvalid):
        grant_verify(f"v1.{forged_body}.{signature}", key=KEY, now=NOW)


def test_grant_with_an_altered_signature_fails_verification():
    token = grant_issue(key=KEY, **FIELDS)
    head, body, signature = token.split(".")
    flipped = signature[:-2] + ("A" if signature[-2] != "A" else "B") + signature[-1]
    with pytest.raises(GrantInvalid):
        grant_verify(f"{head}.{body}.{flipped}", key=KEY, now=NOW)


def test_grant_signed_with_another_key_fails_verification():
    token = grant_issue(key="someone-else", **FIELDS)
    with pytest.raises(GrantInvalid):
        grant_verify(token, key=KEY, now=NOW)


@pytest.mark.parametrize(
    "token",
    ["", "v1", "v1.abc", "v2.abc.def", "v1..", "v1.abc.def.ghi", "v1.ab=c.def", "v1.é.def"],
)
def test_malformed_grant_fails_verification(token):
    with pytest.raises(GrantInvalid):
        grant_verify(token, key=KEY, now=NOW)


def test_correctly_signed_grant_with_extra_or_missing_fields_fails_verification():
    payload = _payload(grant_issue(key=KEY, **FIELDS))
    with pytest.raises(GrantInvalid):
        grant_verify(_resign({**payload, "admin": True}), key=KEY, now=NOW)
    del payload["approval_id"]
    with pytest.raises(GrantInvalid):
        grant_verify(_resign(payload), key=KEY, now=NOW)


def test_grant_fails_verification_at_and_after_its_expiry():
    token = grant_issue(key=KEY, **FIELDS)
    expiry = FIELDS["expires_at"]
    assert grant_verify(token, key=KEY, now=expiry - dt.timedelta(seconds=1))
    with pytest.raises(GrantExpired):
        grant_verify(token, key=KEY, now=expiry)
    with pytest.raises(GrantExpired):
        grant_verify(token, key=KEY, now=expiry + dt.timedelta(days=1))


def test_expired_grant_with_a_bad_signature_is_invalid_not_expired():
    token = grant_issue(key="someone-else", **FIELDS)
    with pytest.raises(GrantInvalid):
        grant_verify(token, key=KEY, now=NOW + dt.timedelta(days=1))


def test_grant_verification_can_require_the_exact_operation_order_and_change():
    token = grant_issue(key=KEY, **FIELDS)
    grant_verify(
        token,
        key=KEY,
        now=NOW,
        operation_key="DATE-41-1",
        order_id="ORD-41",
        change={"kind": "delivery_date", "delivery_date": "2030-05-17"},
    )
    for expectation in (
        {"operation_key": "DATE-41-2"},
        {"order_id": "ORD-42"},
        {"change": {"kind": "delivery_date", "delivery_date": "2030-05-18"}},
    ):
        with pytest.raises(GrantInvalid):
            grant_verify(token, key=KEY, now=NOW, **expectation)


ADDRESS = {
    "kind": "shipping_address",
    "address": {
        "name": "Dana Whitfield",
        "line1": "4 Quay Road",
        "city": "Bristol",
        "postal_code": "BS1 5TX",
        "country": "GB",
    },
}


def test_a_grant_signs_the_whole_change_in_its_kinds_canonical_form():
    token = grant_issue(
        key=KEY,
        **{**FIELDS, "change": {**ADDRESS, "address": {**ADDRESS["address"], "line2": " "}}},
    )

    assert _payload(token)["change"] == ADDRESS  # the empty line2 is left out, as sent
    assert grant_verify(token, key=KEY, now=NOW, change=ADDRESS).change == ADDRESS
    other_city = {**ADDRESS, "address": {**ADDRESS["address"], "city": "Bath"}}
    with pytest.raises(GrantInvalid):
        grant_verify(token, key=KEY, now=NOW, change=other_city)


def test_a_grant_whose_change_names_no_kind_fails_verification():
    payload = _payload(grant_issue(key=KEY, **FIELDS))
    with pytest.raises(GrantInvalid):
        grant_verify(
            _resign({**payload, "change": {"delivery_date": "2030-05-17"}}), key=KEY, now=NOW
        )
