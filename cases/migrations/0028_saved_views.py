"""Saved views of the case list: a person's own, or shared with one of their teams."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("cases", "0027_held_status_label"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="SavedView",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=80)),
                (
                    "query",
                    models.CharField(
                        blank=True,
                        help_text="The case list's filters, as a query string.",
                        max_length=1000,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "ordering": ["name", "id"],
            },
        ),
        migrations.AddField(
            model_name="savedview",
            name="owner",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="saved_case_views",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="savedview",
            name="team",
            field=models.ForeignKey(
                blank=True,
                help_text="Shared with this team's members; empty: only its owner sees it.",
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="saved_case_views",
                to="cases.team",
            ),
        ),
        migrations.AddConstraint(
            model_name="savedview",
            constraint=models.UniqueConstraint(
                condition=models.Q(("team__isnull", True)),
                fields=("owner", "name"),
                name="saved_view_personal_name",
            ),
        ),
        migrations.AddConstraint(
            model_name="savedview",
            constraint=models.UniqueConstraint(
                condition=models.Q(("team__isnull", False)),
                fields=("team", "name"),
                name="saved_view_team_name",
            ),
        ),
    ]
