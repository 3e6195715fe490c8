"""A partial index of the ready cases by due time, for the claim of the next due one
(``reconciliation.claims.claim_next_due``: ``status = 'ready' AND next_check_at <= now ORDER BY
next_check_at … SKIP LOCKED``). The plain ``next_check_at`` index also holds every held,
waiting and closed case whose due time has passed, which the claim would step over one by one.

Built ``CONCURRENTLY`` on PostgreSQL in this non-atomic migration, so cases keep being written
while it builds (``tests/support/migration_lint.py``); a plain index elsewhere.
"""

from __future__ import annotations

import django.contrib.postgres.operations
from django.db import migrations, models


class AddIndexConcurrently(django.contrib.postgres.operations.AddIndexConcurrently):
    """``CREATE INDEX CONCURRENTLY`` on PostgreSQL; a plain ``CREATE INDEX`` elsewhere."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.AddIndex.database_forwards(
                self, app_label, schema_editor, from_state, to_state
            )

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.AddIndex.database_backwards(
                self, app_label, schema_editor, from_state, to_state
            )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0013_list_page_indexes"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="case",
            index=models.Index(
                condition=models.Q(("status", "ready")),
                fields=["next_check_at"],
                name="case_ready_due_idx",
            ),
        ),
    ]
