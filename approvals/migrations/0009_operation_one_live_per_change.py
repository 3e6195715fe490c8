"""Change kinds, step 3 of 3: one live operation per case, order and whole change.

The new partial unique index ``operation_one_live_per_change`` (case, order, change_hash while
not retired) is built ``CONCURRENTLY`` on PostgreSQL in this non-atomic migration; it replaces
``operation_one_live_per_intent``, which named the date. Every row was unique by date before, so
it is unique by change now. Then the old columns go (0008 moved them; this release reads none of
them: README, "Upgrading to change kinds").
"""

from __future__ import annotations

from importlib import import_module

from django.db import migrations, models
from django.db.models import Q

# cases 0025's operation (a migration's code never changes once applied).
_concurrent = import_module("cases.migrations.0025_case_one_open_per_order_kind")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("approvals", "0008_proposal_operation_change_backfill"),
        ("cases", "0025_case_one_open_per_order_kind"),
    ]

    operations = [
        _concurrent.AddConstraintConcurrently(
            model_name="operation",
            constraint=models.UniqueConstraint(
                condition=Q(retired_at__isnull=True),
                fields=("case", "order_id", "change_hash"),
                name="operation_one_live_per_change",
            ),
        ),
        migrations.RemoveConstraint(
            model_name="operation",
            name="operation_one_live_per_intent",
        ),
        migrations.RemoveField(model_name="operation", name="delivery_date"),
        migrations.RemoveField(model_name="proposal", name="delivery_date"),
        migrations.RemoveField(model_name="proposal", name="slot_note"),
    ]
