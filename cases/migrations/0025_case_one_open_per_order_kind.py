"""Change kinds, step 3 of 3: one open case per order and kind, and the old date columns go.

The partial unique index ``case_one_open_per_order_kind`` (account, order, kind while the case is
not done, cancelled or stopped) is built ``CONCURRENTLY`` on PostgreSQL in this non-atomic
migration, so cases keep being written meanwhile. Before it, two open cases for the same order
and kind were possible (both approved and both written); if any remain the migration stops and
names them: a person settles or cancels all but one, then migrates again (nothing is closed
behind anyone's back, and no invalid index is left behind).

``requested_date`` and ``order_delivery_date_seen`` are dropped: 0024 moved them into ``change``
and ``order_seen``, and this release reads neither (README, "Upgrading to change kinds": the
previous release's processes are stopped before ``migrate``).
"""

from __future__ import annotations

from django.db import migrations, models
from django.db.models import Count, Q

CLOSED = ["done", "cancelled", "stopped"]


class AddConstraintConcurrently(migrations.AddConstraint):
    """A partial ``UniqueConstraint`` as ``CREATE UNIQUE INDEX CONCURRENTLY`` on PostgreSQL
    (the index is the constraint: Django makes a conditional unique constraint an index);
    Django's own elsewhere. Backwards, ``DROP INDEX CONCURRENTLY``."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return None
        sql = str(self.constraint.create_sql(model, schema_editor))
        if not sql.startswith("CREATE UNIQUE INDEX "):
            raise ValueError(f"not a unique index: {sql}")
        schema_editor.execute(
            sql.replace("CREATE UNIQUE INDEX ", "CREATE UNIQUE INDEX CONCURRENTLY ", 1)
        )
        return None

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        name = schema_editor.quote_name(self.constraint.name)
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        return None


def refuse_duplicates(apps, schema_editor):
    Case = apps.get_model("cases", "Case")
    twice = (
        Case.objects.exclude(status__in=CLOSED)
        .values("account_id", "order_id", "kind")
        .annotate(n=Count("pk"))
        .filter(n__gt=1)
    )
    found = []
    for group in twice[:20]:
        references = Case.objects.exclude(status__in=CLOSED).filter(
            account_id=group["account_id"], order_id=group["order_id"], kind=group["kind"]
        )
        found.append(
            f"{group['order_id']} ({group['kind']}): "
            + ", ".join(references.order_by("number").values_list("reference", flat=True))
        )
    if found:
        raise RuntimeError(
            "Open cases ask for the same kind of change to the same order; settle, cancel or "
            "stop all but one of each, then migrate again: " + "; ".join(found)
        )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0024_case_change_kinds_backfill"),
    ]

    operations = [
        migrations.RunPython(refuse_duplicates, migrations.RunPython.noop),
        AddConstraintConcurrently(
            model_name="case",
            constraint=models.UniqueConstraint(
                condition=~Q(status__in=CLOSED),
                fields=("account", "order_id", "kind"),
                name="case_one_open_per_order_kind",
            ),
        ),
        migrations.RemoveField(model_name="case", name="requested_date"),
        migrations.RemoveField(model_name="case", name="order_delivery_date_seen"),
    ]
