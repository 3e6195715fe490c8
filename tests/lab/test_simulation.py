"""Randomized fault schedules (lab.simulation): 200 seeded schedules per run against
the live order system, every invariant checked against its own records; and the checker
itself shown to fail on fabricated bad outcomes."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from lab.simulation.generator import CHANGE_KINDS, generate
from lab.simulation.invariants import Records, check

pytestmark = pytest.mark.order_system

SCHEDULES = int(os.environ.get("SIMULATION_SCHEDULES", "200"))
SEED = int(os.environ.get("SIMULATION_SEED", "20261201"))
T0 = dt.datetime(2026, 12, 1, 10, 0, tzinfo=dt.UTC)


@pytest.fixture
def simulation(order_system, db):
    from lab.simulation.runner import simulation_settings, world_setup
    from tests.support.order_system import DEFAULT_GRANT_KEY

    with simulation_settings(order_system, DEFAULT_GRANT_KEY):
        yield order_system, world_setup(order_system)


@pytest.mark.postgres_only
def test_200_random_schedules_hold_every_invariant(simulation, capsys):
    from lab.simulation.runner import run_schedules

    orders, world = simulation
    outcome = run_schedules(
        orders=orders, seed=SEED, indexes=range(SCHEDULES), world=world, progress=print, every=0
    )

    with capsys.disabled():
        print(f"\n{outcome.summary} in {outcome.seconds:.1f} s\n{outcome.per_kind}")
    assert outcome.schedules == SCHEDULES
    assert outcome.failures == []
    # Every kind was drawn and really applied, and kinds raced each other on one order.
    for kind in CHANGE_KINDS:
        assert outcome.kinds[kind] >= SCHEDULES // 5, outcome.per_kind
        assert outcome.effects[kind] >= SCHEDULES // 20, outcome.per_kind
    assert outcome.shared_orders >= SCHEDULES // 20, outcome.per_kind
    assert outcome.shipped >= SCHEDULES // 20, outcome.per_kind


def test_a_schedule_is_a_pure_function_of_seed_and_index():
    assert generate(7, 3) == generate(7, 3)
    assert generate(7, 3) != generate(7, 4)
    random_steps = {
        len(
            [
                s
                for s in generate(1, i)["steps"]
                if not (s["kind"] == "advance" and s["worker"] == "w1")
            ]
        )
        for i in range(50)
    }
    assert min(random_steps) >= 1
    assert max(random_steps) <= 30


def test_every_case_draws_a_kind_and_one_order_never_holds_two_cases_of_one_kind():
    schedules = [generate(20261201, i) for i in range(200)]
    drawn = {kind for s in schedules for kind in s["kinds"]}
    shared = 0
    for schedule in schedules:
        assert len(schedule["kinds"]) == len(schedule["orders"]) == schedule["cases"]
        pairs = list(zip(schedule["orders"], schedule["kinds"], strict=True))
        assert len(set(pairs)) == len(pairs), schedule
        shared += len(set(schedule["orders"])) < schedule["cases"]

    assert drawn == set(CHANGE_KINDS)
    assert shared >= 10
    ships = [ship for s in schedules for ship in s["ships"]]
    assert len(ships) >= 20
    for schedule in schedules:
        for at, case in schedule["ships"]:
            assert 0 <= at <= len(schedule["steps"])
            assert case in schedule["orders"]


ADDRESS = {
    "name": "Goods In",
    "line1": "1 Dock Road",
    "city": "Bristol",
    "postal_code": "BS1 6XX",
    "country": "GB",
}


def _effect(
    key: str,
    token: int,
    approval: str = "AP-1",
    at: dt.datetime = T0,
    change: dict | None = None,
    version: int = 2,
) -> dict:
    return {
        "operation_key": key,
        "order_id": "ORD-S1",
        "status": "applied",
        "order_version": version,
        "change": change or {"kind": "delivery_date", "delivery_date": "2026-12-08"},
        "fencing_token": token,
        "approval_id": approval,
        "created_at": at.isoformat(),
    }


def _good() -> Records:
    return Records(
        orders={
            "ORD-S1": {
                "operations": [_effect("DATE-1-1", 5)],
                "events": [{}],
                "fence_token": 5,
                "order": {
                    "status": "open",
                    "delivery_date": "2026-12-08",
                    "shipping_address": {**ADDRESS, "line2": ""},
                },
            }
        },
        cases=[
            {
                "index": 0,
                "reference": "D-1",
                "status": "done",
                "owner_id": 1,
                "next_check_at": None,
                "operations": [{"key": "DATE-1-1", "confirmed": True, "retired": False}],
            }
        ],
        attempts={
            1: {
                "case": 0,
                "reference": "D-1-a1",
                "token": 5,
                "operation_key": "DATE-1-1",
                "claimed_at": T0 - dt.timedelta(seconds=1),
            }
        },
        approvals={
            1: {
                "reference": "AP-1",
                "case": 0,
                "operation_key": "DATE-1-1",
                "order_id": "ORD-S1",
                "change": {"kind": "delivery_date", "delivery_date": "2026-12-08"},
                "expires_at": T0 + dt.timedelta(hours=4),
                "revoked_at": None,
            }
        },
        operations={"DATE-1-1": {"case": 0, "order_id": "ORD-S1"}},
        seeded={"ORD-S1": {**SEEDED}},
    )


SEEDED = {"status": "open", "delivery_date": "2026-12-04", "shipping_address": dict(ADDRESS)}


def test_the_checker_passes_a_clean_outcome():
    assert check(_good()) == []


def test_the_checker_finds_two_effects_for_one_key():
    records = _good()
    records.orders["ORD-S1"]["operations"].append(_effect("DATE-1-1", 6))

    violations = check(records)

    assert "one effect per key: DATE-1-1 applied 2 times" in violations


def test_the_checker_finds_an_effect_the_outbox_counts_twice():
    records = _good()
    records.orders["ORD-S1"]["events"].append({})

    assert any("shows 2 effects for 1 operation keys" in v for v in check(records))


def test_the_checker_finds_an_effect_from_a_stale_token():
    records = _good()
    records.fences.append({"order_id": "ORD-S1", "token": 9, "at": T0 - dt.timedelta(seconds=1)})

    assert any(v.startswith("stale token: DATE-1-1 (token 5") for v in check(records))


def test_the_checker_finds_an_effect_after_a_newer_claim():
    records = _good()
    records.attempts[2] = {
        "case": 0,
        "reference": "D-1-a2",
        "token": 8,
        "operation_key": "DATE-1-1",
        "claimed_at": T0 - dt.timedelta(milliseconds=500),
    }

    assert any("after the newer attempt D-1-a2" in v for v in check(records))


def test_the_checker_finds_an_effect_of_an_expired_or_other_intent_approval():
    expired = _good()
    expired.approvals[1]["expires_at"] = T0 - dt.timedelta(seconds=1)
    other = _good()
    other.approvals[1]["operation_key"] = "DATE-1-2"

    assert any("approval: DATE-1-1" in v and "expired" in v for v in check(expired))
    assert any("another intent" in v for v in check(other))


def test_the_checker_finds_a_cancelled_case_with_an_effect_and_an_unheld_uncertain_one():
    cancelled = _good()
    cancelled.cases[0]["status"] = "cancelled"
    uncertain = _good()
    uncertain.cases[0].update(status="ready")
    uncertain.cases[0]["operations"][0]["confirmed"] = False

    assert any(v.startswith("cancelled with an effect: D-1") for v in check(cancelled))
    assert any(v.startswith("uncertain not held: D-1 is ready") for v in check(uncertain))


def test_the_checker_finds_a_new_key_without_a_new_intent_and_a_stuck_apply():
    records = _good()
    records.attempts[2] = {
        "case": 0,
        "reference": "D-1-a2",
        "token": 3,
        "operation_key": "DATE-1-2",
        "claimed_at": T0 + dt.timedelta(seconds=5),
    }
    records.applying_after_leases.append("D-1")

    violations = check(records)

    assert any(v.startswith("new key without a new intent: D-1-a1") for v in violations)
    assert "applying past lease + grace: D-1" in violations


def test_a_frozen_write_is_judged_by_when_holdfast_decided_to_send_it():
    """seed=11 schedules 195 and 251: a worker froze just before its write left, the approval
    then lapsed, and the write landed. Holdfast decided before the expiry; after that only the
    receiver's grant check could refuse it. An effect decided after the expiry is a violation."""
    records = _good()
    records.approvals[1]["expires_at"] = T0 - dt.timedelta(milliseconds=80)
    records.late_writes.append(
        {"operation_key": "DATE-1-1", "token": 5, "frozen_at": T0 - dt.timedelta(seconds=1)}
    )
    assert check(records) == []

    records.late_writes[0]["frozen_at"] = T0 - dt.timedelta(milliseconds=10)
    assert any("expired" in v for v in check(records))


@pytest.mark.postgres_only
@pytest.mark.parametrize("index", [50, 52])
def test_restored_records_never_cancel_or_return_to_review_an_applied_change(simulation, index):
    from lab.simulation.runner import run_schedules

    orders, world = simulation
    outcome = run_schedules(
        orders=orders, seed=20261201, indexes=[index], world=world, progress=print, every=0
    )

    assert outcome.failures == []


def _second_case(records: Records, key: str, change: dict, version: int, case: int = 1) -> None:
    """Case ``case`` on ORD-S1 (another kind), approved, applied as ``key`` and done."""
    at = T0 + dt.timedelta(seconds=version)
    records.orders["ORD-S1"]["operations"].append(
        _effect(key, 10 + version, approval=f"AP-{key}", at=at, change=change, version=version)
    )
    records.orders["ORD-S1"]["events"].append({})
    records.operations[key] = {"case": case, "order_id": "ORD-S1"}
    records.attempts[10 + version] = {
        "case": case,
        "reference": f"D-2-a{version}",
        "token": 10 + version,
        "operation_key": key,
        "claimed_at": at - dt.timedelta(seconds=1),
    }
    records.approvals[10 + version] = {
        "reference": f"AP-{key}",
        "case": case,
        "operation_key": key,
        "order_id": "ORD-S1",
        "change": change,
        "expires_at": at + dt.timedelta(hours=4),
        "revoked_at": None,
    }
    records.cases.append(
        {
            "index": case,
            "reference": f"D-{case + 1}",
            "status": "done",
            "owner_id": 1,
            "next_check_at": None,
            "operations": [{"key": key, "confirmed": True, "retired": False}],
        }
    )


NEW_ADDRESS = {
    "kind": "shipping_address",
    "address": {**ADDRESS, "line1": "9 Harbour Road", "city": "Leeds"},
}
CANCEL = {"kind": "order_cancellation", "reason_code": "customer_request"}


def test_the_checker_passes_an_address_change_and_a_cancellation_the_order_shows():
    records = _good()
    _second_case(records, "ADDR-2-1", NEW_ADDRESS, version=3)
    records.orders["ORD-S1"]["order"]["shipping_address"] = {**NEW_ADDRESS["address"], "line2": ""}
    assert check(records) == []

    _second_case(records, "CANCEL-3-1", CANCEL, version=4, case=2)
    records.orders["ORD-S1"]["order"]["status"] = "cancelled"
    assert check(records) == []


def test_the_checker_finds_an_order_whose_fields_disagree_with_its_effects():
    address_lost = _good()
    _second_case(address_lost, "ADDR-2-1", NEW_ADDRESS, version=3)
    cancelled_unseen = _good()
    _second_case(cancelled_unseen, "CANCEL-2-1", CANCEL, version=3)
    cancelled_from_nowhere = _good()
    cancelled_from_nowhere.orders["ORD-S1"]["order"]["status"] = "cancelled"

    assert any(
        v.startswith("order fields: ORD-S1 shows shipping_address") for v in check(address_lost)
    )
    assert any(
        v.startswith("order fields: ORD-S1 shows status 'open'") for v in check(cancelled_unseen)
    )
    assert any(
        v.startswith("order fields: ORD-S1 shows status 'cancelled'")
        for v in check(cancelled_from_nowhere)
    )


def test_the_checker_finds_an_effect_after_a_cancellation_and_a_done_case_without_one():
    late = _good()
    late.orders["ORD-S1"]["operations"][0]["order_version"] = 4
    _second_case(late, "CANCEL-2-1", CANCEL, version=3)
    late.orders["ORD-S1"]["order"]["status"] = "cancelled"
    never_applied = _good()
    never_applied.orders["ORD-S1"]["operations"] = []
    never_applied.orders["ORD-S1"]["events"] = []
    never_applied.orders["ORD-S1"]["order"]["delivery_date"] = "2026-12-04"

    assert any(
        v.startswith("effect on a cancelled order: DATE-1-1 (delivery_date)") for v in check(late)
    )
    assert any(
        v.startswith("done without exactly one effect: D-1 is done with 0")
        for v in check(never_applied)
    )


def test_the_checker_finds_an_effect_on_a_shipped_order_and_knows_a_shipped_one():
    shipped_before = _good()
    shipped_before.shipped["ORD-S1"] = T0 - dt.timedelta(seconds=1)
    shipped_before.orders["ORD-S1"]["order"]["status"] = "shipped"
    shipped_after = _good()
    shipped_after.shipped["ORD-S1"] = T0 + dt.timedelta(seconds=1)
    shipped_after.orders["ORD-S1"]["order"]["status"] = "shipped"

    assert any(
        v.startswith("effect on a shipped order: DATE-1-1 (delivery_date)")
        for v in check(shipped_before)
    )
    assert check(shipped_after) == []
    shipped_after.orders["ORD-S1"]["order"]["status"] = "open"
    assert any(
        v.startswith("order fields: ORD-S1 shows status 'open'") for v in check(shipped_after)
    )
