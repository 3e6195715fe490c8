"""Account events: the customer account's own append-only, hash-chained audit trail.

On PostgreSQL the table gets 0021's ``holdfast_guard_rows()`` with no mutable column: no
UPDATE, DELETE or TRUNCATE except the owner's repair. Accounts that exist keep no history from
before this migration: their first event is the next change.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

CREATE = [
    "CREATE TRIGGER accountevent_append_only BEFORE UPDATE OR DELETE ON cases_accountevent "
    "FOR EACH ROW EXECUTE FUNCTION holdfast_guard_rows()",
    "CREATE TRIGGER accountevent_no_truncate BEFORE TRUNCATE ON cases_accountevent "
    "FOR EACH STATEMENT EXECUTE FUNCTION holdfast_guard_rows()",
]
DROP = [
    "DROP TRIGGER IF EXISTS accountevent_append_only ON cases_accountevent",
    "DROP TRIGGER IF EXISTS accountevent_no_truncate ON cases_accountevent",
]


def create_guards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in CREATE:
            schema_editor.execute(statement, params=None)


def drop_guards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in DROP:
            schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("cases", "0021_append_only_attempts"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="AccountEvent",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "action",
                    models.CharField(
                        help_text="cases.codes.AccountAction, e.g. cases.account.verified",
                        max_length=80,
                    ),
                ),
                ("reason", models.TextField(blank=True)),
                (
                    "actor_label",
                    models.CharField(
                        help_text="Who or what acted: a username, a worker id, or 'system'.",
                        max_length=120,
                    ),
                ),
                ("detail", models.JSONField(blank=True, default=dict)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("prev_hash", models.CharField(blank=True, editable=False, max_length=64)),
                ("hash", models.CharField(editable=False, max_length=64)),
                (
                    "account",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="events",
                        to="cases.customeraccount",
                    ),
                ),
                (
                    "actor",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["account", "id"],
                "base_manager_name": "objects",
                "indexes": [models.Index(fields=["account", "id"], name="account_event_chain_idx")],
            },
        ),
        migrations.RunPython(create_guards, drop_guards),
    ]
