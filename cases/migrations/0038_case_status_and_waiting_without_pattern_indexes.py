"""The case's status and who it waits on keep their plain index and lose Django's pattern one.

As ``db_index=True`` text fields, each had two indexes on PostgreSQL: the b-tree named after the
field and a ``varchar_pattern_ops`` twin (``…_like``) that only a ``LIKE 'prefix%'`` can use. No
query matches a status or a wait by pattern, and every update that moves a case writes an entry
into both (a claim, an answer and a close each move the case, so six entries per apply went
into indexes nothing reads). The models now declare the plain index in ``Meta.indexes`` under
the name Django gave it, which leaves the database's b-tree as it is; only the twins go.

The case reference keeps its twin: the case numbering reads it (``reference__startswith``,
``cases.references``).

State and database are separated: the state moves the index from the field to ``Meta``
(nothing to do in the database), the database drops the twins ``CONCURRENTLY`` (non-atomic
migration, cases keep being written meanwhile). PostgreSQL only: other databases never had
them.
"""

from __future__ import annotations

import django_fsm
from django.db import migrations, models

TWINS = {
    "cases_case_status_95787cb3_like": "status",
    "cases_case_waiting_on_9b7ec905_like": "waiting_on",
}


def _drop_twins(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in TWINS:
        schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')


def _build_twins(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, column in TWINS.items():
        schema_editor.execute(
            f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{name}" '
            f'ON "cases_case" ("{column}" varchar_pattern_ops)'
        )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0037_attempt_guard_runs_only_for_identity_changes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="case",
                    name="status",
                    field=django_fsm.FSMField(
                        choices=[
                            ("new", "New"),
                            ("waiting_source", "Waiting for the order source"),
                            ("preparing_proposal", "Preparing a proposal"),
                            ("awaiting_review", "Awaiting review"),
                            ("proposal_rejected", "Rejected: a person prepares another proposal"),
                            ("ready", "Ready to apply"),
                            ("applying", "Applying"),
                            ("held", "Held: the outcome is unknown"),
                            ("needs_attention", "Needs attention"),
                            ("done", "Done"),
                            ("cancelled", "Cancelled"),
                            ("stopped", "Stopped"),
                        ],
                        default="new",
                        max_length=30,
                        protected=True,
                    ),
                ),
                migrations.AlterField(
                    model_name="case",
                    name="waiting_on",
                    field=models.CharField(
                        choices=[
                            ("nobody", "Nobody"),
                            ("order_system", "The order system"),
                            ("approvers", "The team's approvers"),
                            ("owner", "The responsible person"),
                            ("customer", "The customer"),
                            ("worker", "A background worker"),
                        ],
                        default="nobody",
                        max_length=20,
                    ),
                ),
                migrations.AddIndex(
                    model_name="case",
                    index=models.Index(fields=["status"], name="cases_case_status_95787cb3"),
                ),
                migrations.AddIndex(
                    model_name="case",
                    index=models.Index(
                        fields=["waiting_on"], name="cases_case_waiting_on_9b7ec905"
                    ),
                ),
            ],
            database_operations=[
                migrations.RunPython(_drop_twins, _build_twins, elidable=False),
            ],
        ),
    ]
