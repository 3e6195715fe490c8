"""The events page filtered by action counts through an index of its own.

The events list filtered by action counts at most ``COUNT_CAP`` + 1 of the lead's events
(``cases.paging``): ``… JOIN cases_case … WHERE team_id IN (…) AND action = … LIMIT 1001``.
Through the case's foreign-key index alone, PostgreSQL weighed a merge with the cases' key
(stops at the cap) against a hash of every case of the team (a quarter of the table) within
10% of each other at 20k cases, and sometimes chose the hash (``tests/cases/
test_list_scaling.py``). ``event_action_case_idx`` on ``(action, case_id)`` gives one action's
events in case order from the index alone, and the merge is the cheaper by a third.

The foreign key's own index goes: ``cases_event_chain_idx`` ``(case_id, id)`` already answers
every look by case, so an event insert updates as many indexes as before.

On PostgreSQL the index is built and the old one dropped ``CONCURRENTLY`` in this non-atomic
migration, so the desk keeps writing events meanwhile (``tests/support/migration_lint.py``).
"""

from __future__ import annotations

from importlib import import_module

import django.db.models.deletion
from django.db import migrations, models

# 0014's operation (CREATE INDEX CONCURRENTLY on PostgreSQL, a plain CREATE INDEX elsewhere)
# and 0016's (drop a field's own index, concurrently on PostgreSQL): a migration's code never
# changes once applied, so borrowing it is safe.
_plain = import_module("cases.migrations.0014_case_ready_due_index")
_drop = import_module("cases.migrations.0016_case_order_covering_index")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0029_case_fulltext_search_indexes"),
    ]

    operations = [
        _plain.AddIndexConcurrently(
            model_name="caseevent",
            index=models.Index(fields=["action", "case"], name="event_action_case_idx"),
        ),
        _drop.DropFieldIndexConcurrently(
            model_name="caseevent",
            name="case",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="events",
                to="cases.case",
            ),
        ),
    ]
