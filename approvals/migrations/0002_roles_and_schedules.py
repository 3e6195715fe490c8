"""Approval permissions for the role groups, and the periodic tasks (django-q2 schedules)."""

from django.db import migrations

from cases.roles import grant_role_permissions

ROLE_PERMISSIONS = {
    "approver": [
        "approvals.approve_proposal",
        "approvals.view_proposal",
        "approvals.view_approval",
        "approvals.view_operation",
    ],
    "lead": ["approvals.view_proposal", "approvals.view_approval", "approvals.view_operation"],
    "agent": ["approvals.view_proposal", "approvals.view_approval", "approvals.view_operation"],
    "auditor": ["approvals.view_proposal", "approvals.view_approval", "approvals.view_operation"],
}

SCHEDULES = [
    # name, func, minutes
    ("Dispatch due cases", "cases.tasks.dispatch_due", 1),
    ("Return expired approvals to review", "approvals.tasks.expire_approvals", 1),
]


def grant_roles(apps, schema_editor):
    grant_role_permissions(apps, ROLE_PERMISSIONS)


def create_schedules(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    for name, func, minutes in SCHEDULES:
        Schedule.objects.update_or_create(
            name=name,
            defaults={"func": func, "schedule_type": "I", "minutes": minutes, "repeats": -1},
        )


def drop_schedules(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.filter(name__in=[name for name, _f, _m in SCHEDULES]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0001_initial"),
        ("cases", "0002_fencing_sequence_and_roles"),
        ("django_q", "0018_task_success_index"),
    ]

    operations = [
        migrations.RunPython(grant_roles, migrations.RunPython.noop),
        migrations.RunPython(create_schedules, drop_schedules),
    ]
