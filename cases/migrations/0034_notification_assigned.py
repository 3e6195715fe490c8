"""A notification kind: a case that waits on its owner is assigned to someone else, who is told
(``cases.notify``). Only the field's choices change: no SQL."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("cases", "0033_backup_constraint_says_why"),
    ]

    operations = [
        migrations.AlterField(
            model_name="notification",
            name="kind",
            field=models.CharField(
                choices=[
                    ("awaiting_review", "A proposal awaits your decision"),
                    ("held", "A case is held"),
                    ("needs_attention", "A case needs attention"),
                    ("rejected", "A proposal was rejected"),
                    ("follow_up_due", "A follow-up is due"),
                    ("done", "A case you opened is done"),
                    ("cancelled", "A case you opened is cancelled"),
                    ("handed_over", "A case waiting on its owner passed to you, the backup"),
                    ("assigned", "A case waiting on its owner was assigned to you"),
                ],
                max_length=20,
            ),
        ),
    ]
