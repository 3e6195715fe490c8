"""Retry inbound events whose processing failed (or was never picked up) every minute."""

from django.db import migrations

NAME = "Process inbound order events again"


def create(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name=NAME,
        defaults={
            "func": "reconciliation.tasks_inbound.retry_failed_events",
            "schedule_type": "I",
            "minutes": 1,
            "repeats": -1,
        },
    )


def drop(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("reconciliation", "0004_inboundevent"),
        ("django_q", "0018_task_success_index"),
    ]

    operations = [migrations.RunPython(create, drop)]
