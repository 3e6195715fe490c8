"""The global fencing-token sequence (PostgreSQL) and the four role groups with permissions."""

from django.db import migrations

from cases.roles import grant_role_permissions

FENCING_SEQUENCE = "holdfast_fencing_token"

ROLE_PERMISSIONS = {
    "agent": [
        "cases.view_case",
        "cases.add_case",
        "cases.work_case",
        "cases.view_caseevent",
        "cases.view_evidencereference",
        "cases.add_evidencereference",
        "cases.view_customeraccount",
    ],
    "lead": [
        "cases.view_case",
        "cases.add_case",
        "cases.change_case",
        "cases.work_case",
        "cases.lead_case",
        "cases.view_caseevent",
        "cases.view_evidencereference",
        "cases.add_evidencereference",
        "cases.view_customeraccount",
        "cases.change_customeraccount",
        "cases.view_team",
        "cases.view_staffprofile",
        "cases.add_staffprofile",
        "cases.change_staffprofile",
    ],
    "approver": [
        "cases.view_case",
        "cases.view_caseevent",
        "cases.view_evidencereference",
        "cases.view_customeraccount",
    ],
    "auditor": [
        "cases.view_case",
        "cases.view_caseevent",
        "cases.view_evidencereference",
        "cases.view_customeraccount",
        "cases.view_team",
    ],
}


def create_sequence(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"CREATE SEQUENCE IF NOT EXISTS {FENCING_SEQUENCE} START 1")


def drop_sequence(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP SEQUENCE IF EXISTS {FENCING_SEQUENCE}")


def create_roles(apps, schema_editor):
    grant_role_permissions(apps, ROLE_PERMISSIONS)


class Migration(migrations.Migration):
    dependencies = [
        ("cases", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.RunPython(create_sequence, drop_sequence),
        migrations.RunPython(create_roles, migrations.RunPython.noop),
    ]
