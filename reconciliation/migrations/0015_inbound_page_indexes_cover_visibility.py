"""The inbound events page's two indexes carry the order and the account (``INCLUDE``).

``inbound_events_for`` checks, for every event a page shows or counts, whether a case of the
caller's teams is on the event's order and of its account; with both columns in the index the
page's bounded count reads the events from the index alone. At 1M cases the lead's count of the
failed events took 11.7 ms, against 25.2 ms through a scan of the table (``make bench``: the
failed page went from 1.45× to 1.19× its time at 10k).

Each index is dropped and built again under its own name, ``CONCURRENTLY`` on PostgreSQL in
this non-atomic migration, so receipts keep arriving meanwhile (``tests/support/migration_lint``);
on other databases (SQLite, which ignores the included columns) the plain operations run.
"""

from __future__ import annotations

from importlib import import_module

from django.contrib.postgres import operations as postgres
from django.db import migrations, models

# cases 0014's operation: CREATE INDEX CONCURRENTLY on PostgreSQL, a plain CREATE INDEX
# elsewhere (a migration's code never changes once applied, so borrowing it is safe).
AddIndexConcurrently = import_module(
    "cases.migrations.0014_case_ready_due_index"
).AddIndexConcurrently


class RemoveIndexConcurrently(postgres.RemoveIndexConcurrently):
    """``DROP INDEX CONCURRENTLY`` on PostgreSQL, a plain ``DROP INDEX`` elsewhere (the
    counterpart of cases 0014's ``AddIndexConcurrently``)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.RemoveIndex.database_forwards(
                self, app_label, schema_editor, from_state, to_state
            )

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.RemoveIndex.database_backwards(
                self, app_label, schema_editor, from_state, to_state
            )


COVERED = ("order_id", "account_id")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("reconciliation", "0014_profile_kind_autonomy"),
    ]

    operations = [
        RemoveIndexConcurrently(model_name="inboundevent", name="recon_inbound_received"),
        AddIndexConcurrently(
            model_name="inboundevent",
            index=models.Index(
                fields=["received_at", "id"], include=COVERED, name="recon_inbound_received"
            ),
        ),
        RemoveIndexConcurrently(model_name="inboundevent", name="recon_inbound_processing"),
        AddIndexConcurrently(
            model_name="inboundevent",
            index=models.Index(
                fields=["processing", "received_at", "id"],
                include=COVERED,
                name="recon_inbound_processing",
            ),
        ),
    ]
