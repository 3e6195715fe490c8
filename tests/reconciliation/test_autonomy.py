"""Autonomy derived from verified capabilities; where it is read and shown."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Permission
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from reconciliation.models import CAPABILITIES, Autonomy, OrderSystemProfile, autonomy_for
from reconciliation.selectors import current_autonomy, current_profile

from .conftest import SANDBOX, seed_sandbox

ALL = dict.fromkeys(CAPABILITIES, True)


def make_profile(url: str, *, minutes_ago: int = 0, **verified) -> OrderSystemProfile:
    profile = OrderSystemProfile(
        base_url=url,
        sandbox_order_id=SANDBOX,
        reachable=True,
        probed_at=timezone.now() - dt.timedelta(minutes=minutes_ago),
        probed_by_name="lena",
        **{**ALL, **verified},
    )
    profile.derive_autonomy()
    profile.save()
    return profile


def test_autonomous_only_when_every_capability_is_verified():
    assert autonomy_for(ALL)[0] == Autonomy.AUTONOMOUS
    for name in CAPABILITIES:
        assert autonomy_for({**ALL, name: False})[0] != Autonomy.AUTONOMOUS, name


@pytest.mark.parametrize("missing", ["fencing_enforced", "approval_expiry_enforced"])
def test_supervised_when_idempotency_and_version_check_hold_but_fencing_or_approval_do_not(
    missing,
):
    autonomy, reason = autonomy_for({**ALL, missing: False})
    assert autonomy == Autonomy.SUPERVISED
    assert reason.startswith("Not verified:")


@pytest.mark.parametrize("missing", ["idempotent_replay", "key_reuse_refused", "version_check"])
def test_review_only_when_idempotency_or_version_check_is_missing(missing):
    assert autonomy_for({**ALL, missing: False})[0] == Autonomy.REVIEW_ONLY
    assert autonomy_for({**ALL, missing: False, "fencing_enforced": False})[0] == (
        Autonomy.REVIEW_ONLY
    )


def test_nothing_verified_is_review_only():
    assert autonomy_for({})[0] == Autonomy.REVIEW_ONLY


def test_never_probed_order_system_is_review_only_with_a_plain_reason(db, settings):
    settings.ORDER_SYSTEM_URL = "http://orders.test"
    status = current_autonomy()
    assert status.autonomy == Autonomy.REVIEW_ONLY
    assert "never probed" in status.reason
    assert status.profile is None
    assert status.probed_at is None


def test_latest_profile_for_the_configured_url_decides(db, settings):
    settings.ORDER_SYSTEM_URL = "http://orders.test"
    make_profile("http://orders.test", minutes_ago=10)
    latest = make_profile("http://orders.test", minutes_ago=1, fencing_enforced=False)
    make_profile("http://elsewhere.test", minutes_ago=0)

    assert current_profile() == latest
    status = current_autonomy()
    assert status.autonomy == Autonomy.SUPERVISED
    assert status.profile == latest
    assert OrderSystemProfile.objects.filter(base_url="http://orders.test").count() == 2


def test_unreachable_profile_says_so_in_its_reason(db):
    profile = OrderSystemProfile(base_url="http://x.test", sandbox_order_id=SANDBOX)
    profile.derive_autonomy()
    assert profile.autonomy == Autonomy.REVIEW_ONLY
    assert profile.autonomy_reason.startswith("The order system did not answer the probe.")


def test_claimed_but_unverified_reads_the_reference_claim_names(db):
    profile = make_profile("http://orders.test", fencing_enforced=False)
    profile.claimed = {"fencing": True, "idempotency_keys": True}
    assert profile.claimed_but_unverified == ["fencing_enforced"]
    profile.claimed = {"fencing": False}
    assert profile.claimed_but_unverified == []


def test_badge_shows_autonomy_when_and_by_whom_and_what_it_means(db, settings):
    settings.ORDER_SYSTEM_URL = "http://orders.test"
    profile = make_profile("http://orders.test", fencing_enforced=False)
    html = render_to_string(
        "reconciliation/autonomy_badge.html", {"autonomy_status": current_autonomy()}
    )
    assert "Order system: Supervised" in html
    assert "by lena" in html
    assert f"{profile.probed_at:%Y-%m-%d %H:%M}" in html
    assert "A person must start each apply" in html
    assert render_to_string("reconciliation/autonomy_badge.html", {"profile": profile}) == html


def test_badge_for_a_never_probed_system_says_review_only(db, settings):
    settings.ORDER_SYSTEM_URL = "http://orders.test"
    for context in ({"autonomy_status": current_autonomy()}, {}):
        html = render_to_string("reconciliation/autonomy_badge.html", context)
        assert "Order system: Review only" in html
        assert "never probed" in html


def test_profile_admin_is_read_only_and_shows_evidence(db, admin_client):
    profile = make_profile("http://orders.test")
    profile.evidence = {
        "version_check": {
            "verified": True,
            "summary": "Refused.",
            "steps": [
                {
                    "request": "POST /orders/X/operations",
                    "status": 409,
                    "error": "version_conflict",
                    "ms": 3.2,
                }
            ],
        }
    }
    profile.save()
    changelist = admin_client.get(reverse("admin:reconciliation_ordersystemprofile_changelist"))
    assert changelist.status_code == 200
    assert reverse("admin:reconciliation_ordersystemprofile_run_probe") in changelist.text
    detail = admin_client.get(
        reverse("admin:reconciliation_ordersystemprofile_change", args=[profile.pk])
    )
    assert detail.status_code == 200
    assert "version_conflict" in detail.text
    assert 'name="_save"' not in detail.text
    add = admin_client.get(reverse("admin:reconciliation_ordersystemprofile_add"))
    assert add.status_code == 403


def test_run_probe_admin_view_refuses_staff_without_the_permission(db, client, django_user_model):
    user = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_ordersystemprofile"))
    client.force_login(user)
    url = reverse("admin:reconciliation_ordersystemprofile_run_probe")
    assert client.get(url).status_code == 403
    assert client.post(url, {"sandbox_order_id": SANDBOX}).status_code == 403
    changelist = client.get(reverse("admin:reconciliation_ordersystemprofile_changelist"))
    assert url not in changelist.text
    assert not OrderSystemProfile.objects.exists()


@pytest.mark.order_system
def test_run_probe_admin_view_probes_the_configured_system_as_the_user(
    db, client, django_user_model, order_system, grant_key, settings
):
    settings.ORDER_SYSTEM_URL = order_system.base_url
    seed_sandbox(order_system)
    user = django_user_model.objects.create_user("prober", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="run_probe"))
    client.force_login(user)
    url = reverse("admin:reconciliation_ordersystemprofile_run_probe")
    page = client.get(url)
    assert page.status_code == 200
    # What the page says it will do to the sandbox order is what it does (it said "one real
    # change" and made four).
    words = " ".join(page.text.split())
    assert (
        "makes real changes to the sandbox order: 2 changes and 2 changes back, one of each "
        "for delivery date and shipping address, so the order ends as it began. Order "
        "cancellation cannot be undone: the probe only sends it requests that must be "
        "refused, and never applies it."
    ) in words
    before = order_system.state(SANDBOX)["order"]

    response = client.post(url, {"sandbox_order_id": SANDBOX})

    state = order_system.state(SANDBOX)
    applied = [op for op in state["operations"] if op["status"] == "applied"]
    assert sorted(op["change"]["kind"] for op in applied) == [
        "delivery_date",
        "delivery_date",
        "shipping_address",
        "shipping_address",
    ]
    assert {k: v for k, v in state["order"].items() if k != "version"} == {
        k: v for k, v in before.items() if k != "version"
    }
    profile = OrderSystemProfile.objects.get()
    assert response.status_code == 302
    assert profile.probed_by == user
    # Its page shows what it did to each kind, not only the generic checks (named in words).
    user.user_permissions.add(Permission.objects.get(codename="view_ordersystemprofile"))
    shown = " ".join(client.get(response["Location"]).content.decode().split())
    assert "Repeating an operation returns the first result and changes nothing" in shown
    for label in ("Delivery date", "Shipping address", "Order cancellation"):
        assert f"{label}: the kind&#x27;s own probe" in shown
    assert "never applied to the sandbox order" in shown
    assert profile.autonomy == Autonomy.AUTONOMOUS
    assert current_autonomy().profile == profile


# --- per change kind ------------------------------------------------------------------------


def test_a_kind_not_proven_is_review_only_whatever_the_systems_autonomy(db, settings):
    settings.ORDER_SYSTEM_URL = "http://orders.test"
    profile = make_profile("http://orders.test")
    profile.kind_autonomy = {"delivery_date": Autonomy.AUTONOMOUS}
    profile.evidence = {
        "kinds": {"shipping_address": {"summary": "The change back was not applied."}}
    }
    profile.save()

    assert current_autonomy(kind="delivery_date").is_autonomous
    address = current_autonomy(kind="shipping_address")
    assert address.autonomy == Autonomy.REVIEW_ONLY
    assert address.reason == "Shipping address: The change back was not applied."
    cancellation = current_autonomy(kind="order_cancellation")
    assert cancellation.autonomy == Autonomy.REVIEW_ONLY
    assert "was not probed" in cancellation.reason


def test_a_probe_proves_a_kind_only_as_far_as_the_system_is_proven(db):
    profile = OrderSystemProfile(base_url="http://x.test", sandbox_order_id=SANDBOX, **ALL)
    profile.fencing_enforced = False
    profile.derive_autonomy({"delivery_date": True, "order_cancellation": False})

    assert profile.autonomy == Autonomy.SUPERVISED
    assert profile.kind_autonomy == {
        "delivery_date": Autonomy.SUPERVISED,
        "order_cancellation": Autonomy.REVIEW_ONLY,
    }


def test_the_home_page_shows_each_kinds_autonomy_and_a_case_page_its_own(
    db, settings, client, lead, make_case
):
    settings.ORDER_SYSTEM_URL = "http://orders.test"
    profile = make_profile("http://orders.test")
    profile.kind_autonomy = {
        "delivery_date": Autonomy.AUTONOMOUS,
        "shipping_address": Autonomy.AUTONOMOUS,
    }
    profile.evidence = {"kinds": {"delivery_date": {"summary": "Applied and changed back."}}}
    profile.save()
    case = make_case(change={"kind": "order_cancellation", "reason_code": "other"})
    client.force_login(lead)

    home = client.get(reverse("admin:index")).content.decode()
    page = client.get(reverse("admin:cases_case_change", args=[case.pk])).content.decode()

    table = home[home.index('id="hf-kind-autonomy"') :]
    for code, words in (
        ("delivery_date", "Autonomous"),
        ("shipping_address", "Autonomous"),
        ("order_cancellation", "Review only"),
    ):
        row = table[table.index(f'data-kind="{code}"') :]
        assert words in row[: row.index("</tr>")]
    # A kind as autonomous as the system says what the probe saw of it ("As the order system"
    # said nothing), or, without evidence of its own, that it goes as the system does.
    row = table[table.index('data-kind="delivery_date"') :]
    assert "Applied and changed back." in row[: row.index("</tr>")]
    row = table[table.index('data-kind="shipping_address"') :]
    without = "No evidence of this kind of its own: as the order system as a whole, above"
    assert without in row[: row.index("</tr>")]
    assert "As the order system" not in table
    assert "Order system, order cancellation changes: Review only" in page
