"""Leads set the follow-up policies; auditors read them."""

from __future__ import annotations

from django.db import migrations

from cases.roles import grant_role_permissions


def grant(apps, schema_editor):
    grant_role_permissions(
        apps,
        {
            "lead": [
                "cases.view_followuppolicy",
                "cases.add_followuppolicy",
                "cases.change_followuppolicy",
            ],
            "auditor": ["cases.view_followuppolicy"],
        },
    )


class Migration(migrations.Migration):
    dependencies = [
        ("cases", "0019_follow_up_indexes"),
    ]

    operations = [migrations.RunPython(grant, migrations.RunPython.noop)]
