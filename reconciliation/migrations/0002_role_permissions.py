"""Let every role see the order-system profile; leads may run the probe."""

from django.db import migrations

from cases.roles import grant_role_permissions

ROLE_PERMISSIONS = {
    "lead": ["reconciliation.view_ordersystemprofile", "reconciliation.run_probe"],
    "agent": ["reconciliation.view_ordersystemprofile"],
    "approver": ["reconciliation.view_ordersystemprofile"],
    "auditor": ["reconciliation.view_ordersystemprofile"],
}


def grant_roles(apps, schema_editor):
    grant_role_permissions(apps, ROLE_PERMISSIONS)


class Migration(migrations.Migration):
    dependencies = [
        ("reconciliation", "0001_initial"),
        ("cases", "0002_fencing_sequence_and_roles"),
    ]

    operations = [migrations.RunPython(grant_roles, migrations.RunPython.noop)]
