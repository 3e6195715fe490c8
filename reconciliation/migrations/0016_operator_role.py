"""The operator role: the inbound events no team owns yet (an event whose order's account could
not be read, the order system down being the usual cause), which only a superuser saw, and the
order system's capability probe. The webhook backlog alert counts those events; the operator
who gets it can now look at them without a superuser's login. And the auditor, who sees
everything of the team, reads the team's order events (a held case's page said "no order event
has arrived that you may see" beside a timeline that recorded one)."""

from django.db import migrations

from cases.roles import grant_role_permissions


def grant_roles(apps, schema_editor):
    grant_role_permissions(
        apps,
        {
            "operator": [
                "reconciliation.view_unowned_inboundevent",
                "reconciliation.view_ordersystemprofile",
                "reconciliation.run_probe",
            ],
            # The auditor reads the team's order events (read only: no "process again").
            "auditor": ["reconciliation.view_inboundevent"],
        },
    )


class Migration(migrations.Migration):
    dependencies = [("reconciliation", "0015_inbound_page_indexes_cover_visibility")]

    operations = [
        migrations.AlterModelOptions(
            name="inboundevent",
            options={
                "ordering": ["-received_at", "-id"],
                "permissions": [
                    ("view_unowned_inboundevent", "Can see inbound events no team owns yet")
                ],
            },
        ),
        migrations.RunPython(grant_roles, migrations.RunPython.noop),
    ]
