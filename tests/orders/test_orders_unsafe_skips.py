"""The unsafe receiver modes that let Holdfast's own guards be tested on their own.

Each ``ORDERS_UNSAFE_SKIP_*`` switch turns one of the receiver's checks off, and the crippled
modes ``ORDERS_DISABLE_FENCING`` / ``ORDERS_DISABLE_IDEMPOTENCY`` make it lie about two
capabilities; all are off by default, refused in production and reported by
``python -m orders check``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orders.models import Account, AppliedOperation
from tests.orders.helpers import ACCOUNT_ID, FREE_DATE, date_change, make_grant, operation_body
from tests.test_production_settings import _env, _run, _setup

SKIPS = (
    "ORDERS_UNSAFE_SKIP_APPROVAL_CHECK",
    "ORDERS_UNSAFE_SKIP_ACCESS_CHECK",
    "ORDERS_UNSAFE_SKIP_VERSION_CHECK",
)
CRIPPLED = ("ORDERS_DISABLE_FENCING", "ORDERS_DISABLE_IDEMPOTENCY")


def _expired_grant() -> str:
    return make_grant(operation_key="DATE-1-1", expires_at=datetime.now(UTC) - timedelta(hours=1))


def test_every_check_is_on_by_default(settings):
    assert not any(getattr(settings, name) for name in (*SKIPS, *CRIPPLED))


@pytest.mark.usefixtures("seeded")
def test_by_default_expired_revoked_and_stale_requests_are_refused(api):
    Account.objects.filter(pk=ACCOUNT_ID).update(access_active=False)

    expired = api.apply(operation_body(grant=_expired_grant()))
    stale = api.apply(operation_body(operation_key="DATE-1-2", expected_version=9))
    revoked = api.apply(operation_body(operation_key="DATE-1-3"))

    assert expired.json()["error"] == "approval_expired"
    assert stale.json()["error"] == "version_conflict"
    assert revoked.json()["error"] == "permission_revoked"
    assert not AppliedOperation.objects.exists()


@pytest.mark.usefixtures("seeded")
def test_with_the_approval_check_off_an_expired_grant_is_applied(api, settings):
    settings.ORDERS_UNSAFE_SKIP_APPROVAL_CHECK = True

    response = api.apply(operation_body(grant=_expired_grant()))

    assert response.status_code == 201
    assert AppliedOperation.objects.get().approval_id == "AP-9"


@pytest.mark.usefixtures("seeded")
def test_with_the_approval_check_off_a_grant_for_another_change_is_still_refused(api, settings):
    settings.ORDERS_UNSAFE_SKIP_APPROVAL_CHECK = True
    other = make_grant(
        operation_key="DATE-1-1",
        change=date_change(FREE_DATE + timedelta(days=1)),
    )

    response = api.apply(operation_body(grant=other))

    assert response.json()["error"] == "approval_invalid"


@pytest.mark.usefixtures("seeded")
def test_with_the_access_check_off_a_revoked_account_is_changed(api, settings):
    settings.ORDERS_UNSAFE_SKIP_ACCESS_CHECK = True
    Account.objects.filter(pk=ACCOUNT_ID).update(access_active=False)

    assert api.apply(operation_body()).status_code == 201


@pytest.mark.usefixtures("seeded")
def test_with_the_version_check_off_a_stale_expected_version_is_applied(api, settings):
    settings.ORDERS_UNSAFE_SKIP_VERSION_CHECK = True

    assert api.apply(operation_body(expected_version=9)).status_code == 201


@pytest.mark.parametrize("name", [*SKIPS, *CRIPPLED])
def test_production_refuses_every_unsafe_switch(tmp_path, name):
    """Before: the two crippled modes started under DJANGO_ENV=production, and an operation
    with token 3 after token 50 was applied."""
    result = _setup(_env("orders.settings", tmp_path, **{name: "1"}))

    assert result.returncode != 0
    assert name in result.stderr


@pytest.mark.parametrize("name", [*SKIPS, *CRIPPLED])
def test_orders_check_reports_every_unsafe_switch_that_is_on(tmp_path, name):
    """Outside production the switches start (tests need them) and ``check`` names them."""
    on = _run(
        _env("orders.settings", tmp_path, DJANGO_ENV="test", **{name: "1"}), "-m", "orders", "check"
    )
    off = _run(_env("orders.settings", tmp_path, DJANGO_ENV="test"), "-m", "orders", "check")

    assert on.returncode == 0, on.stderr
    assert name in on.stderr
    assert "orders.W001" in on.stderr
    assert off.returncode == 0, off.stderr
    assert "orders.W001" not in off.stdout + off.stderr
