"""The lease watchdog runs every minute (django-q2's scheduler ticks about every 30 s)."""

from django.db import migrations

NAME = "Hold cases whose worker stopped reporting"


def create(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name=NAME,
        defaults={
            "func": "reconciliation.tasks.watchdog",
            "schedule_type": "I",
            "minutes": 1,
            "repeats": -1,
        },
    )


def drop(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("reconciliation", "0002_role_permissions"),
        ("django_q", "0018_task_success_index"),
    ]

    operations = [migrations.RunPython(create, drop)]
