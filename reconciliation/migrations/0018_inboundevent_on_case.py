"""An inbound event says whether a case of its account is on its order, and the page's two
indexes carry it.

Who may see an event (``reconciliation.selectors.inbound_events_for``) was decided, for every
event of the caller's own accounts that a page counts, by a look in ``case_order_idx``: is a
case of the event's account on its order? The page's count stops 1,000 rows past the page, so
at 1M cases counting a lead's failed events looked 1,042 times (9 ms), at 10k a few. A case is
never deleted and keeps its order and account, so the answer, once true, stays true: it is
stored with the event (``on_case``) and read in the index, with no look.

As 0017 did, in this non-atomic migration: the column is added (nullable, without a default,
a constraint or an index: only the catalogue changes); the events whose account is known get
their answer in batches of :data:`BATCH`, each its own short transaction; then each page index
is dropped and built again under its own name, ``CONCURRENTLY`` on PostgreSQL, so webhooks
keep arriving meanwhile. An event left without an answer (stored by a process that started
before this migration) is decided by a look for a case, as before.
"""

from __future__ import annotations

from importlib import import_module

from django.db import migrations, models, transaction
from django.db.models import Exists, OuterRef

BATCH = 5_000

AddIndexConcurrently = import_module(
    "cases.migrations.0014_case_ready_due_index"
).AddIndexConcurrently
RemoveIndexConcurrently = import_module(
    "reconciliation.migrations.0015_inbound_page_indexes_cover_visibility"
).RemoveIndexConcurrently

COVERED = ("order_id", "account_id", "account_team_id", "on_case")


def set_on_case(apps, schema_editor) -> int:
    """Give every event whose account is known and whose answer is not yet set whether a case
    of that account is on its order; the number of events set."""
    event_model = apps.get_model("reconciliation", "InboundEvent")
    case_model = apps.get_model("cases", "Case")
    alias = schema_editor.connection.alias
    on_a_case = case_model.objects.using(alias).filter(
        order_id=OuterRef("order_id"), account_id=OuterRef("account_id")
    )
    unset = event_model.objects.using(alias).filter(account__isnull=False, on_case__isnull=True)
    done, after = 0, 0
    while True:
        ids = list(unset.filter(pk__gt=after).order_by("pk").values_list("pk", flat=True)[:BATCH])
        if not ids:
            return done
        with transaction.atomic(using=alias):
            done += (
                event_model.objects.using(alias)
                .filter(pk__in=ids)
                .update(on_case=Exists(on_a_case))
            )
        after = ids[-1]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0016_case_order_covering_index"),
        ("reconciliation", "0017_inboundevent_account_team"),
    ]

    operations = [
        migrations.AddField(
            model_name="inboundevent",
            name="on_case",
            field=models.BooleanField(
                blank=True,
                editable=False,
                help_text="A case of the event's account is on its order (empty: not known yet).",
                null=True,
            ),
        ),
        migrations.RunPython(set_on_case, migrations.RunPython.noop, elidable=True),
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
