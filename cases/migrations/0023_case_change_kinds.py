"""Change kinds, step 1 of 3 (the schema): a case asks for a ``kind`` and a ``change``.

``kind`` and ``change`` are added with constant defaults (no table rewrite on PostgreSQL 11+;
every existing case is a delivery date case), ``order_seen`` as an empty column, and the old
``requested_date`` becomes nullable so that 0025 can drop it and undo it. The rows are moved by
0024 in batches, outside this migration's locks (``tests/support/migration_lint.py``).

SQLite rebuilds a table to add a NOT NULL column or to alter one, and the case table's state
holds PostgreSQL-only trigram indexes a rebuild cannot make (0012): there the columns are added
in place (``ALTER TABLE … ADD COLUMN … NOT NULL DEFAULT``) and the nullable date is a state
change only. The operations below are borrowed by later migrations (a migration's code never
changes once applied).
"""

from __future__ import annotations

from django.db import migrations, models


class AddFieldInPlace(migrations.AddField):
    """``AddField``; on SQLite an ``ALTER TABLE … ADD COLUMN`` with the default inlined, never
    a table rebuild. (The column keeps its default there: SQLite cannot drop one.)"""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "sqlite":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return None
        # The operation's own field: the state's has no default once ``preserve_default`` is
        # False, and the rows there need one.
        field = self.field.clone()
        field.set_attributes_from_name(self.name)
        definition, params = schema_editor.column_sql(model, field, include_default=True)
        schema_editor.execute(
            f"ALTER TABLE {schema_editor.quote_name(model._meta.db_table)} "
            f"ADD COLUMN {schema_editor.quote_name(field.column)} {definition}",
            params,
        )
        return None


class AlterNullInState(migrations.AlterField):
    """``AlterField`` that only drops or restores NOT NULL: done on PostgreSQL (a catalog
    change), state only on SQLite (whose rebuild would fail, see the module docstring)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "sqlite":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "sqlite":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):
    dependencies = [
        ("cases", "0022_account_events"),
    ]

    operations = [
        AddFieldInPlace(
            model_name="case",
            name="kind",
            field=models.CharField(
                default="delivery_date",
                help_text="The code of the change kind asked for (``cases.kinds``).",
                max_length=40,
            ),
            preserve_default=False,
        ),
        AddFieldInPlace(
            model_name="case",
            name="change",
            field=models.JSONField(
                default=dict,
                help_text="The change the customer asked for, whole, in its kind's canonical form.",
            ),
        ),
        migrations.AddField(
            model_name="case",
            name="order_seen",
            field=models.JSONField(
                blank=True,
                help_text="The order's current value of the case's kind at the last source "
                "check (the kind's ``seen``): the evidence a reversal goes back to.",
                null=True,
            ),
        ),
        AlterNullInState(
            model_name="case",
            name="requested_date",
            field=models.DateField(
                help_text="The delivery date the customer asked for.", null=True
            ),
        ),
    ]
