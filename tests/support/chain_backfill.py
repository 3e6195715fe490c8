"""Drive ``cases`` 0010 (the audit chain's backfill) on a scratch database, in steps.

Run as ``python -m tests.support.chain_backfill STEP [EVENTS]`` with ``DATABASE_URL`` naming a
scratch PostgreSQL database:

- ``seed EVENTS``: migrate to ``cases`` 0009, insert one round of realistic rows
  (``migration_walk.Seeder``) and copy their events until the log holds about EVENTS events;
- ``migrate``: apply ``cases`` 0010 alone, as ``manage.py migrate`` would;
- ``finish``: apply every remaining migration and run ``manage.py audit_verify``.

``tests/cases/test_audit_chain.py`` runs ``migrate`` in a child process while it measures,
from its own connection, whether a writer can take the lock an INSERT or UPDATE of events
needs (``lock_measure.writers_blocked``).
"""

from __future__ import annotations

import sys

from tests.support.migration_walk import Seeder, setup


def _migrate(target: list[tuple[str, str]] | None) -> None:
    from django.core.management import call_command

    if target is None:
        call_command("migrate", verbosity=0)
        return
    for app, name in target:
        call_command("migrate", app, name, verbosity=0)


def seed(events: int) -> None:
    from django.db import connection, transaction
    from django.db.migrations.executor import MigrationExecutor

    _migrate([("cases", "0009_queues")])
    state = MigrationExecutor(connection).loader.project_state(("cases", "0009_queues"))
    with transaction.atomic():
        Seeder("chain").round(state.apps, "0")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM cases_caseevent")
        (have,) = cursor.fetchone()
        copies = max(0, events // max(have, 1) - 1)
        columns = (
            "case_id, action, from_status, to_status, reason, actor_id, actor_label, version, "
            "detail, created_at"
        )
        cursor.execute(
            f"INSERT INTO cases_caseevent ({columns}) SELECT {columns} "  # noqa: S608 - constants
            "FROM cases_caseevent, generate_series(1, %s)",
            [copies],
        )
        cursor.execute("ANALYZE cases_caseevent")


def main(argv: list[str]) -> int:
    setup()
    step = argv[0]
    if step == "seed":
        seed(int(argv[1]))
    elif step == "migrate":
        _migrate([("cases", "0010_caseevent_hash_chain")])
    elif step == "finish":
        from django.core.management import call_command

        _migrate(None)
        call_command("audit_verify", verbosity=0)
    else:
        raise SystemExit(f"unknown step {step!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
