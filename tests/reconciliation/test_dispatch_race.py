"""Dispatchers racing for the same due cases: each due case is enqueued once.

Real threads on PostgreSQL, each on its own connection. Every dispatcher is held right after it
picked its due rows, inside its transaction, until all of them have picked: the race is shown
to have happened, not assumed.
"""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection, connections
from django.utils import timezone

from cases.models import Case
from reconciliation.dispatch import dispatch_due
from reconciliation.restore_detection import marker_advance

DISPATCHERS = 8
DUE_CASES = 12
PICK_LIMIT = 2  # 8 x 2 > 12: together they can pick every case, none alone can


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_eight_dispatchers_racing_enqueue_every_due_case_exactly_once(make_case, monkeypatch):
    """All eight pick their due rows while the others hold theirs (none has committed yet);
    afterwards every due case was enqueued exactly once, and its due time moved by one lease."""
    monkeypatch.setattr("cases.scheduling.enqueue", lambda *call: None)  # intake's own enqueue
    cases = [make_case(request_key=f"race-{n}") for n in range(DUE_CASES)]
    marker_advance()  # the epoch marker exists, as after any earlier tick
    now = timezone.now() + dt.timedelta(minutes=1)
    assert Case.objects.filter(pk__in=[c.pk for c in cases], next_check_at__lte=now).count() == (
        DUE_CASES
    )

    picked_all = threading.Barrier(DISPATCHERS, timeout=20)
    waited = [False] * DISPATCHERS
    enqueued: list[list[tuple[str, int]]] = [[] for _ in range(DISPATCHERS)]
    errors: list[str] = []

    def dispatcher(index: int) -> None:
        def hold_after_pick(execute, sql, params, many, context):
            result = execute(sql, params, many, context)
            if "SKIP LOCKED" in sql:
                # Inside the dispatcher's transaction, its rows locked: wait for the others.
                picked_all.wait()
                waited[index] = True
            return result

        try:
            with connection.execute_wrapper(hold_after_pick):
                dispatch_due(
                    now=now,
                    limit=PICK_LIMIT,
                    run=lambda func, pk: enqueued[index].append((func, pk)),
                )
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(repr(exc))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=dispatcher, args=(i,)) for i in range(DISPATCHERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    # Contention: every dispatcher had picked before any of them committed.
    assert all(waited), waited
    calls = [call for calls in enqueued for call in calls]
    assert sorted(pk for _func, pk in calls) == sorted(c.pk for c in cases)
    assert {func for func, _pk in calls} == {"reconciliation.tasks.source_check"}
    assert all(len(calls) <= PICK_LIMIT for calls in enqueued)
    for case in Case.objects.filter(pk__in=[c.pk for c in cases]):
        assert case.next_check_at > now  # leased once: not due again before the lease passes
    assert dispatch_due(now=now, run=lambda *call: pytest.fail(f"enqueued twice: {call}")) == 0
