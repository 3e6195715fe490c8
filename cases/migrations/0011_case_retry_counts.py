"""One consecutive-failure counter per kind of work (``cases.retries``).

``ADD COLUMN ... NOT NULL DEFAULT '{}'`` with a constant default: instant on PostgreSQL 11+ (no
table rewrite, no long lock); Django drops the column default afterwards, the model supplies it.
The counters start empty: ``retry_count`` keeps the count of the step in progress, as before.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("cases", "0010_caseevent_hash_chain")]

    operations = [
        migrations.AddField(
            model_name="case",
            name="retry_counts",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="Consecutive transient failures per kind of work (apply, source_check, "
                "reconcile); the kind's bound is its retry policy's.",
            ),
        ),
    ]
