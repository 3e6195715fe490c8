"""The case's follow-up clock (overdue and at-risk lists, the reminders' sweep: partial, so
only the cases that wait on a person) and who opened it (Django's PROTECT check when a user is
deleted). Built ``CONCURRENTLY`` on PostgreSQL in this non-atomic migration, so cases keep
being written while they build; a plain index elsewhere.
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
        ("cases", "0018_follow_up_backfill"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="case",
            index=models.Index(
                condition=models.Q(("follow_up_at__isnull", False)),
                fields=["follow_up_at"],
                name="case_follow_up_idx",
            ),
        ),
        AddIndexConcurrently(
            model_name="case",
            index=models.Index(fields=["opened_by"], name="case_opened_by_idx"),
        ),
    ]
