"""Invariants of one schedule, checked against the order system's own records.

``check`` is a pure function of plain data (``Records``), so a test can feed it a fabricated
bad outcome. The order system's records (``/_testing/orders/{id}/state``: its applied
operations with key, fencing token, approval id and time, its outbox of effects, its fence) are
the ground truth; Holdfast's records and the simulation's journal say what was allowed.

Every change kind is judged by the same rules, and each by the order's own record of what it
changes (``order_fields``): the delivery date, the shipping address, the status (a cancellation).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from cases.kinds import same_change


@dataclass
class Records:
    # order id -> the order system's state of that order
    orders: dict[str, dict]
    # Holdfast, now: one dict per case (index, reference, status, owner_id, next_check_at,
    # operations: [{key, confirmed, retired}])
    cases: list[dict]
    # The simulation's journal (see executor.Journal), as plain dicts and lists.
    attempts: dict[int, dict] = field(default_factory=dict)
    approvals: dict[int, dict] = field(default_factory=dict)
    operations: dict[str, dict] = field(default_factory=dict)
    fences: list[dict] = field(default_factory=list)
    intent_changes: list[dict] = field(default_factory=list)
    restores: list[dt.datetime] = field(default_factory=list)
    late_writes: list[dict] = field(default_factory=list)
    applying_without_attempt: list[str] = field(default_factory=list)
    held_without_owner: list[str] = field(default_factory=list)
    # Cases still applying once every lease (plus grace) has run out and the watchdog ran.
    applying_after_leases: list[str] = field(default_factory=list)
    # Checked only after the final sweep: uncertain cases must be held.
    check_uncertain: bool = True
    # order id -> when it shipped (its status then stays shipped unless cancelled before).
    shipped: dict[str, dt.datetime] = field(default_factory=dict)
    # order id -> its fields as seeded ({status, delivery_date, shipping_address}): what the
    # order shows until an effect changes it.
    seeded: dict[str, dict] = field(default_factory=dict)


def _time(value) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def effects(records: Records) -> list[dict]:
    out = []
    for order_id, state in records.orders.items():
        for operation in state["operations"]:
            out.append({**operation, "order_id": order_id, "at": _time(operation["created_at"])})
    return out


def check(records: Records) -> list[str]:
    """Every violated invariant, in words (empty: all hold)."""
    violations: list[str] = []
    found = effects(records)

    # 1. At most one effect per operation key (the outbox holds one event per effect).
    keys: dict[str, int] = {}
    for effect in found:
        keys[effect["operation_key"]] = keys.get(effect["operation_key"], 0) + 1
    for key, count in keys.items():
        if count > 1:
            violations.append(f"one effect per key: {key} applied {count} times")
    for order_id, state in records.orders.items():
        if len(state["events"]) != len(state["operations"]):
            violations.append(
                f"one effect per key: {order_id} shows {len(state['events'])} effects for "
                f"{len(state['operations'])} operation keys"
            )

    for effect in found:
        key, at, token = effect["operation_key"], effect["at"], effect["fencing_token"]
        label = f"{key} (token {token}, at {at:%H:%M:%S.%f})"
        if key not in records.operations:
            violations.append(f"unknown key: {label} is not an operation Holdfast minted")
            continue
        case = records.operations[key]["case"]
        # 2. No effect from a stale token: none below a fence raised before it, and it came
        # from the attempt of that key that was current (no newer claim on the case).
        for fence in records.fences:
            if (
                fence["order_id"] == effect["order_id"]
                and fence["token"] > token
                and _time(fence["at"]) < at
            ):
                violations.append(f"stale token: {label} after a fence at {fence['token']}")
        mine = [
            a
            for a in records.attempts.values()
            if a["operation_key"] == key and a["token"] == token
        ]
        if not mine:
            violations.append(f"stale token: {label} matches no attempt of {key}")
        for other in records.attempts.values():
            if (
                other["case"] == case
                and other["token"] > token
                and _time(other["claimed_at"]) < at
                and not _restored_between(records, other["claimed_at"], at)
            ):
                violations.append(
                    f"stale token: {label} after the newer attempt {other['reference']} "
                    f"(token {other['token']}) was claimed"
                )
        # 3. No effect from an expired, revoked or other-intent approval. Judged when Holdfast
        # decided to send: a write frozen on its way and woken after the approval lapsed is the
        # receiver's to refuse by the grant's signed expiry, which the simulation's clock jump
        # does not move (tests/reconciliation/test_apply_faults.py covers that refusal).
        change = effect["change"]
        decided = min(
            [at]
            + [
                _time(w["frozen_at"])
                for w in records.late_writes
                if w["operation_key"] == key and w["token"] == token
            ]
        )
        candidates = [
            a for a in records.approvals.values() if a["reference"] == effect["approval_id"]
        ]
        if not candidates:
            violations.append(f"approval: {label} carries {effect['approval_id']}, never approved")
        reasons = [_approval_problem(a, effect, key, change, decided) for a in candidates]
        if candidates and all(reasons):
            violations.append(f"approval: {label} by {effect['approval_id']}: {reasons[0]}")

    by_case: dict[int, list[dict]] = {}
    for effect in found:
        if effect["operation_key"] in records.operations:
            by_case.setdefault(records.operations[effect["operation_key"]]["case"], []).append(
                effect
            )
    for case in records.cases:
        applied = by_case.get(case["index"], [])
        # 4. Cancelled only when no effect exists.
        if case["status"] == "cancelled" and applied:
            violations.append(
                f"cancelled with an effect: {case['reference']} is cancelled but "
                f"{applied[0]['operation_key']} was applied"
            )
        if not records.check_uncertain:
            continue
        # 6. Every uncertain case is held with a responsible person and a next check.
        applied_keys = {e["operation_key"] for e in applied}
        unconfirmed = [
            op["key"]
            for op in case["operations"]
            if op["key"] in applied_keys and not op["confirmed"]
        ]
        if unconfirmed and case["status"] != "held":
            violations.append(
                f"uncertain not held: {case['reference']} is {case['status']} while "
                f"{unconfirmed[0]} is applied and unconfirmed in its records"
            )
        if case["status"] == "held" and (case["owner_id"] is None or case["next_check_at"] is None):
            violations.append(
                f"held without a person or next check: {case['reference']} "
                f"(owner {case['owner_id']}, next check {case['next_check_at']})"
            )
    # 5. Nothing applying past lease + grace; applying always has a live attempt.
    violations += [f"applying past lease + grace: {ref}" for ref in records.applying_after_leases]
    violations += [
        f"applying without a live attempt: {ref}" for ref in records.applying_without_attempt
    ]
    violations += [f"held without a person or next check: {r}" for r in records.held_without_owner]

    # 8. Exactly once, in the order's own records: a done case's operations produced exactly
    # one effect, and each order shows what its last effect of each kind set (the seed where
    # none did): a cancellation applied means the order is cancelled, and nothing is applied
    # to an order after its cancellation or after it shipped (the receiver refuses an order
    # that is not open).
    for case in records.cases:
        mine = by_case.get(case["index"], [])
        if case["status"] == "done" and len(mine) != 1:
            violations.append(
                f"done without exactly one effect: {case['reference']} is done with "
                f"{len(mine)} effect(s) of its operations"
            )
    violations += order_fields(records, found)

    # 7. Every attempt of a case carries the same operation key until the intent changes.
    per_case: dict[int, list[dict]] = {}
    for attempt in records.attempts.values():
        per_case.setdefault(attempt["case"], []).append(attempt)
    for case, attempts in per_case.items():
        attempts.sort(key=lambda a: _time(a["claimed_at"]))
        for before, after in zip(attempts, attempts[1:], strict=False):
            if before["operation_key"] == after["operation_key"]:
                continue
            start, end = _time(before["claimed_at"]), _time(after["claimed_at"])
            changed = any(
                c["case"] == case and start <= _time(c["at"]) <= end for c in records.intent_changes
            )
            if not changed and not _restored_between(records, start, end):
                violations.append(
                    f"new key without a new intent: {before['reference']} served "
                    f"{before['operation_key']}, then {after['reference']} served "
                    f"{after['operation_key']}"
                )
    return violations


def _address(value) -> dict | None:
    """An address as compared: the order system keeps an absent ``line2`` as ""."""
    if not isinstance(value, dict):
        return value
    return {k: v for k, v in value.items() if not (k == "line2" and v == "")}


# Change kind -> (the order's field it sets, the value an applied change sets it to).
_SETS = {
    "delivery_date": ("delivery_date", lambda change: change["delivery_date"]),
    "shipping_address": ("shipping_address", lambda change: _address(change["address"])),
    "order_cancellation": ("status", lambda change: "cancelled"),
}


def order_fields(records: Records, found: list[dict]) -> list[str]:
    """Each seeded order's fields against its effects, in the order system's version order."""
    violations: list[str] = []
    for order_id, seeded in records.seeded.items():
        order = records.orders.get(order_id, {}).get("order")
        if order is None:
            continue
        applied = sorted(
            (e for e in found if e["order_id"] == order_id), key=lambda e: e["order_version"]
        )
        expected = {
            "status": seeded["status"],
            "delivery_date": seeded["delivery_date"],
            "shipping_address": _address(seeded["shipping_address"]),
        }
        closed_by = None
        shipped = records.shipped.get(order_id)
        for effect in applied:
            kind = effect["change"].get("kind", "delivery_date")
            if shipped is not None and effect["at"] > _time(shipped):
                violations.append(
                    f"effect on a shipped order: {effect['operation_key']} ({kind}) applied "
                    f"to {order_id} after it shipped at {_time(shipped):%H:%M:%S.%f}"
                )
            if closed_by is not None:
                violations.append(
                    f"effect on a cancelled order: {effect['operation_key']} ({kind}) applied "
                    f"to {order_id} after {closed_by} cancelled it"
                )
            if kind not in _SETS:
                violations.append(f"unknown kind: {effect['operation_key']} applied {kind}")
                continue
            name, value = _SETS[kind]
            expected[name] = value(effect["change"])
            if kind == "order_cancellation" and closed_by is None:
                closed_by = effect["operation_key"]
        if shipped is not None and closed_by is None:
            expected["status"] = "shipped"
        shown = {
            "status": order.get("status"),
            "delivery_date": order.get("delivery_date"),
            "shipping_address": _address(order.get("shipping_address")),
        }
        for name, value in expected.items():
            if shown[name] != value:
                violations.append(
                    f"order fields: {order_id} shows {name} {shown[name]!r} after "
                    f"{len(applied)} effect(s); its effects set {value!r}"
                )
    return violations


def _restored_between(records: Records, start, end) -> bool:
    return any(_time(start) <= _time(t) <= _time(end) for t in records.restores)


def _approval_problem(approval: dict, effect: dict, key: str, change: dict, at: dt.datetime) -> str:
    if approval["operation_key"] != key:
        return f"it approved {approval['operation_key']}, another intent"
    if approval["order_id"] != effect["order_id"] or not same_change(approval["change"], change):
        return f"it approved {approval['order_id']} → {approval['change']}, not {change}"
    if _time(approval["expires_at"]) <= at:
        return f"it expired at {_time(approval['expires_at']):%H:%M:%S.%f}"
    if approval["revoked_at"] is not None and _time(approval["revoked_at"]) <= at:
        return f"it was revoked at {_time(approval['revoked_at']):%H:%M:%S.%f}"
    return ""
