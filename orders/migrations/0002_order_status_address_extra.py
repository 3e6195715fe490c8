"""Orders carry a status, a shipping address and the plug-in kinds' values (change kinds).

Every existing order becomes ``open`` with no address on record (``null``) and an empty
``extra``; nothing else changes. Each column is added with a constant default, which
PostgreSQL 11+ records without rewriting the table.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="order",
            name="status",
            field=models.CharField(
                choices=[("open", "Open"), ("shipped", "Shipped"), ("cancelled", "Cancelled")],
                default="open",
                max_length=20,
            ),
        ),
        migrations.AddField(
            model_name="order",
            name="shipping_address",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="order",
            name="extra",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
