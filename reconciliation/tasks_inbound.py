"""django-q2 entry points for inbound order events: ids in, a service call, nothing clever.

Both are safe to run twice: processing re-reads the event under its row lock and leaves a
processed event alone.
"""

from __future__ import annotations

from reconciliation.inbound import inbound_event_process
from reconciliation.models import InboundEvent


def process_event(event_pk: int) -> str:
    event_id = InboundEvent.objects.filter(pk=event_pk).values_list("event_id", flat=True).first()
    if event_id is None:
        return "missing"
    return inbound_event_process(event_id=event_id)


def retry_failed_events() -> dict[str, int]:
    """Failed events that are due, and pending ones whose processing was lost (by a lease on
    the event row, never the broker)."""
    from reconciliation.sweep import inbound_events_redrive

    return inbound_events_redrive()
