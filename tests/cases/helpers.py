"""Small helpers shared by the case tests."""

from __future__ import annotations

from django.utils import timezone

from approvals.models import Operation
from cases import kinds
from cases.models import Case, CaseEvent


def reload(case: Case) -> Case:
    """A fresh copy of ``case`` with the relations its derived fields read."""
    return Case.objects.select_related("owner__staff_profile", "backup", "account", "team").get(
        pk=case.pk
    )


def events_after(case: Case, last_id: int | None) -> list[CaseEvent]:
    """The events of ``case`` written after the event ``last_id``."""
    qs = CaseEvent.objects.filter(case=case).order_by("id")
    if last_id is not None:
        qs = qs.filter(id__gt=last_id)
    return list(qs)


def last_event_id(case: Case) -> int | None:
    return CaseEvent.objects.filter(case=case).order_by("-id").values_list("id", flat=True).first()


def make_operation(case: Case, *, confirmed: bool = False) -> Operation:
    """The case's first operation, of its own change; confirmed at the order system or not."""
    return Operation.objects.create(
        case=case,
        key=f"DATE-{case.number}-1",
        sequence=1,
        order_id=case.order_id,
        change=case.change,
        change_hash=kinds.change_hash(case.change),
        confirmed_at=timezone.now() if confirmed else None,
    )
