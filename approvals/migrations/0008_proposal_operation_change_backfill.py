"""Change kinds, step 2 of 3 (the rows): every existing proposal and operation is a delivery
date change.

Each row's ``delivery_date`` becomes its ``change``
(``{"kind": "delivery_date", "delivery_date": "YYYY-MM-DD"}``), each operation gets the SHA-256
of that change's canonical JSON as ``change_hash``, and each proposal's slot note becomes its
``advisory_note``. Keys already minted (``DATE-41-1``) stay as they are; content hashes and
grants already signed stay as they were signed. Not atomic: batches of ``BATCH`` rows by primary
key, each its own short transaction; run again, it moves only what is left.
"""

from __future__ import annotations

import hashlib
import json

from django.db import migrations, transaction

BATCH = 1000
KIND = "delivery_date"


def _change(date) -> dict:
    return {"kind": KIND, KIND: date.isoformat()}


def _hash(change: dict) -> str:
    text = json.dumps(change, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _batches(model):
    first = model.objects.order_by("pk").values_list("pk", flat=True).first()
    last = model.objects.order_by("-pk").values_list("pk", flat=True).first()
    if first is None:
        return
    for start in range(first, last + 1, BATCH):
        yield start, start + BATCH


def forwards(apps, schema_editor):
    Operation = apps.get_model("approvals", "Operation")
    Proposal = apps.get_model("approvals", "Proposal")
    for start, end in _batches(Operation):
        with transaction.atomic():
            rows = list(
                Operation.objects.select_for_update().filter(
                    pk__gte=start, pk__lt=end, delivery_date__isnull=False, change_hash=""
                )
            )
            for operation in rows:
                operation.change = _change(operation.delivery_date)
                operation.change_hash = _hash(operation.change)
            Operation.objects.bulk_update(rows, ["change", "change_hash"])
    for start, end in _batches(Proposal):
        with transaction.atomic():
            rows = list(
                Proposal.objects.select_for_update().filter(
                    pk__gte=start, pk__lt=end, delivery_date__isnull=False
                )
            )
            moved = [proposal for proposal in rows if not proposal.change]
            for proposal in moved:
                proposal.change = _change(proposal.delivery_date)
                proposal.advisory_note = proposal.slot_note
            Proposal.objects.bulk_update(moved, ["change", "advisory_note"])


def backwards(apps, schema_editor):
    import datetime as dt

    Operation = apps.get_model("approvals", "Operation")
    Proposal = apps.get_model("approvals", "Proposal")
    for model in (Operation, Proposal):
        others = [row.pk for row in model.objects.only("change") if row.change.get("kind") != KIND]
        if others:
            raise RuntimeError(
                f"{len(others)} {model._meta.verbose_name_plural} hold another kind of change "
                "than a delivery date: there is no date to go back to."
            )
    for model, fields in ((Operation, ["delivery_date"]), (Proposal, ["delivery_date"])):
        for start, end in _batches(model):
            with transaction.atomic():
                rows = list(model.objects.select_for_update().filter(pk__gte=start, pk__lt=end))
                for row in rows:
                    row.delivery_date = dt.date.fromisoformat(row.change[KIND])
                    if model is Proposal:
                        row.slot_note = row.advisory_note[:200]
                model.objects.bulk_update(
                    rows, fields + (["slot_note"] if model is Proposal else [])
                )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("approvals", "0007_proposal_operation_change"),
    ]

    operations = [
        migrations.RunPython(forwards, backwards),
    ]
