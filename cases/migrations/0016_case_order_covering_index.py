"""An order's cases with their account and team, from the index alone.

Who may see an inbound event is decided per event (``reconciliation.selectors.
inbound_events_for``): whether one of the event's order's cases is of the event's account and
of the person's teams. ``case_order_idx`` on ``(order_id, account_id, team_id)`` answers that
with one look, in the order the events' orders come (recent events, recent orders), and reads
no case row. Through the account (its cases by the foreign key's plain index, then each case
row) it took 0.02 ms an event at 1M cases, 83 ms to count the past week's events a lead may see
against 16 ms (``make bench``'s inbound pages).

The new index answers every lookup by order id, so the field's own indexes (the plain one and
its ``_like`` twin, for ``LIKE 'x%'``, which nothing asks: the search goes through the trigram
index) go; so does the account's foreign-key index, which ``case_unique_request_key_per_account``
(account first) already is. A case write updates two indexes fewer than before.

On PostgreSQL the new index is built and the old ones dropped ``CONCURRENTLY`` in this
non-atomic migration, so the desk keeps writing cases meanwhile
(``tests/support/migration_lint.py``).
"""

from __future__ import annotations

from importlib import import_module

import django.db.models.deletion
from django.db import migrations, models

# 0014's operation: CREATE INDEX CONCURRENTLY on PostgreSQL, a plain CREATE INDEX elsewhere (a
# migration's code never changes once applied, so borrowing it is safe).
_plain = import_module("cases.migrations.0014_case_ready_due_index")


class DropFieldIndexConcurrently(migrations.AlterField):
    """An ``AlterField`` that only turns the field's ``db_index`` off, by dropping each index
    Django made for the field alone (the plain one and, for text on PostgreSQL, its ``_like``
    twin): ``CONCURRENTLY`` on PostgreSQL, so writes go on. (Not SQLite's ``AlterField``: it
    rebuilds the table with every index of the model's state, trigram ones included, which
    SQLite cannot build.) Backwards, the indexes are built again (plainly: undoing is rare)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        model = from_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        field = model._meta.get_field(self.name)
        names = schema_editor._constraint_names(
            model,
            [field.column],
            index=True,
            unique=False,
            primary_key=False,
            exclude={index.name for index in model._meta.indexes},
        )
        concurrently = "CONCURRENTLY " if schema_editor.connection.vendor == "postgresql" else ""
        for name in names:
            schema_editor.execute(
                f"DROP INDEX {concurrently}IF EXISTS {schema_editor.quote_name(name)}"
            )

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        model = to_state.apps.get_model(app_label, self.model_name)  # the field indexed again
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        field = model._meta.get_field(self.name)
        statements = [schema_editor._create_index_sql(model, fields=[field])]
        if schema_editor.connection.vendor == "postgresql":
            statements.append(schema_editor._create_like_index_sql(model, field))
        for statement in statements:
            if statement is not None:
                schema_editor.execute(statement)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0015_event_search_trigram_indexes"),
    ]

    operations = [
        _plain.AddIndexConcurrently(
            model_name="case",
            index=models.Index(fields=["order_id", "account", "team"], name="case_order_idx"),
        ),
        DropFieldIndexConcurrently(
            model_name="case",
            name="order_id",
            field=models.CharField(max_length=60),
        ),
        DropFieldIndexConcurrently(
            model_name="case",
            name="account",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="cases",
                to="cases.customeraccount",
            ),
        ),
    ]
