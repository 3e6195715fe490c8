"""One long-lived sweeper replaces the four minute schedules.

The dispatcher, the lease watchdog, approval expiry and the inbound retry ran as django-q2
minute schedules (the scheduler ticks about every 30 s), so a case whose worker died stayed
applying up to a minute past its lease. They now run together in ``reconciliation.sweep``,
every ``SWEEP_INTERVAL_SECONDS`` (derived from the shortest lease), inside one long-lived
sweeper task. Worker processes start it as they spawn; this one minute schedule is the
backstop that restarts it (an extra sweeper finds the lock held and returns at once).
"""

from django.db import migrations

SWEEPER = "Keep the sweeper running"
OLD = [
    # name, func (the schedules of approvals 0002, reconciliation 0003 and 0005)
    ("Dispatch due cases", "reconciliation.tasks.dispatch_due"),
    ("Return expired approvals to review", "approvals.tasks.expire_approvals"),
    ("Hold cases whose worker stopped reporting", "reconciliation.tasks.watchdog"),
    ("Process inbound order events again", "reconciliation.tasks_inbound.retry_failed_events"),
]


def _minutely(func: str) -> dict:
    return {"func": func, "schedule_type": "I", "minutes": 1, "repeats": -1}


def forward(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.filter(name__in=[name for name, _func in OLD]).delete()
    Schedule.objects.update_or_create(
        name=SWEEPER, defaults=_minutely("reconciliation.tasks.sweeper")
    )


def backward(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.filter(name=SWEEPER).delete()
    for name, func in OLD:
        Schedule.objects.update_or_create(name=name, defaults=_minutely(func))


class Migration(migrations.Migration):
    dependencies = [
        ("reconciliation", "0006_inboundevent_account_reference_teamwalls"),
        ("reconciliation", "0005_inbound_retry_schedule"),
        ("reconciliation", "0003_watchdog_schedule"),
        ("approvals", "0002_roles_and_schedules"),
        ("django_q", "0018_task_success_index"),
    ]

    operations = [migrations.RunPython(forward, backward)]
