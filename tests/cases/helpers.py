"""Small helpers shared by the case tests."""

from __future__ import annotations

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
