"""A mark per testing reset (faults enabled only): a request an injected latency held across
a reset is refused when it wakes instead of running on the rows seeded after it."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0003_applied_change_kind"),
    ]

    operations = [
        migrations.CreateModel(
            name="TestingReset",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "ordering": ["id"],
            },
        ),
    ]
