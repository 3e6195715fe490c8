"""Give every open case that already waits on a person its follow-up clock, from the default
policy, starting now (the waits began before clocks existed).

Non-atomic and in batches of 500 cases, each batch its own short transaction: only the open
cases that wait on a person are read (a few per thousand cases), and no lock outlives a batch
(``tests/support/migration_lint.py``).
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import migrations, transaction
from django.utils import timezone

BATCH = 500
# As cases.followups.wait_reason, frozen for this migration.
PERSON_WAITS = ("owner", "approvers", "customer")
TERMINAL = ("done", "cancelled", "stopped")
REASON_OF_STATUS = {
    "new": "unverified",
    "preparing_proposal": "draft",
    "awaiting_review": "awaiting_review",
    "proposal_rejected": "rejected",
    "ready": "supervised",
    "held": "held",
    "needs_attention": "needs_attention",
}


def _reason(status: str, waiting_on: str) -> str:
    if waiting_on == "customer":
        return "customer"
    return REASON_OF_STATUS.get(status, "other")


def backfill(apps, schema_editor):
    Case = apps.get_model("cases", "Case")
    now = timezone.now()
    percent = settings.FOLLOW_UP_AT_RISK_PERCENT
    last = 0
    while True:
        with transaction.atomic():
            rows = list(
                Case.objects.filter(
                    pk__gt=last, waiting_on__in=PERSON_WAITS, follow_up_at__isnull=True
                )
                .exclude(status__in=TERMINAL)
                .order_by("pk")
                .values_list("pk", "status", "waiting_on")[:BATCH]
            )
            for pk, status, waiting_on in rows:
                reason = _reason(status, waiting_on)
                minutes = settings.FOLLOW_UP_MINUTES.get(
                    reason, settings.FOLLOW_UP_MINUTES["other"]
                )
                span = dt.timedelta(minutes=minutes)
                Case.objects.filter(pk=pk, follow_up_at__isnull=True).update(
                    follow_up_reason=reason,
                    follow_up_at=now + span,
                    follow_up_risk_at=now + span * (100 - percent) / 100,
                )
        if len(rows) < BATCH:
            return
        last = rows[-1][0]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0017_notifications_and_follow_ups"),
    ]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True)]
