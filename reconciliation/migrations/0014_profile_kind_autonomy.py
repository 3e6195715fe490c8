"""Autonomy per change kind: the probe proves each kind on its own.

Profiles probed before change kinds probed the delivery date change alone: each keeps its
autonomy for that kind and no other (every other kind is review-only until probed again). The
profile table holds one row per probe run: a small table, changed in one transaction.
"""

from __future__ import annotations

from django.db import migrations, models


def forwards(apps, schema_editor):
    Profile = apps.get_model("reconciliation", "OrderSystemProfile")
    for profile in Profile.objects.all():
        profile.kind_autonomy = {"delivery_date": profile.autonomy}
        profile.save(update_fields=["kind_autonomy"])


class Migration(migrations.Migration):
    dependencies = [
        ("reconciliation", "0013_drillrun_moves_to_lab"),
    ]

    operations = [
        migrations.AddField(
            model_name="ordersystemprofile",
            name="kind_autonomy",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="Per change kind code: the autonomy the probe proved for that kind "
                "(the system's autonomy when the kind is listed and its own checks passed, "
                "review-only otherwise). A kind not named here is review-only.",
            ),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
