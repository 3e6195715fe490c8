"""Trigram indexes for the desk's search by case reference, order id and account reference.

The admin searches these fields with ``icontains`` (``UPPER(col::text) LIKE UPPER('%q%')``);
a GIN index of ``UPPER(col)`` with ``gin_trgm_ops`` answers that, and a prefix search, without
reading the whole table. (Exact lookups already use the fields' unique or ``db_index`` b-trees.)

On PostgreSQL the indexes are built ``CONCURRENTLY`` in this non-atomic migration, so the desk
keeps writing cases while they build (``tests/support/migration_lint.py``). Other databases
(SQLite) have neither GIN nor trigrams: there the operations change only the migration state.
"""

from __future__ import annotations

import django.contrib.postgres.indexes
import django.contrib.postgres.operations
import django.db.models.functions.text
from django.db import migrations


class AddIndexConcurrently(django.contrib.postgres.operations.AddIndexConcurrently):
    """``CREATE INDEX CONCURRENTLY`` on PostgreSQL; no index elsewhere (state only)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


class TrigramExtension(django.contrib.postgres.operations.TrigramExtension):
    """``CREATE EXTENSION pg_trgm`` on PostgreSQL; nothing elsewhere, either way (Django's
    operation skips other databases going forward but not going back)."""

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


def _trigram(field: str, name: str) -> django.contrib.postgres.indexes.GinIndex:
    return django.contrib.postgres.indexes.GinIndex(
        django.contrib.postgres.indexes.OpClass(
            django.db.models.functions.text.Upper(field), name="gin_trgm_ops"
        ),
        name=name,
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0011_case_retry_counts"),
    ]

    operations = [
        TrigramExtension(),
        AddIndexConcurrently(model_name="case", index=_trigram("reference", "case_reference_trgm")),
        AddIndexConcurrently(model_name="case", index=_trigram("order_id", "case_order_id_trgm")),
        AddIndexConcurrently(
            model_name="customeraccount", index=_trigram("reference", "account_reference_trgm")
        ),
    ]
