"""Drop the foreign-key indexes that a longer index starts with.

Each of these answered nothing the longer index of its table, on the same leading column, does
not, and every insert (and every update of the row that is not HOT) paid for it:

- the case's team: ``case_number_per_team`` (team, number);
- the attempt's case: ``attempt_seq_per_case`` (case, sequence), one attempt an apply;
- the account event's account: ``account_event_chain_idx`` (account, id);
- the notification's event: ``notification_once_per_event_and_recipient`` (event, recipient).

(The events' case went in 0030; the operation's case goes in ``approvals`` 0010.)
``tests/cases/test_list_scaling.py`` holds that no index of a table is the start of another.

On PostgreSQL the indexes are dropped ``CONCURRENTLY`` in this non-atomic migration; undoing
builds them again (``cases`` 0016's operation).
"""

from __future__ import annotations

from importlib import import_module

import django.db.models.deletion
from django.db import migrations, models

# 0016's operation (drop a field's own index, concurrently on PostgreSQL): a migration's code
# never changes once applied, so borrowing it is safe.
_drop = import_module("cases.migrations.0016_case_order_covering_index")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0030_event_action_case_index"),
    ]

    operations = [
        _drop.DropFieldIndexConcurrently(
            model_name="case",
            name="team",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="cases",
                to="cases.team",
            ),
        ),
        _drop.DropFieldIndexConcurrently(
            model_name="attempt",
            name="case",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="attempts",
                to="cases.case",
            ),
        ),
        _drop.DropFieldIndexConcurrently(
            model_name="accountevent",
            name="account",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="events",
                to="cases.customeraccount",
            ),
        ),
        _drop.DropFieldIndexConcurrently(
            model_name="notification",
            name="event",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="cases.caseevent",
            ),
        ),
    ]
