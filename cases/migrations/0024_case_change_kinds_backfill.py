"""Change kinds, step 2 of 3 (the rows): every existing case is a delivery date case.

Each case's ``requested_date`` becomes its ``change``
(``{"kind": "delivery_date", "delivery_date": "YYYY-MM-DD"}``) and its
``order_delivery_date_seen`` its ``order_seen`` (``{"delivery_date": …}``), nothing lost. Not
atomic: the rows move in batches of ``BATCH`` by primary key, each batch its own short
transaction holding only the row locks of its rows, so the desk keeps working meanwhile. Run
again, it moves only what is left (a case still without a change). Undone, it writes the dates
back (a case of another kind cannot go back: there is no date to write).
"""

from __future__ import annotations

from django.db import migrations, transaction

BATCH = 1000
KIND = "delivery_date"


def _batches(model):
    """Primary-key ranges of ``BATCH`` over the whole table."""
    ids = model.objects.order_by("pk").values_list("pk", flat=True)
    first, last = ids.first(), model.objects.order_by("-pk").values_list("pk", flat=True).first()
    if first is None:
        return
    for start in range(first, last + 1, BATCH):
        yield start, start + BATCH


def forwards(apps, schema_editor):
    Case = apps.get_model("cases", "Case")
    for start, end in _batches(Case):
        with transaction.atomic():
            rows = list(
                Case.objects.select_for_update()
                .filter(pk__gte=start, pk__lt=end, requested_date__isnull=False)
                .only("pk", "kind", "change", "requested_date", "order_delivery_date_seen")
            )
            moved = []
            for case in rows:
                if case.change:
                    continue  # moved by an earlier run
                case.kind = KIND
                case.change = {"kind": KIND, KIND: case.requested_date.isoformat()}
                seen = case.order_delivery_date_seen
                case.order_seen = {KIND: seen.isoformat() if seen else None}
                moved.append(case)
            Case.objects.bulk_update(moved, ["kind", "change", "order_seen"])


def backwards(apps, schema_editor):
    import datetime as dt

    Case = apps.get_model("cases", "Case")
    others = Case.objects.exclude(kind=KIND).count()
    if others:
        raise RuntimeError(
            f"{others} cases ask for another kind of change than a delivery date: they have no "
            "requested date to go back to. Close or remove them first."
        )
    for start, end in _batches(Case):
        with transaction.atomic():
            rows = list(Case.objects.select_for_update().filter(pk__gte=start, pk__lt=end))
            for case in rows:
                case.requested_date = dt.date.fromisoformat(case.change[KIND])
                seen = (case.order_seen or {}).get(KIND)
                case.order_delivery_date_seen = dt.date.fromisoformat(seen) if seen else None
            Case.objects.bulk_update(rows, ["requested_date", "order_delivery_date_seen"])


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0023_case_change_kinds"),
    ]

    operations = [
        migrations.RunPython(forwards, backwards),
    ]
