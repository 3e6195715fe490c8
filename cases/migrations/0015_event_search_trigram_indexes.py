"""Trigram indexes for the events page's search.

The events page searches the case reference, the reason and the actor (``CaseEventAdmin``),
field by field (``cases.admin.search``): the case reference through 0012's index on the cases,
the reason and the actor through these ``UPPER(col) gin_trgm_ops`` indexes. Without them the
search read every event: 1.4 s at 1M cases (2M events) against 35 ms at 10k.

On PostgreSQL the indexes are built ``CONCURRENTLY`` in this non-atomic migration, so the desk
keeps writing events while they build (``tests/support/migration_lint.py``). Other databases
(SQLite) have neither GIN nor trigrams: there the operations change only the migration state.
"""

from __future__ import annotations

from importlib import import_module

from django.db import migrations

# 0013's operation (``CREATE INDEX CONCURRENTLY`` on PostgreSQL, state only elsewhere) and its
# trigram index: a migration's code never changes once applied, so borrowing it is safe.
_0013 = import_module("cases.migrations.0013_list_page_indexes")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0014_case_ready_due_index"),
    ]

    operations = [
        _0013.AddIndexConcurrently(
            model_name="caseevent", index=_0013._trigram("reason", "event_reason_trgm")
        ),
        _0013.AddIndexConcurrently(
            model_name="caseevent",
            index=_0013._trigram("actor_label", "event_actor_label_trgm"),
        ),
    ]
