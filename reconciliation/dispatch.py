"""The dispatcher: enqueue due work once per due time.

Ready cases are the exception in one respect: an apply task drains the due ready cases after
its own (``reconciliation.apply.apply_due``), so a pass enqueues at most one apply per worker
and leaves the rest of a backlog due for them (and for its next pass).

A case is due when its ``next_check_at`` has passed. Enqueueing pushes ``next_check_at`` forward
by the lease of that kind of work (``settings.LEASES``) with a compare-and-set on the due time
read, in the same transaction, and enqueues only after it commits: of dispatchers racing for a
case, only the one whose compare-and-set moved it enqueues (on PostgreSQL the others also skip
the rows it holds; ``tests/reconciliation/test_dispatch_race.py`` races eight). Once the lease
has passed with the case still due, it is dispatched again: a task that died, was lost by the
broker or still runs past its lease (``cases.checks`` warns when one call to the order system
may outlast it). The task itself re-reads state and acts only through services.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from cases import scheduling
from cases.models import Case, Status
from reconciliation.restore_detection import (
    marker_advance,
    restore_detected,
    restore_detected_at_source,
)
from reconciliation.restore_recovery import recover_after_restore

logger = logging.getLogger(__name__)

# status -> (task, kind of work whose lease bounds it)
TASK_FOR_STATUS = {
    Status.WAITING_SOURCE: ("reconciliation.tasks.source_check", "source_check"),
    Status.PREPARING_PROPOSAL: ("reconciliation.tasks.prepare_proposal", "prepare"),
    Status.READY: ("reconciliation.tasks.apply_case", "apply"),
    Status.HELD: ("reconciliation.tasks.reconcile_case", "reconcile"),
}


def dispatch_due(*, now: dt.datetime | None = None, limit: int = 200, run=None) -> int:
    """Enqueue the task for every due case; returns how many were enqueued.

    ``run(func_path, case_id)`` replaces the django-q2 enqueue (``run_worker`` runs in-process).
    """
    why = restore_detected()
    claims_due = Case.objects.filter(status=Status.READY, next_check_at__lte=now or timezone.now())
    if not why and claims_due.exists():
        # Before handing out claims: the order system has seen nothing these records lack.
        why = restore_detected_at_source()
    if why:
        logger.warning("Database restore detected (%s): recovering before dispatching", why)
        recover_after_restore(progress=logger.info)
    marker_advance()
    now = now or timezone.now()
    tasks = TASK_FOR_STATUS
    picked: list[tuple[int, str]] = []
    with transaction.atomic():
        due = (
            Case.objects.filter(status__in=list(tasks), next_check_at__lte=now)
            # Cases on sandbox orders are drill cases: ``manage.py drill`` drives them itself.
            .exclude(order_id__in=settings.ORDER_SYSTEM_SANDBOX_ORDERS)
            .order_by("next_check_at")
        )
        if connection.vendor == "postgresql":
            due = due.select_for_update(skip_locked=True, of=("self",))
        # An apply task takes each next due ready case itself once its own is done
        # (``APPLY_DRAIN_SECONDS``): a pass starts only as many of them as there are workers and
        # leaves the other ready cases due for them, instead of a task per case.
        starters = settings.Q_CLUSTER["workers"] if settings.APPLY_DRAIN_SECONDS > 0 else limit
        ready_picked = 0
        for pk, status, next_check in due.values_list("pk", "status", "next_check_at")[:limit]:
            if status == Status.READY:
                if ready_picked >= starters:
                    continue
                ready_picked += 1
            func, kind = tasks[Status(status)]
            lease = dt.timedelta(seconds=settings.LEASES[kind]["lease_seconds"])
            # Compare-and-set: only the dispatcher that moves this due time enqueues.
            if Case.objects.filter(pk=pk, next_check_at=next_check).update(
                next_check_at=now + lease
            ):
                picked.append((pk, func))
    for pk, func in picked:
        (run or scheduling.enqueue)(func, pk)
    return len(picked)
