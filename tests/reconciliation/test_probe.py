"""The capability probe and the autonomy it derives, against real order-system processes."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from reconciliation.client import OrderSystemClient
from reconciliation.models import CAPABILITIES, Autonomy, OrderSystemProfile
from reconciliation.probe import order_system_probe
from reconciliation.selectors import current_autonomy
from tests.support.order_system import SEED_ADDRESS, OrderSystemProcess

from .conftest import SANDBOX, future, seed_sandbox

TIMEOUTS = {"connect": 2.0, "read": 5.0, "write": 5.0, "pool": 2.0}


def probe(system, **kwargs) -> OrderSystemProfile:
    with OrderSystemClient(system.base_url, timeouts=TIMEOUTS) as client:
        return order_system_probe(sandbox_order_id=SANDBOX, client=client, **kwargs)


@pytest.fixture(scope="module")
def fencing_off():
    with OrderSystemProcess(extra_env={"ORDERS_DISABLE_FENCING": "1"}) as system:
        yield system


@pytest.fixture(scope="module")
def idempotency_off():
    with OrderSystemProcess(extra_env={"ORDERS_DISABLE_IDEMPOTENCY": "1"}) as system:
        yield system


@pytest.mark.order_system
def test_probe_marks_the_reference_order_system_autonomous(db, order_system, grant_key, admin_user):
    seed_sandbox(order_system)
    profile = probe(order_system, actor=admin_user)

    assert profile.verified == dict.fromkeys(CAPABILITIES, True), profile.evidence
    assert profile.autonomy == Autonomy.AUTONOMOUS
    assert profile.reachable is True
    assert profile.probed_by == admin_user
    assert profile.probed_by_name == admin_user.username
    assert profile.claimed["fencing"] is True
    assert profile.claimed_but_unverified == []
    for name in CAPABILITIES:
        steps = profile.evidence[name]["steps"]
        assert steps, name
        assert all({"request", "status", "error", "ms"} <= set(step) for step in steps)
    # The probe really changed the sandbox order and changed it back, once for the generic
    # checks (a delivery date) and once for the address; never cancelled it.
    state = order_system.state(SANDBOX)
    assert state["order"]["version"] == 5
    assert len(state["operations"]) == 4
    assert state["order"]["status"] == "open"
    assert state["order"]["delivery_date"] == str(future(30))
    assert state["order"]["shipping_address"] == SEED_ADDRESS
    assert current_autonomy(order_system.base_url).profile == profile
    assert profile.kind_autonomy == dict.fromkeys(
        ["delivery_date", "shipping_address", "order_cancellation"], Autonomy.AUTONOMOUS
    )
    assert all(found["verified"] for found in profile.evidence["kinds"].values())


@pytest.mark.order_system
def test_a_cancellation_is_proven_by_refusals_alone_and_never_applied(db, order_system, grant_key):
    seed_sandbox(order_system)
    profile = probe(order_system)

    steps = profile.evidence["kinds"]["order_cancellation"]["steps"]
    refusals = [(s["status"], s["error"]) for s in steps if s["request"].startswith("POST")]
    assert refusals == [
        (200, None),  # the fence
        (409, "stale_fencing_token"),
        (403, "approval_expired"),
        (409, "version_conflict"),
    ]
    assert all('"kind":"order_cancellation"' in s["request"] for s in steps[-3:])
    state = order_system.state(SANDBOX)
    assert state["order"]["status"] == "open"
    assert not [op for op in state["operations"] if op["change"]["kind"] == "order_cancellation"]


@pytest.fixture(scope="module")
def without_cancellations():
    env = {"ORDERS_CHANGE_KINDS": "delivery_date,shipping_address"}
    with OrderSystemProcess(extra_env=env) as system:
        yield system


@pytest.mark.order_system
def test_a_kind_the_order_system_does_not_list_is_review_only_alone(
    db, without_cancellations, grant_key
):
    without_cancellations.reset()
    seed_sandbox(without_cancellations)
    profile = probe(without_cancellations)

    assert profile.autonomy == Autonomy.AUTONOMOUS
    assert profile.kind_autonomy == {
        "delivery_date": Autonomy.AUTONOMOUS,
        "shipping_address": Autonomy.AUTONOMOUS,
        "order_cancellation": Autonomy.REVIEW_ONLY,
    }
    found = profile.evidence["kinds"]["order_cancellation"]
    assert (found["listed"], found["verified"], found["steps"]) == (False, False, [])
    assert "does not list order_cancellation" in found["summary"]
    status = current_autonomy(without_cancellations.base_url, kind="order_cancellation")
    assert status.autonomy == Autonomy.REVIEW_ONLY
    assert "does not list order_cancellation" in status.reason
    assert current_autonomy(without_cancellations.base_url, kind="delivery_date").is_autonomous


@pytest.mark.order_system
def test_probe_records_each_refusal_with_its_status_and_error_code(db, order_system, grant_key):
    seed_sandbox(order_system)
    profile = probe(order_system)
    errors = {
        name: [(step["status"], step["error"]) for step in profile.evidence[name]["steps"]]
        for name in CAPABILITIES
    }
    assert (422, "key_reused") in errors["key_reuse_refused"]
    assert (409, "stale_fencing_token") in errors["fencing_enforced"]
    assert (409, "version_conflict") in errors["version_check"]
    assert (403, "approval_expired") in errors["approval_expiry_enforced"]
    assert errors["approval_expiry_enforced"].count((403, "approval_invalid")) == 2
    assert (404, "unknown_operation") in errors["consistent_lookup"]


@pytest.mark.order_system
def test_probe_of_a_system_that_ignores_fencing_is_supervised_despite_its_claim(
    db, fencing_off, grant_key
):
    fencing_off.reset()
    seed_sandbox(fencing_off)
    profile = probe(fencing_off)

    assert profile.fencing_enforced is False
    assert profile.claimed["fencing"] is True
    assert "fencing_enforced" in profile.claimed_but_unverified
    assert profile.idempotent_replay is True
    assert profile.key_reuse_refused is True
    assert profile.version_check is True
    assert profile.autonomy == Autonomy.SUPERVISED
    assert "stale_fencing_token" in profile.evidence["fencing_enforced"]["summary"]


@pytest.mark.order_system
def test_probe_of_a_system_without_idempotency_is_review_only(db, idempotency_off, grant_key):
    idempotency_off.reset()
    seed_sandbox(idempotency_off)
    profile = probe(idempotency_off)

    assert profile.idempotent_replay is False
    assert profile.key_reuse_refused is False
    assert profile.autonomy == Autonomy.REVIEW_ONLY
    assert "idempotent_replay" in profile.claimed_but_unverified


@pytest.mark.order_system
def test_probe_with_a_grant_key_the_receiver_does_not_share_verifies_nothing_that_needs_a_grant(
    db, order_system, settings
):
    settings.APPROVAL_GRANT_KEY = "not-the-receivers-key"
    seed_sandbox(order_system)
    profile = probe(order_system)

    assert profile.reachable is True
    assert profile.idempotent_replay is False
    assert "approval_invalid" in profile.evidence["idempotent_replay"]["summary"]
    assert profile.autonomy == Autonomy.REVIEW_ONLY
    assert order_system.state(SANDBOX)["order"]["version"] == 1


@pytest.mark.order_system
def test_probe_of_an_unknown_sandbox_order_verifies_nothing(db, order_system, grant_key):
    profile = probe(order_system)
    assert profile.reachable is True
    assert not any(profile.verified.values())
    assert profile.autonomy == Autonomy.REVIEW_ONLY
    assert profile.evidence["setup"][-1]["error"] == "unknown_order"


def test_probe_of_an_unreachable_system_is_recorded_not_raised(db, free_port, grant_key):
    timeouts = {"connect": 1.0, "read": 1.0, "write": 1.0, "pool": 1.0}
    with OrderSystemClient(f"http://127.0.0.1:{free_port}", timeouts=timeouts) as client:
        profile = order_system_probe(sandbox_order_id=SANDBOX, client=client)
    assert profile.pk is not None
    assert profile.reachable is False
    assert profile.autonomy == Autonomy.REVIEW_ONLY
    assert "did not answer" in profile.autonomy_reason
    assert profile.probed_by is None
    assert profile.probed_by_name == "command line"


@pytest.mark.order_system
def test_probe_command_prints_each_check_and_the_autonomy(db, order_system, grant_key):
    seed_sandbox(order_system)
    out = io.StringIO()
    call_command(
        "probe_order_system", "--order", SANDBOX, "--url", order_system.base_url, stdout=out
    )
    text = out.getvalue()
    for name in CAPABILITIES:
        assert f"✓ {name}:" in text
    assert "Autonomy: Autonomous" in text
    for code in ("delivery_date", "shipping_address", "order_cancellation"):
        assert f"✓ {code}: Autonomous" in text
    assert OrderSystemProfile.objects.get().base_url == order_system.base_url


@pytest.mark.order_system
def test_probe_command_marks_missing_capabilities_and_their_claims(db, fencing_off, grant_key):
    fencing_off.reset()
    seed_sandbox(fencing_off)
    out = io.StringIO()
    call_command(
        "probe_order_system", "--order", SANDBOX, "--url", fencing_off.base_url, stdout=out
    )
    text = out.getvalue()
    assert "✗ fencing_enforced:" in text
    assert "(claimed by /capabilities)" in text
    assert "Autonomy: Supervised" in text


def test_probe_command_fails_when_the_order_system_is_unreachable(db, free_port, grant_key):
    out = io.StringIO()
    with pytest.raises(CommandError, match="did not answer"):
        call_command(
            "probe_order_system",
            "--order",
            SANDBOX,
            "--url",
            f"http://127.0.0.1:{free_port}",
            stdout=out,
        )
    assert "✗ idempotent_replay" in out.getvalue()
