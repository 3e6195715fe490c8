"""Leads see the Drills page (the runs of ``manage.py drill``)."""

from django.db import migrations

from cases.roles import grant_role_permissions


def grant_roles(apps, schema_editor):
    grant_role_permissions(apps, {"lead": ["reconciliation.view_drillrun"]})


class Migration(migrations.Migration):
    dependencies = [("reconciliation", "0008_drillrun_drills")]

    operations = [migrations.RunPython(grant_roles, migrations.RunPython.noop)]
