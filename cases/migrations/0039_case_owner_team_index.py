"""The case's owner is indexed with its team, in place of the owner's own index.

The lists' filter by owner reads the cases of one owner in the person's teams, and its count
stops at 1,001 (``cases.paging``). Through the owner's index alone each case's team was read in
the table; the planner chose to scan the table instead: at 1M cases the count of one owner's
cases read 34,548 cases (10.9 ms, against 1.0 ms at 10k cases). With the team in the index it
reads 1,001 index entries and nothing else. The new index serves every look by owner (the
owner is its first column), so the owner's own index goes, and an update writes no more index
entries than before.

As 0038: non-atomic, the new index built and the old dropped ``CONCURRENTLY`` on PostgreSQL,
so cases keep being written meanwhile; plain statements elsewhere.
"""

from __future__ import annotations

from importlib import import_module

from django.conf import settings
from django.db import migrations, models

AddIndexConcurrently = import_module(
    "cases.migrations.0014_case_ready_due_index"
).AddIndexConcurrently

OWNER_INDEX = "cases_case_owner_id_352cf2f7"  # the name Django gave the foreign key's index


def _drop_owner_index(apps, schema_editor):
    concurrently = "CONCURRENTLY " if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(f'DROP INDEX {concurrently}IF EXISTS "{OWNER_INDEX}"')


def _build_owner_index(apps, schema_editor):
    concurrently = "CONCURRENTLY " if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(
        f'CREATE INDEX {concurrently}IF NOT EXISTS "{OWNER_INDEX}" ON "cases_case" ("owner_id")'
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0038_case_status_and_waiting_without_pattern_indexes"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="case",
            index=models.Index(fields=["owner", "team"], name="case_owner_team_idx"),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="case",
                    name="owner",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=models.deletion.PROTECT,
                        related_name="owned_cases",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            database_operations=[
                migrations.RunPython(_drop_owner_index, _build_owner_index),
            ],
        ),
    ]
