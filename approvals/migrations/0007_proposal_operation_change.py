"""Change kinds, step 1 of 3 (the schema): proposals and operations carry the whole ``change``.

``change`` (and the operation's ``change_hash``, its identity within the case) and the
proposal's ``advisory_note`` are added with constant defaults (no rewrite); the old
``delivery_date`` columns become nullable so that 0009 can drop them and undo it. 0008 moves
the rows in batches, outside this migration's locks. A person who re-sends a case's request
becomes one of its authors (``joined_request``).
"""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0006_append_only_approvals_and_authors"),
    ]

    operations = [
        migrations.AddField(
            model_name="operation",
            name="change",
            field=models.JSONField(default=dict, help_text="The exact change, as sent and signed."),
        ),
        migrations.AddField(
            model_name="operation",
            name="change_hash",
            field=models.CharField(
                default="",
                help_text="SHA-256 of the change's canonical JSON (``cases.kinds``).",
                max_length=64,
            ),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="operation",
            name="delivery_date",
            field=models.DateField(null=True),
        ),
        migrations.AddField(
            model_name="proposal",
            name="change",
            field=models.JSONField(
                default=dict, help_text="The exact change, whole, in its kind's canonical form."
            ),
        ),
        migrations.AddField(
            model_name="proposal",
            name="advisory_note",
            field=models.CharField(
                blank=True,
                help_text="The kind's advice for the approver, read when the proposal was "
                "prepared.",
                max_length=300,
            ),
        ),
        migrations.AlterField(
            model_name="proposal",
            name="delivery_date",
            field=models.DateField(help_text="The exact new delivery date.", null=True),
        ),
        migrations.AlterField(
            model_name="operation",
            name="sequence",
            field=models.PositiveIntegerField(
                help_text="1 for {key prefix}-41-1, 2 for {key prefix}-41-2 …"
            ),
        ),
        migrations.AlterField(
            model_name="proposalauthor",
            name="role",
            field=models.CharField(
                choices=[
                    ("opened_case", "Opened the case"),
                    ("joined_request", "Re-sent the case's request (asked for it too)"),
                    ("changed_intent", "Changed the requested change"),
                    ("prepared", "Prepared the proposal"),
                    ("asked_reprepare", "Asked for the proposal to be prepared again"),
                ],
                max_length=20,
            ),
        ),
    ]
