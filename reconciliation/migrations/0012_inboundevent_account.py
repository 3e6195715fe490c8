"""The account of ours that an inbound event's reported account reference names.

Who may see an event (``reconciliation.selectors.inbound_events_for``) is decided per event: is
one of the order's cases of this account and of the person's teams? With the account's id on
the event that is one look in ``case_order_idx`` (cases 0016); by the reference it was a look
in the accounts first and then in the account's cases. ``reconciliation.inbound`` sets it with
the reference from now on; this migration sets it for the events stored before.

The column is nullable, without a default, a constraint or an index, so adding it changes only
the catalogue. The backfill runs in this non-atomic migration in batches of
:data:`BATCH` events, each its own short transaction, so webhooks keep arriving meanwhile
(``tests/support/migration_lint.py``).
"""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models, transaction
from django.db.models import Exists, OuterRef, Subquery

BATCH = 5_000


def link_accounts(apps, schema_editor) -> int:
    """Set the account of every event that names one of our accounts' references and has no
    account yet; the number of events set (a reference of no account of ours sets none)."""
    event_model = apps.get_model("reconciliation", "InboundEvent")
    account_model = apps.get_model("cases", "CustomerAccount")
    alias = schema_editor.connection.alias
    named = account_model.objects.using(alias).filter(reference=OuterRef("account_reference"))
    unlinked = (
        event_model.objects.using(alias).filter(account__isnull=True).exclude(account_reference="")
    )
    done, after = 0, 0
    while True:
        ids = list(
            unlinked.filter(pk__gt=after).order_by("pk").values_list("pk", flat=True)[:BATCH]
        )
        if not ids:
            return done
        with transaction.atomic(using=alias):
            done += (
                event_model.objects.using(alias)
                .filter(pk__in=ids)
                .filter(Exists(named))
                .update(account=Subquery(named.values("pk")[:1]))
            )
        after = ids[-1]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0016_case_order_covering_index"),
        ("reconciliation", "0011_inbound_processing_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="inboundevent",
            name="account",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                editable=False,
                help_text="Our account that the reported account reference named when it was "
                "stored.",
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="cases.customeraccount",
            ),
        ),
        migrations.RunPython(link_accounts, migrations.RunPython.noop, elidable=True),
    ]
