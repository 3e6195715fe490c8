"""Inbound order events: store each receipt by event id, then process it separately.

The order system delivers ``order.updated`` webhooks at least once, in any order, and people
resend them by hand. So:

- ``inbound_event_receive`` stores the receipt in one transaction, keyed by ``event_id``. A
  duplicate only counts another delivery. A duplicate (or manual resend) of an event whose
  processing failed puts it back to ``pending`` and queues it again, so a stored receipt never
  hides unfinished work; a duplicate of a processed event changes nothing else.
- ``inbound_event_process`` applies one event to every open case of its order *and of the
  order's account*, all or nothing, under the event's row lock and each case's row lock. It is
  safe to run twice: a processed event is left alone, and each case carries the evidence
  reference ``event:<event_id>`` once.
  Out-of-order delivery is decided by order version: a version not newer than what the case
  already knows changes nothing; the version of one of the case's own confirmed operations is
  Holdfast's own change; a newer version is recorded as evidence and voids an open proposal
  and approval (held and applying cases are never moved: reconciliation decides those).
- Team walls. The webhook names an order, not an account, and anyone may open a case on any
  order id. So before an event touches a case, processing reads the order from the order
  system (``GET /orders/{id}``, outside any transaction) and the event reaches only open cases
  whose ``account.reference`` is the account the order system reports; open cases of that
  order under another account are left alone and are not named in the event's outcome. The
  account read is stored on the event (``account_reference``, and ``account``, our account of
  that reference), which is what scopes the event in the admin
  (``reconciliation.selectors.inbound_events_for``). An order that cannot be read
  is a failed attempt (nothing changed, retried on the backoff), never a guess.
- ``inbound_events_retry_due`` (django-q2 schedule, every minute) processes failed events whose
  next attempt is due, on the shared bounded backoff, and pending events nobody picked up.
  After the ``inbound`` retry policy's bound (``cases.retries.INBOUND``) an event stays
  ``failed`` and visible in the admin.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists, F, Q
from django.utils import timezone

from approvals.services import proposal_invalidate_for_source_change
from cases.codes import Action
from cases.kernel import Worker, bump_and_save, lock_case, record_event
from cases.models import TERMINAL_STATUSES, Case, CustomerAccount, EvidenceReference, Status
from cases.retries import INBOUND
from cases.scheduling import enqueue_on_commit
from cases.services import evidence_add
from reconciliation.client import OrderSystemClient
from reconciliation.exceptions import OrderSystemError
from reconciliation.models import InboundEvent
from reconciliation.sources import known_order_version

logger = logging.getLogger(__name__)

Processing = InboundEvent.Processing

PROCESS_TASK = "reconciliation.tasks_inbound.process_event"
ORDER_UPDATED = "order.updated"
# Automatic processing attempts before an event is left failed for a person (or a resend): the
# ``inbound`` retry policy's bound (``settings.INBOUND_ATTEMPT_LIMIT``, this by default).
MAX_ATTEMPTS = INBOUND.default_limit
# A pending event nobody processed within this time (its queued task was lost) is swept up.
PENDING_GRACE = dt.timedelta(minutes=2)
# Case statuses whose open proposal or approval an order change voids.
INVALIDATES = frozenset({Status.PREPARING_PROPOSAL, Status.AWAITING_REVIEW, Status.READY})
# A change may be in flight or unknown: record it, never move the case.
RECORD_ONLY = frozenset({Status.HELD, Status.APPLYING})


def _actor() -> Worker:
    return Worker("webhook")


# --- receipt -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Receipt:
    """What storing one delivery did; ``body`` is the 202 answer."""

    event: InboundEvent
    created: bool

    @property
    def body(self) -> dict[str, Any]:
        return {
            "event_id": self.event.event_id,
            "status": "stored" if self.created else "already_stored",
            "processing": self.event.processing,
        }


def inbound_event_receive(
    *,
    event_id: str,
    type: str,
    order_id: str,
    order_version: int,
    occurred_at: dt.datetime,
    body: dict,
) -> Receipt:
    """Store one verified delivery by event id (one transaction) and queue its processing.

    New: stored as ``pending`` and queued on commit. Duplicate: ``deliveries`` + 1; if its
    processing failed it is reset to ``pending`` and queued again (a pending one is queued again
    too, in case its first task was lost); a processed one is left as it is.
    """
    now = timezone.now()
    with transaction.atomic():
        event = InboundEvent.objects.select_for_update().filter(event_id=event_id).first()
        if event is None:
            try:
                with transaction.atomic():
                    event = InboundEvent.objects.create(
                        event_id=event_id,
                        type=type,
                        order_id=order_id,
                        order_version=order_version,
                        occurred_at=occurred_at,
                        body=body,
                        received_at=now,
                        last_received_at=now,
                        next_attempt_at=now,
                    )
            except IntegrityError:
                # A concurrent delivery of the same id committed first: this one is a duplicate.
                event = InboundEvent.objects.select_for_update().get(event_id=event_id)
            else:
                enqueue_on_commit(PROCESS_TASK, event.pk)
                return Receipt(event=event, created=True)
        if event.body != body:
            logger.warning(
                "Inbound event %s delivered again with a different body; the first is kept.",
                event_id,
            )
        event.deliveries = F("deliveries") + 1
        event.last_received_at = now
        fields = ["deliveries", "last_received_at"]
        if event.processing == Processing.FAILED:
            event.processing = Processing.PENDING
            event.next_attempt_at = now
            fields += ["processing", "next_attempt_at"]
        event.save(update_fields=fields)
        event.refresh_from_db(fields=["deliveries"])
        if event.processing == Processing.PENDING:
            enqueue_on_commit(PROCESS_TASK, event.pk)
    return Receipt(event=event, created=False)


# --- processing --------------------------------------------------------------------------------


def order_system_client() -> OrderSystemClient:
    """The client processing reads the order's account with (tests give it a transport)."""
    return OrderSystemClient.from_settings()


def _order_account(event: InboundEvent, client: OrderSystemClient | None) -> str | None:
    """The account the order system reports for the event's order, read now (no transaction
    is open); ``None`` when nothing needs it (another event type, or no open case of the order
    at all). Raises ``OrderSystemError`` when the order cannot be read."""
    if event.type != ORDER_UPDATED:
        return None
    if not Case.objects.open().filter(order_id=event.order_id).exists():
        return None
    if client is not None:
        return client.get_order(event.order_id).account_id
    with order_system_client() as own:
        return own.get_order(event.order_id).account_id


def inbound_event_process(*, event_id: str, client: OrderSystemClient | None = None) -> str:
    """Process one stored event (idempotent); returns its processing status.

    Every change to cases and the ``processed`` mark commit together, or nothing does: on any
    error (the order's account could not be read, or applying failed) the event is marked
    ``failed`` with attempts + 1, the error and the next attempt time (bounded backoff; none
    after the ``inbound`` policy's bound), and the error is not raised.
    """
    account: str | None = None
    try:
        event = InboundEvent.objects.get(event_id=event_id)
        if event.processing == Processing.PROCESSED:
            return Processing.PROCESSED
        account = _order_account(event, client)
        with transaction.atomic():
            event = InboundEvent.objects.select_for_update().get(event_id=event_id)
            if event.processing == Processing.PROCESSED:
                return Processing.PROCESSED
            outcome = _apply_event(event, account)
            if account is not None:
                _set_account(event, account)
            event.processing = Processing.PROCESSED
            event.attempts += 1
            event.processed_at = timezone.now()
            event.next_attempt_at = None
            event.last_error = ""
            event.outcome = outcome
            event.save(
                update_fields=[
                    "processing",
                    "attempts",
                    "processed_at",
                    "next_attempt_at",
                    "last_error",
                    "outcome",
                    "account_reference",
                    "account",
                    "account_team",
                    "on_case",
                ]
            )
            return Processing.PROCESSED
    except InboundEvent.DoesNotExist:
        logger.warning("Inbound event %s is not stored; nothing to process.", event_id)
        return "missing"
    except OrderSystemError as exc:
        logger.warning("Inbound event %s: the order's account could not be read: %s", event_id, exc)
        return _record_failure(event_id, exc)
    except Exception as exc:
        logger.exception("Processing inbound event %s failed.", event_id)
        return _record_failure(event_id, exc, account)


def _failure_words(exc: Exception) -> str:
    """What went wrong, as the events page says it: the order system's answer in words with
    its code after them ("Transient: unavailable: …" was a class name and a code); anything
    else is unexpected, and named as the program's error for whoever looks into it."""
    if isinstance(exc, OrderSystemError):
        what = exc.detail or exc.error.replace("_", " ")
        return f"The order system did not give the order's account: {what} ({exc.error})."
    return f"Unexpected error: {type(exc).__name__}: {exc}"


def _record_failure(event_id: str, exc: Exception, account: str | None = None) -> str:
    """Mark one attempt failed; the order's account, when it was read, is kept (so the
    order's own teams see the failure in the admin)."""
    with transaction.atomic():
        event = InboundEvent.objects.select_for_update().get(event_id=event_id)
        if event.processing == Processing.PROCESSED:  # another run finished it meanwhile
            return Processing.PROCESSED
        if account is not None:
            _set_account(event, account)
        event.attempts += 1
        event.processing = Processing.FAILED
        event.last_error = _failure_words(exc)[:2000]
        if not INBOUND.gives_up(event.attempts):
            event.next_attempt_at = INBOUND.next_try_at(event.attempts)
            event.outcome = (
                f"Attempt {event.attempts} failed; nothing was changed. Next attempt "
                f"{timezone.localtime(event.next_attempt_at):%Y-%m-%d %H:%M:%S %Z}."
            )
        else:
            event.next_attempt_at = None
            event.outcome = (
                f"Gave up after {event.attempts} attempts; nothing was changed. Process it "
                "again from the admin, or resend it from the order system."
            )
        event.save(
            update_fields=[
                "attempts",
                "processing",
                "last_error",
                "next_attempt_at",
                "outcome",
                "account_reference",
                "account",
                "account_team",
                "on_case",
            ]
        )
        return Processing.FAILED


def _set_account(event: InboundEvent, reference: str) -> None:
    """The reported account reference, our account of it with its team (none when we have no
    such account), and whether a case of that account is on the order: who may see the event
    is decided by them (``inbound_events_for``). Called inside the event's transaction: a
    case opening meanwhile is not seen here, nor does its own marking see this event until it
    commits, so once it commits the event is asked again (:func:`inbound_events_on_case`)."""
    event.account_reference = reference
    event.account_id, event.account_team_id = CustomerAccount.objects.filter(
        reference=reference
    ).values_list("pk", "team_id").first() or (None, None)
    event.on_case = (
        event.account_id is not None and _cases_of(event.order_id, event.account_id).exists()
    )
    if event.account_id is not None and not event.on_case:
        order_id, account_id = event.order_id, event.account_id
        transaction.on_commit(
            # Robust: the event is processed whatever the marking does (its error is logged).
            lambda: inbound_events_on_case(order_id=order_id, account_id=account_id),
            robust=True,
        )


def _cases_of(order_id: str, account_id: int):
    return Case.objects.filter(order_id=order_id, account_id=account_id)


def inbound_events_on_case(*, order_id: str, account_id: int) -> int:
    """Mark the events of ``order_id`` whose account is ``account_id`` as on a case, when a case
    of that account is on that order (committed, read in this statement); how many it marked.

    Run after a case's opening commits (``cases.extensions.on_case_opened``) and after an
    event's processing commits without finding a case: whichever of the two commits last
    finds the other's row, so no interleaving leaves an event of a case unmarked. The
    statement holds no lock but the rows it marks."""
    return (
        InboundEvent.objects.filter(order_id=order_id, account_id=account_id)
        .exclude(on_case=True)
        .filter(Exists(_cases_of(order_id, account_id)))
        .update(on_case=True)
    )


def _apply_event(event: InboundEvent, account: str | None) -> str:
    if event.type != ORDER_UPDATED:
        return f"Nothing to do for a {event.type!r} event."
    on_order = Case.objects.open().filter(order_id=event.order_id)
    if account is None:
        # No open case when the event was read: a case opened since reads the order itself.
        return f"No open case for order {event.order_id} when the event was processed."
    case_ids = list(
        on_order.filter(account__reference=account).order_by("pk").values_list("pk", flat=True)
    )
    others = list(on_order.exclude(account__reference=account).values_list("reference", flat=True))
    if others:
        # Cases of another account on this order: never touched, and not named in the outcome
        # (the order's own teams read it); the log keeps them for operators.
        logger.warning(
            "Inbound event %s for order %s (account %s) left alone open cases of other "
            "accounts: %s",
            event.event_id,
            event.order_id,
            account,
            ", ".join(others),
        )
    if not case_ids:
        return f"No open case of the order's account for order {event.order_id}."
    actor = _actor()
    return "\n".join(_apply_to_case(case_id, event, actor) for case_id in case_ids)


def _apply_to_case(case_id: int, event: InboundEvent, actor: Worker) -> str:
    case = lock_case(case_id)
    version = event.order_version
    label = f"{case.reference} ({case.status})"
    if case.status in TERMINAL_STATUSES:
        return f"{label}: closed meanwhile; nothing to do."
    external_reference = f"event:{event.event_id}"
    if case.evidence.filter(external_reference=external_reference).exists():
        return f"{label}: this event is already recorded; nothing to do."
    own = (
        case.operations.filter(confirmed_at__isnull=False, result_order_version=version)
        .order_by("sequence")
        .first()
    )
    if own is not None:
        return f"{label}: version {version} is Holdfast's own change ({own.key}); recorded only."
    known = known_order_version(case)
    if known is not None and version <= known:
        return (
            f"{label}: stale, version {version} is not newer than version {known} already "
            "known; nothing changed."
        )
    evidence = evidence_add(
        case=case,
        actor=actor,
        source_system=EvidenceReference.Source.ORDER_SYSTEM,
        external_reference=external_reference,
        kind="order_event",
        permitted_basis=EvidenceReference.Basis.CONTRACT,
        summary=f"Order {event.order_id} changed to version {version} ({event.type}, "
        f"event {event.event_id})",
        captured_at=event.occurred_at,
        order_version=version,
    )
    moves = case.status in INVALIDATES
    if case.status in RECORD_ONLY:
        consequence = "the case is not moved: reconciliation decides"
    elif moves:
        consequence = "the open proposal and any approval are checked against it"
    else:
        consequence = "the next source check reads it"
    known_text = "none" if known is None else str(known)
    bump_and_save(case, [])
    record_event(
        case=case,
        action=Action.ORDER_EVENT_RECORDED,
        actor=actor,
        reason=f"The order system reported order {event.order_id} at version {version} "
        f"(known: {known_text}); {consequence}",
        detail={
            "event_id": event.event_id,
            "order_version": version,
            "known_version": known,
            "evidence_id": evidence.pk,
        },
    )
    if moves and proposal_invalidate_for_source_change(
        case=case, order_version=version, actor=actor, via=f"event {event.event_id}"
    ):
        return (
            f"{label}: newer version {version} (known: {known_text}) recorded; the open proposal "
            "(and its approval, if it had one) was invalidated and the case waits for the order "
            "source."
        )
    return f"{label}: newer version {version} (known: {known_text}) recorded; {consequence}."


# --- retries -----------------------------------------------------------------------------------


def inbound_events_due(now: dt.datetime | None = None):
    """Failed events whose next attempt is due (under the bound), and pending ones nobody
    picked up within ``PENDING_GRACE``."""
    now = now or timezone.now()
    return InboundEvent.objects.filter(
        Q(processing=Processing.FAILED, attempts__lt=INBOUND.limit, next_attempt_at__lte=now)
        | Q(processing=Processing.PENDING, next_attempt_at__lte=now - PENDING_GRACE)
    ).order_by("next_attempt_at", "pk")


def inbound_events_retry_due(
    *, limit: int = 100, client: OrderSystemClient | None = None
) -> dict[str, int]:
    """Process due events once each (one pass, at most ``limit``); counts by outcome."""
    counts: dict[str, int] = {}
    for event_id in list(inbound_events_due().values_list("event_id", flat=True)[:limit]):
        status = inbound_event_process(event_id=event_id, client=client)
        counts[status] = counts.get(status, 0) + 1
    return counts
