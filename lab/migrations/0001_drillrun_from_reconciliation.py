"""The lab takes over ``DrillRun`` from reconciliation (its 0008) with the table and rows kept.

The model enters the lab's migration state on the existing table ``reconciliation_drillrun``
(nothing is created in the database). Its content type moves from ``reconciliation`` to
``lab`` with its permissions, so the lead's "view drill run" (reconciliation 0009) stays
granted and the admin's links to the runs keep working.
"""

from django.db import migrations, models

OLD, NEW, MODEL = "reconciliation", "lab", "drillrun"


def content_type_move(apps, schema_editor, source: str, target: str) -> None:
    """Move the model's content type from ``source`` to ``target``. When ``target`` has one
    already (created after a ``migrate`` that ran before this step), the grants of the source's
    permissions move to the target's permissions of the same codename, and the source's content
    type and permissions go."""
    content_type = apps.get_model("contenttypes", "ContentType")
    permission = apps.get_model("auth", "Permission")
    alias = schema_editor.connection.alias
    types = content_type.objects.using(alias)
    old = types.filter(app_label=source, model=MODEL).first()
    if old is None:
        return
    new = types.filter(app_label=target, model=MODEL).first()
    if new is None:
        old.app_label = target
        old.save(update_fields=["app_label"])
        return
    for perm in permission.objects.using(alias).filter(content_type=old):
        same = permission.objects.using(alias).filter(content_type=new, codename=perm.codename)
        kept = same.first()
        if kept is None:
            perm.content_type = new
            perm.save(update_fields=["content_type"])
            continue
        for group in perm.group_set.all():
            group.permissions.add(kept)
        for user in perm.user_set.all():
            user.user_permissions.add(kept)
        perm.delete()
    old.delete()


def forwards(apps, schema_editor):
    content_type_move(apps, schema_editor, OLD, NEW)


def backwards(apps, schema_editor):
    content_type_move(apps, schema_editor, NEW, OLD)


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("reconciliation", "0009_lead_views_drill_runs_drills"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="DrillRun",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("started_at", models.DateTimeField()),
                        ("finished_at", models.DateTimeField()),
                        ("order_system_url", models.CharField(blank=True, max_length=300)),
                        (
                            "results",
                            models.JSONField(
                                default=list, help_text="One entry per scenario, with evidence."
                            ),
                        ),
                        ("passed", models.PositiveIntegerField(default=0)),
                        ("failed", models.PositiveIntegerField(default=0)),
                        (
                            "other",
                            models.PositiveIntegerField(
                                default=0, help_text="Skipped or not implemented."
                            ),
                        ),
                        ("json_path", models.CharField(blank=True, max_length=500)),
                        ("html_path", models.CharField(blank=True, max_length=500)),
                    ],
                    options={
                        "db_table": "reconciliation_drillrun",
                        "ordering": ["-started_at", "-id"],
                    },
                )
            ],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
