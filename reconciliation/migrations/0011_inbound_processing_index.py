"""The inbound events page filtered by processing (failed, pending), newest first, through an
index: ``(processing, received_at, id)``, read backwards. The page walked every event newest
first and skipped those of another state (9,800 of them for a page of failed events at 1M
cases). It replaces the plain ``processing`` index (and its ``_like`` twin), whose lookups it
answers too, as does ``recon_inbound_due``.

On PostgreSQL the index is built and the old ones dropped ``CONCURRENTLY`` in this non-atomic
migration, so webhooks keep arriving meanwhile (``tests/support/migration_lint.py``).
"""

from __future__ import annotations

from importlib import import_module

from django.db import migrations, models

# The cases app's operations (a migration's code never changes once applied, so borrowing it
# is safe): 0014's builds an index concurrently, 0016's drops a field's own index concurrently.
_plain = import_module("cases.migrations.0014_case_ready_due_index")
_drop = import_module("cases.migrations.0016_case_order_covering_index")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0016_case_order_covering_index"),
        ("reconciliation", "0010_inbound_event_list_indexes"),
    ]

    operations = [
        _plain.AddIndexConcurrently(
            model_name="inboundevent",
            index=models.Index(
                fields=["processing", "received_at", "id"], name="recon_inbound_processing"
            ),
        ),
        _drop.DropFieldIndexConcurrently(
            model_name="inboundevent",
            name="processing",
            field=models.CharField(
                choices=[("pending", "Pending"), ("processed", "Processed"), ("failed", "Failed")],
                default="pending",
                max_length=20,
            ),
        ),
    ]
