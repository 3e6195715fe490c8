"""The seeded generator: schedule ``K`` of seed ``S`` is a pure function of ``(S, K)``.

A schedule is a few cases and 10-30 steps. Each case draws one change kind
(``CHANGE_KINDS``: a delivery date, a shipping address, an order cancellation) and an order: its
own, or (``SHARED_ORDER``) the order of an earlier case of another kind, so that different kinds
on one order race each other (the first applied moves the order's version; a cancellation
closes the order for the others). Two cases of one kind never share an order: intake keeps one
open case per order and kind. Kinds and orders come from their own random stream, so the steps
of a schedule are those it had before kinds existed.

Steps are plain dicts (printable, replayable); what a step does depends on the state it meets (a
claim of a case that is not ready is refused), so the same list run again does the same thing.
"""

from __future__ import annotations

import random

WORKERS = ("w1", "w2", "w3")
CHANGE_KINDS = ("delivery_date", "shipping_address", "order_cancellation")
# The chance that a case joins the order of an earlier case of another kind.
SHARED_ORDER = 0.3
# The chance that an order ships during the schedule (at its version: only the receiver's own
# check, ``409 order_not_open``, refuses what comes after).
SHIPS = 0.15
FAULTS = (
    "drop_after_commit",
    "fail_before_commit",
    "unavailable",
    "unavailable_lookup",
    "search_lag",
    "latency",
)
# (step kind, weight). "advance" moves a case to its next natural step (intake, source check,
# proposal, approval, apply by a worker, reconcile) so that schedules reach the risky states.
_KINDS = (
    ("advance", 30),
    ("apply", 8),
    ("claim", 4),
    ("run", 6),
    ("lease_expiry", 5),
    ("reconcile", 4),
    ("cancel", 3),
    ("expire_approval", 3),
    ("change_intent", 2),
    ("fault", 10),
    ("webhook", 4),
    ("snapshot", 2),
    ("restore", 2),
    ("tick", 3),
    ("order_changed", 1),
)


def schedule_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"holdfast-sim:{seed}:{index}")  # noqa: S311 - not cryptography


def draw_kinds(seed: int, index: int, cases: int) -> tuple[list[str], list[int]]:
    """Each case's change kind, and the case whose order it works on (itself, or an earlier
    case of another kind whose order holds no case of its kind yet)."""
    rng = random.Random(f"holdfast-sim-kinds:{seed}:{index}")  # noqa: S311 - not cryptography
    kinds = [rng.choice(CHANGE_KINDS) for _ in range(cases)]
    orders: list[int] = []
    for case in range(cases):
        joinable = [
            o
            for o in sorted(set(orders))
            if all(kinds[c] != kinds[case] for c in range(case) if orders[c] == o)
        ]
        if joinable and rng.random() < SHARED_ORDER:
            orders.append(rng.choice(joinable))
        else:
            orders.append(case)
    return kinds, orders


def draw_ships(seed: int, index: int, orders: list[int], steps: int) -> list[list[int]]:
    """``[step, case]`` pairs: before step ``step`` the order of case ``case`` ships."""
    rng = random.Random(f"holdfast-sim-ships:{seed}:{index}")  # noqa: S311 - not cryptography
    return [[rng.randint(0, steps), order] for order in sorted(set(orders)) if rng.random() < SHIPS]


def generate(seed: int, index: int) -> dict:
    """``{"seed", "index", "cases", "kinds", "orders", "ships", "steps"}`` for schedule
    ``index`` of ``seed``: ``kinds[i]`` is case ``i``'s change kind, ``orders[i]`` the case
    whose order it works on, ``ships`` when an order ships (``draw_ships``)."""
    rng = schedule_rng(seed, index)
    cases = rng.randint(1, 3)
    change_kinds, orders = draw_kinds(seed, index, cases)
    kinds = [k for k, _ in _KINDS]
    weights = [w for _, w in _KINDS]
    steps: list[dict] = []
    # Most cases start from a proposal already approved (intake, source check, proposal,
    # approval): the risky interleavings begin at "ready".
    for case in range(cases):
        if rng.random() < 0.7:
            steps += [{"kind": "advance", "case": case, "worker": "w1"} for _ in range(4)]
    for _ in range(rng.randint(10, 30)):
        kind = rng.choices(kinds, weights)[0]
        step: dict = {"kind": kind, "case": rng.randrange(cases)}
        if kind in {"advance", "apply", "claim", "run"}:
            step["worker"] = rng.choice(WORKERS)
        if kind == "apply":
            step["mode"] = rng.choice(("normal", "normal", "pause_at_send", "kill_after_send"))
        if kind == "fault":
            step["fault"] = rng.choice(FAULTS)
        if kind == "webhook":
            step["resend"] = rng.choice(("latest", "latest", "oldest"))
        if kind == "change_intent":
            step["days"] = rng.randint(5, 20)
        steps.append(step)
    return {
        "seed": seed,
        "index": index,
        "cases": cases,
        "kinds": change_kinds,
        "orders": orders,
        "ships": draw_ships(seed, index, orders, len(steps)),
        "steps": steps,
    }


def describe(step: dict) -> str:
    extra = " ".join(f"{k}={v}" for k, v in step.items() if k not in {"kind", "case"})
    return f"{step['kind']} case={step['case']}" + (f" {extra}" if extra else "")
