"""What a person deciding a held case sees: the order system's evidence, in words.

Read only. The case page of a held case shows the order system's consistent read of the held
operation (found with its change and the order version / absent after a fence / unreachable),
the order events (webhooks) about the order beside it, and the settlement form cites both.
Nothing here settles anything: ``reconciliation.settle`` does, after its own fence and look.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from approvals.models import Operation
from cases import kinds
from cases.codes import Action
from cases.models import Case
from reconciliation.client import OrderSystemClient
from reconciliation.exceptions import OrderSystemError, UnknownOperation, plain_failure
from reconciliation.settle import found_as_intended, held_operation

# The events that record what a reconciliation found, newest first on the case page.
FINDING_EVENTS = (
    Action.STILL_UNKNOWN,
    Action.RETRIES_EXHAUSTED,
    Action.FINDING_DISCARDED,
    Action.MANUAL_SETTLEMENT_NEEDED,
)
EVENTS_SHOWN = 5


@dataclass(frozen=True)
class OrderRead:
    """The consistent lookup of the held operation, read when the page was drawn.

    ``kind``: ``found`` (with the intended change), ``other_change``, ``absent_fenced`` (absent
    after a fence above every attempt's token: proof), ``absent`` (absent, no such fence yet:
    no proof), ``unreachable`` or ``none`` (no operation to look up)."""

    kind: str
    words: str
    order_version: int | None = None
    operation_key: str = ""


@dataclass(frozen=True)
class OrderEvent:
    words: str
    url: str
    order_version: int


@dataclass(frozen=True)
class HeldEvidence:
    read: OrderRead
    events: list[OrderEvent] = field(default_factory=list)
    events_url: str = ""

    @property
    def citations(self) -> list[str]:
        """What a settlement recorded now rests on, in the order the page shows it."""
        return [self.read.words, *(event.words for event in self.events)]


# A page waits this long at most for the order system (seconds per phase): a read the page
# cannot get in time says so ("did not answer") instead of holding the page.
PAGE_TIMEOUT = 2.0


def _page_client() -> OrderSystemClient:
    from django.conf import settings

    timeouts = {
        name: min(value, PAGE_TIMEOUT) for name, value in settings.ORDER_SYSTEM_TIMEOUTS.items()
    }
    return OrderSystemClient(
        settings.ORDER_SYSTEM_URL, timeouts=timeouts, token=settings.ORDER_SYSTEM_TOKEN
    )


def _when(moment: dt.datetime) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S %Z")


def _fence_above_every_attempt(case: Case) -> int | None:
    """The highest fence a reconciliation of ``case`` raised, if it is above the token of
    every attempt the case ever had (then no older worker can apply the operation)."""
    tokens = [
        detail.get("fence_token")
        for detail in case.events.filter(detail__has_key="fence_token").values_list(
            "detail", flat=True
        )
    ]
    fences = [t for t in tokens if isinstance(t, int)]
    if not fences:
        return None
    fence = max(fences)
    if case.attempts.filter(fencing_token__gte=fence).exists():
        return None
    return fence


def read_operation(
    case: Case, operation: Operation | None, client: OrderSystemClient | None = None
) -> OrderRead:
    """Ask the order system's consistent lookup for ``operation`` now, and say what it shows."""
    if operation is None:
        return OrderRead("none", "No operation of this case was ever sent: nothing to look up.")
    key = operation.key
    own = client is None
    client = client or _page_client()
    at = _when(timezone.now())
    try:
        record = client.get_operation(key)
    except UnknownOperation:
        fence = _fence_above_every_attempt(case)
        if fence is not None:
            return OrderRead(
                "absent_fenced",
                f"The order system's consistent lookup does not know {key} (read {at}), after "
                f"the fence at token {fence}, above every attempt: the change was NOT applied "
                "and no older worker can apply it any more.",
                operation_key=key,
            )
        return OrderRead(
            "absent",
            f"The order system's consistent lookup does not know {key} (read {at}). No fence "
            "above every attempt has been raised yet, so an older worker could still apply "
            "it: not proof yet. 'Reconcile now' raises the fence, then looks again.",
            operation_key=key,
        )
    except OrderSystemError as exc:
        return OrderRead(
            "unreachable",
            f"The order system could not be asked about {key} just now (read {at}): it "
            f"{plain_failure(exc)}. Nothing is known from it until it answers.",
            operation_key=key,
        )
    finally:
        if own:
            client.close()
    version = f", order at version {record.order_version}" if record.order_version else ""
    if not found_as_intended(operation, record):
        return OrderRead(
            "other_change",
            f"The order system's consistent lookup has {key} with ANOTHER change "
            f"({record.order_id}: {kinds.describe(record.change)}{version}; read {at}): "
            "a person must look.",
            order_version=record.order_version,
            operation_key=key,
        )
    return OrderRead(
        "found",
        f"The order system's consistent lookup has {key} {record.status}: "
        f"{kinds.describe(record.change)} on {record.order_id}{version} (read {at}). "
        "The change IS applied.",
        order_version=record.order_version,
        operation_key=key,
    )


def order_events(user, case: Case) -> tuple[list[OrderEvent], str]:
    """The newest order events (webhooks) about the case's order that ``user`` may see, each
    in words with a link, and the link to all of them."""
    from reconciliation.selectors import inbound_events_for

    events = inbound_events_for(user).filter(order_id=case.order_id).order_by("-occurred_at")
    shown = [
        OrderEvent(
            words=f"Order event {event.type} of {_when(event.occurred_at)}: {event.order_id} "
            f"at version {event.order_version} ({event.get_processing_display().lower()})",
            url=reverse("admin:reconciliation_inboundevent_change", args=[event.pk]),
            order_version=event.order_version,
        )
        for event in events[:EVENTS_SHOWN]
    ]
    query = urlencode({"q": case.order_id})
    everything = f"{reverse('admin:reconciliation_inboundevent_changelist')}?{query}"
    return shown, everything


def held_evidence(user, case: Case, client: OrderSystemClient | None = None) -> HeldEvidence:
    """The evidence a person decides ``case`` (held) from: one consistent read, the events."""
    read = read_operation(case, held_operation(case), client)
    events, events_url = order_events(user, case)
    return HeldEvidence(read=read, events=events, events_url=events_url)
