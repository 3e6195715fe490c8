"""``manage.py simulate --schedules N --seed S [--only K]``: randomized fault schedules.

Creates its own databases (Holdfast's and the order system's, ``holdfast_sim_<pid>`` and
``holdfast_sim_<pid>_orders``) on the PostgreSQL server of ``TEST_DATABASE_URL`` (default the
local one), migrates Holdfast's, starts one order system process on the other, runs the
schedules, and drops both databases at the end (also on Ctrl-C). Prints progress every 50
schedules and ends with ``N schedules, V violations`` and the schedules (and applied effects)
per change kind; a failing schedule is printed with its seed, index, kinds and steps, and
replays exactly with ``--seed S --only K``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

DEFAULT_SERVER = "postgres://postgres@127.0.0.1:5432/"


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}", query=""))


def _postgres_settings(url: str) -> dict[str, Any]:
    """The ``DATABASES`` entry for ``postgres://user:pw@host:port/name`` (what the project's
    ``DATABASE_URL`` reader makes of it; simulate runs on PostgreSQL only)."""
    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "CONN_MAX_AGE": 600,
        "CONN_HEALTH_CHECKS": True,
        "OPTIONS": {key: values[-1] for key, values in parse_qs(parts.query).items()},
    }


class Command(BaseCommand):
    help = "Run seeded randomized fault schedules and check every invariant."

    def add_arguments(self, parser):
        parser.add_argument("--schedules", type=int, default=200)
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--only", type=int, default=None, help="replay one schedule")
        parser.add_argument("--show-steps", action="store_true", help="print every step")

    def handle(self, *args, schedules, seed, only, show_steps, **options):
        import psycopg

        server = os.environ.get("TEST_DATABASE_URL") or DEFAULT_SERVER
        if not server.startswith("postgres"):
            raise CommandError("simulate needs PostgreSQL: set TEST_DATABASE_URL to a server.")
        name = f"holdfast_sim_{os.getpid()}"
        admin = _with_database(server, "postgres")
        created: list[str] = []
        orders = None
        started = time.monotonic()
        try:
            with psycopg.connect(admin, autocommit=True) as conn:
                for db in (name, f"{name}_orders"):
                    conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
                    conn.execute(f'CREATE DATABASE "{db}"')
                    created.append(db)
            self._use_database(_with_database(server, name))
            call_command("migrate", verbosity=0, interactive=False)
            orders = _order_system(_with_database(server, f"{name}_orders")).start()
            outcome = self._run(orders, seed, schedules, only, show_steps)
        except KeyboardInterrupt:
            self.stderr.write("Interrupted: dropping the simulation databases.")
            raise
        finally:
            if orders is not None:
                orders.stop()
            connections.close_all()
            if created:
                with psycopg.connect(admin, autocommit=True) as conn:
                    for db in created:
                        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        self.stdout.write(f"wall time {time.monotonic() - started:.1f} s (databases included)")
        self.stdout.write(outcome.summary)
        if outcome.violations:
            raise CommandError(f"{outcome.violations} violations", returncode=1)

    def _use_database(self, url: str) -> None:
        connections.close_all()
        configured = connections.configure_settings({"default": _postgres_settings(url)})
        connections.settings["default"] = configured["default"]
        connections["default"] = connections.create_connection("default")

    def _run(self, orders, seed, schedules, only, show_steps):
        from lab.simulation.runner import (
            run_schedules,
            simulation_settings,
            world_setup,
        )

        indexes = [only] if only is not None else range(schedules)
        label = f"schedule {only}" if only is not None else f"{schedules} schedules"
        self.stdout.write(f"Simulating {label} of seed {seed} against {orders.base_url}")
        with simulation_settings(orders, orders.grant_key):
            world = world_setup(orders)
            outcome = run_schedules(
                orders=orders,
                seed=seed,
                indexes=indexes,
                world=world,
                progress=self.stdout.write,
                show_steps=show_steps,
            )
        self.stdout.write(f"{outcome.summary} in {outcome.seconds:.1f} s")
        self.stdout.write(outcome.per_kind)
        return outcome


def _order_system(database_url: str):
    """The reference order system as a process on its own database (the lab's launcher, which
    the tests use too: the simulation's fault API and /_testing/ calls are written for it)."""
    from lab.order_system import OrderSystemProcess

    class SimulationOrderSystem(OrderSystemProcess):
        def _create_database(self, workdir: Path) -> str:
            return database_url

        def _drop_database(self) -> None:  # the command drops it
            return None

    return SimulationOrderSystem()
