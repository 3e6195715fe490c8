"""Drop the operation's case index: ``operation_seq_per_case`` (case, sequence) starts with it
and answers every look by case, so each new operation updated one index for nothing (``cases``
0031 says the rest). Dropped ``CONCURRENTLY`` on PostgreSQL in this non-atomic migration."""

from __future__ import annotations

from importlib import import_module

import django.db.models.deletion
from django.db import migrations, models

# ``cases`` 0016's operation (drop a field's own index, concurrently on PostgreSQL): a
# migration's code never changes once applied, so borrowing it is safe.
_drop = import_module("cases.migrations.0016_case_order_covering_index")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("approvals", "0009_operation_one_live_per_change"),
        ("cases", "0031_drop_indexes_a_longer_one_starts_with"),
    ]

    operations = [
        _drop.DropFieldIndexConcurrently(
            model_name="operation",
            name="case",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="operations",
                to="cases.case",
            ),
        ),
    ]
