"""Case references per team: each team gets its own prefix and counter.

Before this, every case took its number from one counter (``case_number``) and the prefix
``CASE_REFERENCE_PREFIX`` (``D``), so one team could count another's volume. Now:

- ``Team.case_prefix``: the team with the most cases under the original prefix keeps it (the
  demo's Deliveries keeps ``D``: D-41 stays D-41); every other team gets one from its name
  (R for Returns, or more letters when taken). Existing references are not touched.
- each team's counter (``case_number:team:<id>``) is set past its highest number: its own
  cases', and every case whose reference carries its prefix (so the team that kept ``D`` counts
  on past every D- number any team had).
- ``Case.number`` is unique per team (``case_number_per_team``), no longer across the
  deployment, and keeps an index of its own (``case_number_idx``: the lists' order); both are
  built ``CONCURRENTLY`` on PostgreSQL in this non-atomic migration, so cases keep being
  written meanwhile.

Backwards the prefixes and per-team counters go and the global uniqueness of numbers returns
(refused, naming them, when two teams' cases share a number by then).
"""

from __future__ import annotations

import string

import django.contrib.postgres.operations
from django.conf import settings
from django.core.validators import RegexValidator
from django.db import migrations, models
from django.db.models import Count, Max

PREFIX_MAX = 8


def _free_prefix(name, taken):
    # The rule of ``cases.references.free_case_prefix`` as it is at this migration.
    letters = "".join(c for c in name.upper() if c in string.ascii_uppercase) or "T"
    candidates = [letters[:n] for n in range(1, min(len(letters), PREFIX_MAX) + 1)]
    candidates += [letters[0] + c for c in string.ascii_uppercase]
    alphabet = string.ascii_uppercase
    candidates += [letters[0] + a + b for a in alphabet for b in alphabet]
    return next(c for c in candidates if c.upper() not in taken)


def assign_prefixes(apps, schema_editor):
    Team = apps.get_model("cases", "Team")
    Case = apps.get_model("cases", "Case")
    CounterRow = apps.get_model("cases", "CounterRow")
    original = settings.CASE_REFERENCE_PREFIX
    teams = list(Team.objects.order_by("pk"))
    if not teams:
        return
    under_original = dict(
        Case.objects.filter(reference__startswith=f"{original}-")
        .values_list("team_id")
        .annotate(n=Count("pk"))
        .values_list("team_id", "n")
    )
    keeper = max(teams, key=lambda team: (under_original.get(team.pk, 0), -team.pk))
    keeper.case_prefix = original
    keeper.save(update_fields=["case_prefix"])
    taken = {original.upper()}
    for team in teams:
        if team.pk == keeper.pk:
            continue
        team.case_prefix = _free_prefix(team.name, taken)
        taken.add(team.case_prefix.upper())
        team.save(update_fields=["case_prefix"])
    for team in teams:
        own = Case.objects.filter(team=team).aggregate(n=Max("number"))["n"] or 0
        prefixed = (
            Case.objects.filter(reference__startswith=f"{team.case_prefix}-").aggregate(
                n=Max("number")
            )["n"]
            or 0
        )
        if team.pk == keeper.pk:
            # Numbers handed out by the old counter but never kept (a rolled-back intake) are
            # skipped too: the original prefix never repeats a number it may have shown.
            legacy = CounterRow.objects.filter(name="case_number").values_list("value", flat=True)
            prefixed = max(prefixed, legacy.first() or 0)
        CounterRow.objects.update_or_create(
            name=f"case_number:team:{team.pk}", defaults={"value": max(own, prefixed)}
        )


def remove_team_counters(apps, schema_editor):
    CounterRow = apps.get_model("cases", "CounterRow")
    Case = apps.get_model("cases", "Case")
    counters = CounterRow.objects.filter(name__startswith="case_number:team:")
    highest = max(
        [
            Case.objects.aggregate(n=Max("number"))["n"] or 0,
            *counters.values_list("value", flat=True),
        ]
    )
    CounterRow.objects.update_or_create(name="case_number", defaults={"value": highest})
    counters.delete()


def refuse_shared_numbers(apps, schema_editor):
    Case = apps.get_model("cases", "Case")
    twice = Case.objects.values("number").annotate(n=Count("pk")).filter(n__gt=1)
    found = [str(row["number"]) for row in twice[:20]]
    if found:
        raise RuntimeError(
            "Cases of different teams share the numbers "
            + ", ".join(found)
            + ": numbers cannot be unique across teams again."
        )


class AddConstraintConcurrently(migrations.AddConstraint):
    """A ``UniqueConstraint`` as ``CREATE UNIQUE INDEX CONCURRENTLY`` (then attached as the
    constraint's index) on PostgreSQL; Django's own elsewhere. Backwards, dropped."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            _sqlite_remake_without_postgres_indexes(
                schema_editor, app_label, self.model_name, from_state, to_state
            )
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return None
        table = schema_editor.quote_name(model._meta.db_table)
        name = schema_editor.quote_name(self.constraint.name)
        columns = ", ".join(
            schema_editor.quote_name(model._meta.get_field(f).column)
            for f in self.constraint.fields
        )
        schema_editor.execute(f"CREATE UNIQUE INDEX CONCURRENTLY {name} ON {table} ({columns})")
        schema_editor.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT {name} UNIQUE USING INDEX {name}"
        )
        return None

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            _sqlite_remake_without_postgres_indexes(
                schema_editor, app_label, self.model_name, from_state, to_state
            )
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        model = from_state.apps.get_model(app_label, self.model_name)
        table = schema_editor.quote_name(model._meta.db_table)
        name = schema_editor.quote_name(self.constraint.name)
        schema_editor.execute(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {name}")
        return None


def _sqlite_remake_without_postgres_indexes(schema_editor, app_label, name, *states):
    """On SQLite, the model of each state without the trigram (GIN) indexes, which 0012 and
    0015 build on PostgreSQL only: SQLite remakes the table here, and would try to create
    them."""
    from django.contrib.postgres.indexes import GinIndex

    if schema_editor.connection.vendor != "sqlite":
        return
    for state in states:
        model = state.apps.get_model(app_label, name)
        model._meta.indexes = [i for i in model._meta.indexes if not isinstance(i, GinIndex)]


class AlterFieldOnSQLite(migrations.AlterField):
    """Django's ``AlterField``; on SQLite the remade table leaves out PostgreSQL's indexes."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        _sqlite_remake_without_postgres_indexes(
            schema_editor, app_label, self.model_name, from_state, to_state
        )
        return super().database_forwards(app_label, schema_editor, from_state, to_state)


class AddIndexConcurrently(django.contrib.postgres.operations.AddIndexConcurrently):
    """``CREATE INDEX CONCURRENTLY`` on PostgreSQL; Django's own ``AddIndex`` elsewhere."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        return migrations.AddIndex.database_forwards(
            self, app_label, schema_editor, from_state, to_state
        )

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        return migrations.AddIndex.database_backwards(
            self, app_label, schema_editor, from_state, to_state
        )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0025_case_one_open_per_order_kind"),
    ]

    operations = [
        migrations.AddField(
            model_name="team",
            name="case_prefix",
            field=models.CharField(blank=True, max_length=8, null=True),
        ),
        migrations.RunPython(assign_prefixes, remove_team_counters),
        migrations.AlterField(
            model_name="team",
            name="case_prefix",
            field=models.CharField(
                blank=True,
                help_text="The team's case references: D for D-41. Its own counter: other "
                "teams' numbers reveal nothing of this team's. Set once, before the team's "
                "first case.",
                max_length=8,
                unique=True,
                validators=[RegexValidator("^[A-Za-z]{1,8}\\Z", "1 to 8 letters A-Z.")],
            ),
        ),
        AddConstraintConcurrently(
            model_name="case",
            constraint=models.UniqueConstraint(
                fields=("team", "number"), name="case_number_per_team"
            ),
        ),
        # Before the unique number (and its index) goes: the lists keep reading in order.
        AddIndexConcurrently(
            model_name="case",
            index=models.Index(fields=["number"], name="case_number_idx"),
        ),
        AlterFieldOnSQLite(
            model_name="case",
            name="number",
            field=models.PositiveIntegerField(editable=False),
        ),
        # Backwards, before numbers are made unique across teams again.
        migrations.RunPython(migrations.RunPython.noop, refuse_shared_numbers),
    ]
