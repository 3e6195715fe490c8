"""Small helpers shared by the case tests."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from approvals.models import Operation
from cases import kinds
from cases.models import Attempt, Case, CaseEvent


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


def make_attempt(case: Case, state: str = Attempt.State.RUNNING) -> Attempt:
    """An attempt at the case's first operation (:func:`make_operation`), its lease 5 minutes
    ahead; running unless ``state`` says otherwise."""
    return Attempt.objects.create(
        case=case,
        operation=make_operation(case),
        reference=f"{case.reference}-a1",
        sequence=1,
        worker="host:1",
        fencing_token=case.pk * 1000 + 1,
        state=state,
        lease_expires_at=timezone.now() + dt.timedelta(minutes=5),
    )
