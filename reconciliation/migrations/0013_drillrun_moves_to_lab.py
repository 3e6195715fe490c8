"""``DrillRun`` leaves reconciliation for the lab (``lab.0001``): in the migration state only.

The table ``reconciliation_drillrun`` and its rows stay where they are; ``lab.DrillRun`` names
that table (``db_table``), so nothing is copied, dropped or locked.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("reconciliation", "0012_inboundevent_account")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="DrillRun")],
            database_operations=[],
        )
    ]
