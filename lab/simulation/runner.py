"""Run generated schedules against one order system process and report every violation.

One order system for the whole run (emptied between schedules through ``/_testing/reset``),
one client per logical worker, Holdfast's services in-process. Each schedule runs in one
transaction rolled back at its end and with a fresh host state directory, so schedules are
independent and a failing one replays exactly with ``--seed S --only K``.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.test import override_settings

from lab.simulation.executor import Executor, SimClient
from lab.simulation.generator import CHANGE_KINDS, generate
from lab.simulation.invariants import Records, check, effects

PROBE_ORDER = "ORD-PROBE"


@dataclass
class World:
    team: object
    lead: object
    backup: object
    approver: object
    account: object


@dataclass
class Outcome:
    schedules: int = 0
    violations: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    # Change kind -> schedules that had a case of it, and effects of it the order system applied.
    kinds: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CHANGE_KINDS, 0))
    effects: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CHANGE_KINDS, 0))
    shared_orders: int = 0
    shipped: int = 0  # orders that shipped mid-schedule (changes after: refused)

    @property
    def summary(self) -> str:
        return f"{self.schedules} schedules, {self.violations} violations"

    @property
    def per_kind(self) -> str:
        """``per kind: delivery_date 115 schedules (80 applied) …``."""
        parts = [
            f"{kind} {self.kinds.get(kind, 0)} schedules ({self.effects.get(kind, 0)} applied)"
            for kind in CHANGE_KINDS
        ]
        return (
            "per kind: "
            + ", ".join(parts)
            + f"; {self.shared_orders} with two kinds on one order; {self.shipped} orders "
            "shipped mid-schedule"
        )


def world_setup(orders) -> World:
    """Roles, a team with an owner, a backup and an approver, a verified account, and an
    autonomous profile of the order system from the real capability probe."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from cases.models import CustomerAccount, Team
    from cases.roles import ensure_roles
    from reconciliation.probe import order_system_probe

    ensure_roles()
    team = Team.objects.create(name="Simulation")

    def user(name: str, role: str):
        person = get_user_model().objects.create_user(
            username=f"sim-{name}", password=None, is_staff=True, first_name=name.title()
        )
        person.groups.add(Group.objects.get(name=role))
        team.members.add(person)
        return person

    lead, backup, approver = (
        user("lead", "lead"),
        user("backup", "lead"),
        user("approver", "approver"),
    )
    team.default_owner, team.default_backup = lead, backup
    team.save()
    account = CustomerAccount.objects.create(
        reference="ACC-SIM", name="Sim Bakery", team=team, verified=True, email="sim@example.com"
    )
    orders.reset()
    _seed_probe(orders)
    profile = order_system_probe(sandbox_order_id=PROBE_ORDER)
    if profile.autonomy != "autonomous":
        raise RuntimeError(f"The order system is not autonomous: {profile.evidence}")
    review_only = [k for k in CHANGE_KINDS if profile.autonomy_of(k) != "autonomous"]
    if review_only:
        raise RuntimeError(
            f"The probe left {', '.join(review_only)} review only: {profile.evidence}"
        )
    return World(team, lead, backup, approver, account)


def _seed_probe(orders) -> None:
    import datetime as dt

    from django.utils import timezone

    today = timezone.localdate()
    orders.seed(
        accounts=[{"account_id": "ACC-PROBE", "name": "Probe", "access_active": True}],
        orders=[
            {
                "order_id": PROBE_ORDER,
                "account_id": "ACC-PROBE",
                "delivery_date": str(today + dt.timedelta(days=40)),
            }
        ],
        slots=[
            {"date": str(today + dt.timedelta(days=d)), "capacity": 5} for d in (*range(1, 15), 40)
        ],
    )


def simulation_settings(orders, grant_key: str):
    """What the simulation needs from Holdfast's settings, for the whole run."""
    return override_settings(
        ORDER_SYSTEM_URL=orders.base_url,
        APPROVAL_GRANT_KEY=grant_key,
        ORDER_SYSTEM_SANDBOX_ORDERS=[PROBE_ORDER],
        EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend",
        DELIVERY_DATE_HORIZON_DAYS=max(settings.DELIVERY_DATE_HORIZON_DAYS, 60),
    )


def _records(executor: Executor, **extra) -> Records:
    from cases.models import Case

    cases = []
    for index, pk in enumerate(executor.case_pks):
        case = Case.objects.filter(pk=pk).first() if pk else None
        if case is None:
            continue
        cases.append(
            {
                "index": index,
                "reference": case.reference,
                "status": case.status,
                "owner_id": case.owner_id,
                "next_check_at": case.next_check_at,
                "operations": [
                    {
                        "key": op.key,
                        "confirmed": op.confirmed_at is not None,
                        "retired": op.retired_at is not None,
                    }
                    for op in case.operations.all()
                ],
            }
        )
    states = {order: executor.orders.state(order) for order in executor.order_ids()}
    journal = {
        f.name: getattr(executor.journal, f.name) for f in dataclasses.fields(executor.journal)
    }
    return Records(orders=states, cases=cases, seeded=executor.seeded(), **journal, **extra)


def run_one(
    schedule: dict, *, world: World, orders, clients, state_dir: Path
) -> tuple[list[str], list[str], list[str], int]:
    """Run one schedule; returns (violations, the step log, the kinds of the effects the order
    system applied, how many orders shipped)."""
    orders.reset()
    executor = Executor(world=world, orders=orders, clients=clients, schedule=schedule)
    executor.seed_orders()
    violations: list[str] = []
    applied: list[str] = []
    shipped = 0
    try:
        with override_settings(HOLDFAST_STATE_DIR=str(state_dir)), transaction.atomic():
            try:
                executor.run()
                stuck = executor.final_sweep()
                swept = _records(executor, applying_after_leases=stuck)
                violations += check(swept)
                executor.drain()
                settled = _records(executor, check_uncertain=False)
                violations += [v for v in check(settled) if v not in violations]
                applied = [e["change"].get("kind", "?") for e in effects(settled)]
                shipped = len(settled.shipped)
            finally:
                transaction.set_rollback(True)
    except Exception as exc:  # noqa: BLE001 - a crash of a service is a finding too
        violations.append(f"crashed: {type(exc).__name__}: {exc}")
        executor.log.append(traceback.format_exc(limit=6))
    return violations, executor.log, applied, shipped


def run_schedules(
    *,
    orders,
    seed: int,
    indexes: Iterable[int],
    world: World,
    progress: Callable[[str], None] = print,
    every: int = 50,
    show_steps: bool = False,
) -> Outcome:
    outcome = Outcome()
    # One line per request would drown the report (and cost time); the level is put back
    # after, so a process that runs schedules (the test suite) logs its requests again.
    httpx_logger = logging.getLogger("httpx")
    httpx_level = httpx_logger.level
    httpx_logger.setLevel(logging.WARNING)
    timeouts = {**settings.ORDER_SYSTEM_TIMEOUTS, "read": 5.0}
    names = ("w1", "w2", "w3", "system")
    clients = {name: SimClient(orders.base_url, timeouts=timeouts) for name in names}
    clients["drain"] = clients["system"]
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="holdfast-sim-") as tmp:
            for index in indexes:
                schedule = generate(seed, index)
                violations, log, applied, shipped = run_one(
                    schedule,
                    world=world,
                    orders=orders,
                    clients=clients,
                    state_dir=Path(tmp) / str(index),
                )
                outcome.schedules += 1
                for kind in set(schedule["kinds"]):
                    outcome.kinds[kind] = outcome.kinds.get(kind, 0) + 1
                outcome.shipped += shipped
                for kind in applied:
                    outcome.effects[kind] = outcome.effects.get(kind, 0) + 1
                if len(set(schedule["orders"])) < schedule["cases"]:
                    outcome.shared_orders += 1
                if violations:
                    outcome.violations += len(violations)
                    report = [
                        f"seed={seed} schedule={index}: {len(violations)} violation(s) "
                        f"(replay: manage.py simulate --seed {seed} --only {index})",
                        *(f"  ! {v}" for v in violations),
                        f"  {schedule['cases']} case(s) of kinds {schedule['kinds']} on orders "
                        f"{[f'ORD-S{o + 1}' for o in schedule['orders']]}, steps:",
                        *(f"    {line}" for line in log),
                    ]
                    outcome.failures.append("\n".join(report))
                    progress(outcome.failures[-1])
                elif show_steps:
                    progress(f"seed={seed} schedule={index}: no violation; steps:")
                    for line in log:
                        progress(f"    {line}")
                if every and outcome.schedules % every == 0:
                    progress(f"{outcome.summary} ({time.monotonic() - started:.1f} s)")
                    progress(f"  {outcome.per_kind}")
    finally:
        for name in names:
            clients[name].close()
        httpx_logger.setLevel(httpx_level)
    outcome.seconds = time.monotonic() - started
    return outcome
