"""The reference order system as the bench runs it: ``python -m orders serve`` on its own
database (``<bench database>_orders``), as deployed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings

from lab.bench.cluster import ROOT, stop
from lab.bench.postgres import conninfo, database_url, recreate_database
from lab.bench.series import Skip

_READY = re.compile(r"Order system: (http://[^\s/]+)/")


class DeployedOrderSystem:
    """``python -m orders serve`` on its own database (``<bench database>_orders``), as deployed:
    fault injection and the testing endpoints off (with them on, every request reads the fault
    rules first: one more transaction a request at the order system). Its rows are seeded by
    its own ``seed_data`` command."""

    def __init__(self, log_dir: Path, database: str) -> None:
        self.database = database
        self.log_path = log_dir / "order-system.log"
        self.base_url = ""
        self.process: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}

    def start(self) -> DeployedOrderSystem:
        recreate_database(self.database)
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "orders.settings",
            "ORDERS_DATABASE_URL": database_url(self.database),
            "ORDERS_FAULTS_ENABLED": "0",
            # As deployed: without Django's debug query log (on by default in development).
            "ORDERS_DEBUG": "0",
            "APPROVAL_GRANT_KEY": settings.APPROVAL_GRANT_KEY,
            "ORDER_WEBHOOK_SECRET": settings.ORDER_WEBHOOK_SECRET,
            "ORDERS_API_TOKEN": settings.ORDER_SYSTEM_TOKEN,
            "ORDERS_WEBHOOK_URL": "",
            "PYTHONUNBUFFERED": "1",
        }
        self.env = env
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(  # noqa: S603 - our own interpreter
                [sys.executable, "-m", "orders", "serve", "--host", "127.0.0.1", "--port", "0"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            output = self.log_path.read_text(errors="replace")
            if match := _READY.search(output):
                self.base_url = match.group(1)
                return self
            if self.process.poll() is not None:
                raise RuntimeError(f"the order system exited: {output[-500:]}")
            time.sleep(0.1)
        raise RuntimeError("the order system did not start within 60s")

    def process_session(self) -> int:
        """The session of the server's process (its own: ``start_new_session``)."""
        if self.process is None:
            raise RuntimeError("the order system is not running")
        return self.process.pid

    def seed(self, **body: list[dict[str, Any]]) -> None:
        """Upsert rows through the order system's ``seed_data`` command, on its database."""
        if self.process is None:
            raise RuntimeError("the order system is not running")
        payload = {key: body.get(key, []) for key in ("accounts", "orders", "slots")}
        done = subprocess.run(  # noqa: S603 - our own interpreter
            [sys.executable, "-m", "orders", "seed_data", "-"],
            cwd=ROOT,
            env=self.env,
            input=json.dumps(payload).encode(),
            capture_output=True,
            check=False,
        )
        if done.returncode:
            raise RuntimeError(f"seeding the order system failed: {done.stderr.decode()[-500:]}")

    def versions(self, order_ids: list[str]) -> dict[str, tuple[int, int]]:
        """(version, applied operations) per order, from the order system's own database."""
        with psycopg.connect(conninfo(self.database)) as conn:
            rows = conn.execute(
                "SELECT o.order_id, o.version, count(a.id) FROM orders_order o "
                "LEFT JOIN orders_appliedoperation a ON a.order_id = o.order_id "
                "WHERE o.order_id = ANY(%s) GROUP BY o.order_id, o.version",
                (order_ids,),
            ).fetchall()
        found = {row[0]: (int(row[1]), int(row[2])) for row in rows}
        missing = set(order_ids) - set(found)
        if missing:
            raise Skip(f"orders missing in the order system: {sorted(missing)[:3]}")
        return found

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process)
            self.process = None

    def check_changed_once(self, made: dict[int, str], before: dict[str, tuple[int, int]]) -> None:
        """Each order changed exactly once, by the order system's own records."""
        after = self.versions(list(made.values()))
        wrong = [
            f"{order_id}: version {before[order_id][0]}→{after[order_id][0]}, "
            f"{after[order_id][1] - before[order_id][1]} applied operations"
            for order_id in made.values()
            if after[order_id][0] != before[order_id][0] + 1
            or after[order_id][1] != before[order_id][1] + 1
        ]
        if wrong:
            raise Skip(f"{len(wrong)} orders not changed exactly once: {wrong[:3]}")

    def check_shows(self, changes: dict[str, dict[str, Any]]) -> None:
        """Each order shows the change applied to it, by the order system's own rows: the
        delivery date, the shipping address, or the cancelled status."""
        with psycopg.connect(conninfo(self.database)) as conn:
            rows = conn.execute(
                "SELECT order_id, status, delivery_date::text, shipping_address "
                "FROM orders_order WHERE order_id = ANY(%s)",
                (list(changes),),
            ).fetchall()
        shown = {row[0]: row[1:] for row in rows}
        wrong = []
        for order_id, change in changes.items():
            status, day, address = shown.get(order_id, (None, None, None))
            kind = change.get("kind")
            if kind == "delivery_date":
                ok = day == change["delivery_date"]
            elif kind == "shipping_address":
                kept = {k: v for k, v in (address or {}).items() if v != ""}
                ok = kept == {k: v for k, v in change["address"].items() if v != ""}
            elif kind == "order_cancellation":
                ok = status == "cancelled"
            else:
                ok = True  # a kind the bench does not know how to read back
            if not ok:
                wrong.append(f"{order_id} ({kind}): {status}, {day}, {address}")
        if wrong:
            raise Skip(f"{len(wrong)} orders do not show their change: {wrong[:3]}")
