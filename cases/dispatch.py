"""The dispatcher: enqueue due work once per case.

A case is due when its ``next_check_at`` has passed. Enqueueing pushes ``next_check_at`` forward
by the lease of that kind of work (``settings.LEASES``) with a compare-and-set, so two
dispatchers never enqueue the same case twice for the same due time, and a task that died is
dispatched again once its lease has passed. The task itself re-reads state and acts only through
services.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from cases import scheduling
from cases.models import Case, Status

logger = logging.getLogger(__name__)

# status -> (task, kind of work whose lease bounds it)
TASK_FOR_STATUS = {
    Status.WAITING_SOURCE: ("reconciliation.tasks.source_check", "source_check"),
    Status.PREPARING_PROPOSAL: ("approvals.tasks.prepare_proposal", "prepare"),
    Status.READY: ("reconciliation.tasks.apply_case", "apply"),
    Status.HELD: ("reconciliation.tasks.reconcile_case", "reconcile"),
}


def dispatch_due(*, now: dt.datetime | None = None, limit: int = 200, run=None) -> int:
    """Enqueue the task for every due case; returns how many were enqueued.

    ``run(func_path, case_id)`` replaces the django-q2 enqueue (``run_worker`` runs in-process).
    """
    from reconciliation.restore import (
        marker_advance,
        recover_after_restore,
        restore_detected,
        restore_detected_at_source,
    )

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
        for pk, status, next_check in due.values_list("pk", "status", "next_check_at")[:limit]:
            func, kind = tasks[status]
            lease = dt.timedelta(seconds=settings.LEASES[kind]["lease_seconds"])
            # Compare-and-set: only the dispatcher that moves this due time enqueues.
            if Case.objects.filter(pk=pk, next_check_at=next_check).update(
                next_check_at=now + lease
            ):
                picked.append((pk, func))
    for pk, func in picked:
        (run or scheduling.enqueue)(func, pk)
    return len(picked)
