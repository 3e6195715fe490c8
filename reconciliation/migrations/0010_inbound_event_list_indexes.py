"""Indexes that keep the inbound events page flat however many webhooks arrived.

- Its order, newest first: ``(received_at, id)``, read backwards; without it the page sorted
  every event it may show.
- Its search, field by field (``cases.admin.search``): ``UPPER(col) gin_trgm_ops`` trigram
  indexes on the event id and the order id.

On PostgreSQL the indexes are built ``CONCURRENTLY`` in this non-atomic migration, so webhooks
keep arriving while they build (``tests/support/migration_lint.py``). Other databases (SQLite)
get the ordering index; they have neither GIN nor trigrams.
"""

from __future__ import annotations

from importlib import import_module

from django.db import migrations, models

# The cases app's operations (a migration's code never changes once applied, so borrowing it
# is safe): 0013's builds an index on PostgreSQL only (the trigram indexes), 0014's a plain
# index elsewhere too.
_trigram = import_module("cases.migrations.0013_list_page_indexes")
_plain = import_module("cases.migrations.0014_case_ready_due_index")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0014_case_ready_due_index"),
        ("reconciliation", "0009_lead_views_drill_runs_drills"),
    ]

    operations = [
        _plain.AddIndexConcurrently(
            model_name="inboundevent",
            index=models.Index(fields=["received_at", "id"], name="recon_inbound_received"),
        ),
        _trigram.AddIndexConcurrently(
            model_name="inboundevent",
            index=_trigram._trigram("event_id", "recon_inbound_event_trgm"),
        ),
        _trigram.AddIndexConcurrently(
            model_name="inboundevent",
            index=_trigram._trigram("order_id", "recon_inbound_order_trgm"),
        ),
    ]
