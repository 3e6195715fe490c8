"""django-q2 entry points for reconciliation work: ids in, a service call, nothing clever.

Each is safe to run twice: it re-reads state and acts only through a claim or a service.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import Counter
from collections.abc import Iterator

from django.conf import settings

from approvals import services
from approvals.models import Proposal
from cases.exceptions import CaseError
from cases.kernel import Worker
from cases.logcontext import log_context
from cases.models import Case, Status
from reconciliation.apply import apply_case as _apply_case
from reconciliation.apply import apply_due as _apply_due
from reconciliation.apply import notify_case as _notify_case
from reconciliation.claims import attempts_expire_leases
from reconciliation.client import OrderSystemClient
from reconciliation.dispatch import dispatch_due as _dispatch_due
from reconciliation.exceptions import OrderSystemError
from reconciliation.sources import source_check as _source_check

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def _about(case_id: int, kind: str) -> Iterator[None]:
    """Log lines inside name the case (one read of its reference) and this worker."""
    reference = Case.objects.filter(pk=case_id).values_list("reference", flat=True).first()
    with log_context(case=reference, worker=Worker.current(kind).label):
        yield


def source_check(case_id: int) -> str:
    with _about(case_id, "source-check"):
        return _source_check(case_id=case_id)


def apply_case(case_id: int) -> str:
    """Apply the case; then, while more ready cases are due, take the next one at once
    (:func:`apply_due`) instead of waiting for the dispatcher's next pass."""
    outcome = _apply_case(case_id=case_id, notify_later=settings.NOTIFY_AS_OWN_TASK)
    if settings.APPLY_DRAIN_SECONDS > 0:
        more = _apply_due(
            seconds=settings.APPLY_DRAIN_SECONDS, notify_later=settings.NOTIFY_AS_OWN_TASK
        )
        if more:
            return f"{outcome}; then {len(more)} more due: {_tally(more)}"
    return outcome


def apply_due() -> str:
    """Apply due ready cases one after another until none is due (``APPLY_DRAIN_SECONDS`` at
    most); a worker started with this takes each next case the moment the last is done."""
    outcomes = _apply_due(
        seconds=max(settings.APPLY_DRAIN_SECONDS, 1.0), notify_later=settings.NOTIFY_AS_OWN_TASK
    )
    return f"{len(outcomes)} applied or refused: {_tally(outcomes)}" if outcomes else "none due"


def notify_case(case_id: int) -> str:
    """The customer's notification of an applied case: its own step after the apply's answer
    (``reconciliation.apply.notify_case``), enqueued by the apply task that confirmed it."""
    return _notify_case(case_id=case_id)


def _tally(outcomes: list[str]) -> str:
    counts = Counter(outcome.split(":")[0] for outcome in outcomes)
    return ", ".join(f"{n} {word}" for word, n in sorted(counts.items()))


def reconcile_case(case_id: int) -> str:
    from reconciliation.settle import case_reconcile

    with _about(case_id, "reconcile"):
        return case_reconcile(case_id=case_id)


def dispatch_due() -> int:
    return _dispatch_due()


def watchdog() -> int:
    return attempts_expire_leases()


def sweeper() -> str:
    """The cluster's long-lived sweep (see ``reconciliation.sweep``); a second one returns."""
    from reconciliation.sweep import sweeper_run

    return sweeper_run()


def cluster_probe() -> str:
    """The liveness watchdog's probe (``reconciliation.liveness``): taking it is the proof."""
    return "alive"


def prepare_proposal(case_id: int) -> str:
    """Prepare and submit the proposal as soon as the evidence is current."""
    with _about(case_id, "proposer"):
        return _prepare_proposal(case_id)


def _prepare_proposal(case_id: int) -> str:
    if settings.PREPARE_TEST_DELAY_SECONDS:  # test-only, refused in production
        logger.warning(
            "prepare_proposal(%s) in process %s: test delay %ss",
            case_id,
            os.getpid(),
            settings.PREPARE_TEST_DELAY_SECONDS,
        )
        time.sleep(settings.PREPARE_TEST_DELAY_SECONDS)
    case = Case.objects.get(pk=case_id)
    if case.status != Status.PREPARING_PROPOSAL:
        return "skipped"
    if (
        case.proposals.filter(status__in=Proposal.OPEN)
        .exclude(status=Proposal.Status.DRAFT)
        .exists()
    ):
        return "skipped"
    advice = _advisory_note(case)
    try:
        services.proposal_prepare(case=case, actor=Worker.current("proposer"), advisory_note=advice)
    except CaseError:
        return "skipped"  # the case moved on meanwhile; the new state decides
    return "submitted"


def _advisory_note(case: Case) -> str:
    """The case's kind's advice for the approver (``ChangeKind.advisory``), read from the
    order system now: never a reservation, and its failure is advice too."""
    kind = case.change_kind
    try:
        with OrderSystemClient.from_settings() as client:
            return kind.advisory(client, client.get_order(case.order_id), case.change)
    except OrderSystemError as exc:
        return f"{kind.label}: the order system could not be asked ({exc.error})"
