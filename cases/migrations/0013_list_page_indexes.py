"""Indexes that keep the desk's list pages flat however many cases there are.

- The search asks each field's index in turn (``cases.admin.search``): besides 0012's case
  reference, order id and account reference, the case changelist also searches the request key
  and the account name, so they get the same ``UPPER(col) gin_trgm_ops`` trigram indexes.

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
        ("cases", "0012_search_trigram_indexes"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="case", index=_trigram("request_key", "case_request_key_trgm")
        ),
        AddIndexConcurrently(
            model_name="customeraccount", index=_trigram("name", "account_name_trgm")
        ),
    ]
