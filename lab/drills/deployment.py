"""The deployment a drill runs against: the order system's control endpoints, the drill's
account and people, and the environment of the worker processes it starts.

The order system must have fault injection enabled (``ORDERS_FAULTS_ENABLED=1``): the drill
steers it through ``/_faults/`` and reads its own records through ``/_testing/``, with the
credential Holdfast already sends (``ORDER_SYSTEM_TOKEN``).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.utils import timezone

from cases.models import CustomerAccount, Team
from cases.services import DRILL_ACCOUNT

DRILL_TEAM = "Drills"
DRILL_EMAIL = "drill-customer@example.invalid"
# Slots far ahead (inside the date horizon) so drills never take a customer's delivery slot.
FIRST_DAY = 300
DAYS = 30


class DeploymentError(RuntimeError):
    """The deployment cannot be drilled (no fault injection, no sandbox order, …)."""


def database_url() -> str:
    """This process's database as a URL, for the worker processes the drill starts."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        name = str(db["NAME"])
        if name in ("", ":memory:") or name.startswith("file:"):
            raise DeploymentError("An in-memory SQLite database is invisible to workers.")
        return "sqlite:///" + str(Path(name).resolve())
    auth = quote(db["USER"] or "", safe="")
    if db["PASSWORD"]:
        auth += ":" + quote(db["PASSWORD"], safe="")
    host = db["HOST"] or "127.0.0.1"
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgres://{auth}@{host}{port}/{quote(db['NAME'], safe='')}"


def worker_env(**overrides: str) -> dict[str, str]:
    """What a drill worker runs with: this deployment's database, order system and keys, a
    short apply lease (so a stopped worker's lease runs out within the drill), and the drill
    switch that lets ``lab.drills.step_points`` stop it at a named point."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "ORDER_SYSTEM_URL": settings.ORDER_SYSTEM_URL,
        "ORDER_SYSTEM_TOKEN": settings.ORDER_SYSTEM_TOKEN,
        "APPROVAL_GRANT_KEY": settings.APPROVAL_GRANT_KEY,
        "ORDER_WEBHOOK_SECRET": settings.ORDER_WEBHOOK_SECRET,
        "ORDER_SYSTEM_SANDBOX_ORDERS": ",".join(settings.ORDER_SYSTEM_SANDBOX_ORDERS),
        "HOLDFAST_STATE_DIR": str(settings.HOLDFAST_STATE_DIR),
        "DELIVERY_DATE_HORIZON_DAYS": str(settings.DELIVERY_DATE_HORIZON_DAYS),
        "APPLY_LEASE_SECONDS": "2",
        "APPLY_HEARTBEAT_SECONDS": "0.5",
        "ORDER_SYSTEM_READ_TIMEOUT": "30",
        "HOLDFAST_DRILL": "1",
        "PYTHONUNBUFFERED": "1",
        # Drill workers send no mail: their notifications are printed in their own log, which
        # the drill reads back (one notification per operation).
        "EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend",
    }
    env.pop("HOLDFAST_DRILL_STOP_AT", None)
    env.update(overrides)
    return env


class OrderSystemControl:
    """The order system's fault and testing endpoints (fault injection must be on)."""

    def __init__(self, base_url: str | None = None, token: str | None = None) -> None:
        self.base_url = (base_url or settings.ORDER_SYSTEM_URL).rstrip("/")
        self.client = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(15.0, connect=3.0),
            headers={"Authorization": f"Bearer {token or settings.ORDER_SYSTEM_TOKEN}"},
        )

    def close(self) -> None:
        self.client.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.client.request(method, path, **kwargs)
        if response.status_code == 404 and "endpoint" in response.text:
            raise DeploymentError(
                f"{self.base_url}{path} is not there: the order system needs "
                "ORDERS_FAULTS_ENABLED=1 (never in production) for drills."
            )
        response.raise_for_status()
        return response.json()

    def check(self) -> None:
        self.faults()

    def seed(self, **body: list[dict]) -> dict:
        return self._call("POST", "/_testing/seed", json={k: v for k, v in body.items()})

    def set_fault(self, kind: str, **options: Any) -> dict:
        if kind == "search_lag":
            return self._call("POST", "/_faults/search-lag", json=options)
        return self._call("POST", "/_faults/", json={"kind": kind, **options})

    def faults(self) -> list[dict]:
        return self._call("GET", "/_faults/")["faults"]

    def clear_faults(self) -> None:
        self._call("DELETE", "/_faults/")
        self._call("POST", "/_faults/search-lag", json={"seconds": 0})

    def fault_consumed(self, kind: str) -> bool:
        return any(f["kind"] == kind and f["times"] == 0 for f in self.faults())

    def state(self, order_id: str) -> dict:
        return self._call("GET", f"/_testing/orders/{order_id}/state")

    def operations(self, order_id: str, key: str) -> list[dict]:
        """The order system's own records of one operation key on one order."""
        return [op for op in self.state(order_id)["operations"] if op.get("operation_key") == key]

    def set_access(self, account_id: str, active: bool) -> dict:
        path = f"/_testing/accounts/{account_id}/access"
        return self._call("POST", path, json={"active": active})

    def set_order(self, order_id: str, **fields: Any) -> dict:
        """Change the order as the world outside Holdfast would (``status``,
        ``shipping_address``; ``bump_version=False`` keeps its version and writes no event)."""
        return self._call("POST", f"/_testing/orders/{order_id}", json=fields)


def drill_day(n: int) -> dt.date:
    return timezone.localdate() + dt.timedelta(days=FIRST_DAY + n % DAYS)


def prepare_order_system(control: OrderSystemControl, order_id: str) -> dict:
    """Seed the drill account, its sandbox order and far-ahead slots; return what the order
    looked like before (so the run can hand it back to its owner)."""
    try:
        before = control.state(order_id)["order"]
    except httpx.HTTPStatusError:
        before = None
    control.seed(
        accounts=[{"account_id": DRILL_ACCOUNT, "name": "Failure drills", "access_active": True}],
        orders=[
            {
                "order_id": order_id,
                "account_id": DRILL_ACCOUNT,
                "delivery_date": str(drill_day(DAYS - 1)),
            }
        ],
        slots=[{"date": str(drill_day(n)), "capacity": 50} for n in range(DAYS)],
    )
    return before or {}


def restore_order_owner(control: OrderSystemControl, order_id: str, before: dict) -> None:
    """The probe keeps using its sandbox order: give it back to the account it had."""
    if before.get("account_id") and before["account_id"] != DRILL_ACCOUNT:
        control.seed(
            orders=[
                {
                    "order_id": order_id,
                    "account_id": before["account_id"],
                    "delivery_date": before.get("delivery_date") or str(drill_day(DAYS - 1)),
                }
            ]
        )
    control.set_access(DRILL_ACCOUNT, True)


class DrillPeople:
    """The drill team's lead, backup and approver, and the drill account (idempotent)."""

    def __init__(self) -> None:
        from cases.roles import ensure_roles

        ensure_roles()
        users = get_user_model()

        def person(username: str, role: str, first: str):
            user, created = users.objects.get_or_create(
                username=username, defaults={"first_name": first, "last_name": "(drill)"}
            )
            if created:
                user.set_unusable_password()  # a drill identity, never a login
                user.save()
            user.groups.add(Group.objects.get(name=role))
            return user

        self.lead = person("drill-lead", "lead", "Drill lead")
        self.backup = person("drill-backup", "lead", "Drill backup")
        self.approver = person("drill-approver", "approver", "Drill approver")
        self.team, _ = Team.objects.get_or_create(name=DRILL_TEAM)
        self.team.members.add(self.lead, self.backup, self.approver)
        if self.team.default_owner_id != self.lead.pk or self.team.default_backup_id != (
            self.backup.pk
        ):
            self.team.default_owner = self.lead
            self.team.default_backup = self.backup
            self.team.save()
        self.account, _ = CustomerAccount.objects.get_or_create(
            reference=DRILL_ACCOUNT,
            defaults={"name": "Failure drills", "team": self.team, "verified": True},
        )
        if not self.account.email:
            # An address, so the notify step really runs (drill workers only print mail).
            self.account.email = DRILL_EMAIL
            self.account.save(update_fields=["email"])
