"""Every stage is re-driven from the database, never from the broker.

A queued task may be lost (the Redis broker drops the task of a killed worker). So every status
in which a worker acts next carries a due ``next_check_at`` that the dispatcher leases with a
compare-and-set, inbound events carry a due time of their own, and the sweep that finds them
runs on an interval derived from the shortest lease.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import threading
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.utils import timezone
from django.utils.module_loading import import_string
from django_q.models import OrmQ, Schedule

from approvals.models import Proposal
from approvals.services import proposal_approve
from cases.kernel import WAITING_AFTER, Worker
from cases.models import Case, Status, WaitingOn
from reconciliation import sweep
from reconciliation.claims import attempts_expire_leases, case_claim
from reconciliation.dispatch import TASK_FOR_STATUS, dispatch_due
from reconciliation.models import InboundEvent
from reconciliation.sources import source_check
from reconciliation.tasks import prepare_proposal

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def lost(monkeypatch) -> list[tuple]:
    """Work handed to the broker and lost there (recorded, never run)."""
    calls: list[tuple] = []
    monkeypatch.setattr("cases.scheduling.enqueue", lambda func, *args: calls.append((func, *args)))
    return calls


def _worker_waits_with_a_due_time(case: Case, seen: list[str]) -> None:
    case.refresh_from_db()
    seen.append(case.status)
    if case.waiting_on == WaitingOn.WORKER:
        assert case.next_check_at is not None, f"{case.status}: waits on a worker, no next check"


def test_every_status_a_worker_acts_in_next_has_a_next_check(
    make_case, live_orders, autonomous, approver, lost, django_capture_on_commit_callbacks
):
    seen: list[str] = []
    case = make_case()
    _worker_waits_with_a_due_time(case, seen)
    with django_capture_on_commit_callbacks(execute=True):
        assert source_check(case_id=case.pk) == "checked"
    _worker_waits_with_a_due_time(case, seen)
    with django_capture_on_commit_callbacks(execute=True):
        assert prepare_proposal(case.pk) == "submitted"
    _worker_waits_with_a_due_time(case, seen)
    proposal = Proposal.objects.get(case=case, status=Proposal.Status.AWAITING_REVIEW)
    with django_capture_on_commit_callbacks(execute=True):
        proposal_approve(proposal=proposal, actor=approver)
    _worker_waits_with_a_due_time(case, seen)
    attempt = case_claim(case_id=case.pk, worker=Worker("w1"))
    _worker_waits_with_a_due_time(case, seen)
    case.refresh_from_db()
    assert case.next_check_at == attempt.lease_expires_at  # the watchdog's look
    assert attempts_expire_leases(now=attempt.lease_expires_at + dt.timedelta(seconds=1)) == 1
    _worker_waits_with_a_due_time(case, seen)
    assert seen == ["waiting_source", "preparing_proposal", "awaiting_review", "ready"] + [
        "applying",
        "held",
    ]


def test_the_dispatcher_covers_every_status_a_transition_hands_to_a_worker():
    worker_targets = set()
    for name, (waiting_on, _reason) in WAITING_AFTER.items():
        if waiting_on == WaitingOn.WORKER:
            meta = getattr(Case, name)._django_fsm
            worker_targets.update(t.target for t in meta.transitions.values())
    assert worker_targets, "no transition hands a case to a worker?"
    # Applying is the watchdog's: its due time is the attempt's lease.
    assert worker_targets - {Status.APPLYING} <= set(TASK_FOR_STATUS), worker_targets
    for status, (func, kind) in TASK_FOR_STATUS.items():
        assert callable(import_string(func)), (status, func)
        assert settings.LEASES[kind]["lease_seconds"] > 0, (status, kind)


def test_a_lost_prepare_task_is_re_driven_by_the_dispatcher_once_per_lease(
    case, live_orders, lost, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        assert source_check(case_id=case.pk) == "checked"
    assert lost == [("reconciliation.tasks.prepare_proposal", case.pk)]  # queued, then lost
    case.refresh_from_db()
    assert case.status == Status.PREPARING_PROPOSAL

    ran: list[tuple] = []
    now = timezone.now()
    assert dispatch_due(now=now, run=lambda func, pk: ran.append((func, pk))) == 1
    assert ran == [("reconciliation.tasks.prepare_proposal", case.pk)]
    # Within the lease a second dispatcher leaves it to the first...
    assert dispatch_due(now=now + dt.timedelta(seconds=1), run=ran.append) == 0
    # ...and once the lease has passed with no result, it is dispatched again.
    lease = settings.LEASES["prepare"]["lease_seconds"]
    later = now + dt.timedelta(seconds=lease + 0.1)
    assert dispatch_due(now=later, run=lambda func, pk: ran.append((func, pk))) == 1
    with django_capture_on_commit_callbacks(execute=True):
        assert import_string(ran[-1][0])(case.pk) == "submitted"
    case.refresh_from_db()
    assert case.status == Status.AWAITING_REVIEW


def test_a_persons_draft_is_left_to_its_author(case, live_orders, agent, lost):
    from approvals.services import proposal_prepare

    assert source_check(case_id=case.pk) == "checked"
    proposal_prepare(case=Case.objects.get(pk=case.pk), actor=agent, submit=False)
    case.refresh_from_db()
    assert (case.waiting_on, case.next_check_at) == (WaitingOn.OWNER, None)
    assert dispatch_due(run=lambda *a: pytest.fail("a worker would replace the draft")) == 0


def _stored_event(event_id: str, *, processing: str, next_attempt_at, attempts: int = 0):
    now = timezone.now()
    return InboundEvent.objects.create(
        event_id=event_id,
        type="order.updated",
        order_id="ORD-NONE",
        order_version=2,
        occurred_at=now,
        body={},
        received_at=now,
        last_received_at=now,
        processing=processing,
        attempts=attempts,
        next_attempt_at=next_attempt_at,
    )


def test_a_stranded_inbound_event_is_re_driven_after_its_lease(db):
    lease = sweep.inbound_lease()
    now = timezone.now()
    fresh = _stored_event("evt-fresh", processing="pending", next_attempt_at=now)
    stranded = _stored_event("evt-lost", processing="pending", next_attempt_at=now - lease)
    assert sweep.inbound_events_redrive(now=now) == {"processed": 1}
    stranded.refresh_from_db()
    fresh.refresh_from_db()
    assert stranded.processing == "processed"
    assert fresh.processing == "pending"  # its own task still has the lease
    assert sweep.inbound_events_redrive(now=now + lease) == {"processed": 1}


def test_a_sweep_that_dies_mid_event_leaves_it_due_again_one_lease_later(db, monkeypatch):
    lease = sweep.inbound_lease()
    now = timezone.now()
    event = _stored_event("evt-1", processing="failed", next_attempt_at=now, attempts=1)

    def worker_dies(**kwargs):
        raise KeyboardInterrupt  # the process is gone before processing recorded anything

    monkeypatch.setattr("reconciliation.inbound.inbound_event_process", worker_dies)
    with pytest.raises(KeyboardInterrupt):
        sweep.inbound_events_redrive(now=now)
    event.refresh_from_db()
    assert event.next_attempt_at == now + lease  # taken: no other sweep runs it meanwhile
    monkeypatch.undo()
    assert sweep.inbound_events_redrive(now=now + dt.timedelta(seconds=1)) == {}
    assert sweep.inbound_events_redrive(now=now + lease) == {"processed": 1}


def test_the_sweep_interval_is_derived_from_the_shortest_lease():
    assert max(1.0, settings.SHORTEST_LEASE_SECONDS / 2) >= settings.SWEEP_INTERVAL_SECONDS
    code = "from django.conf import settings; print(settings.SWEEP_INTERVAL_SECONDS)"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "DJANGO_ENV": "test"}
    out = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        cwd=ROOT,
        env={**env, "APPLY_LEASE_SECONDS": "8", "APPLY_HEARTBEAT_SECONDS": "2"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert float(out.stdout.strip()) == 4.0


def test_only_one_sweeper_holds_the_lock(db):
    other: list[bool] = []

    def try_lock():
        try:
            with sweep.sweeper_lock() as mine:
                other.append(mine)
        finally:
            connections.close_all()

    with sweep.sweeper_lock() as mine:
        thread = threading.Thread(target=try_lock)
        thread.start()
        thread.join()
    assert (mine, other) == (True, [False])


def test_the_sweeper_sweeps_then_enqueues_its_successor(case, live_orders, lost, settings):
    settings.SWEEP_INTERVAL_SECONDS = 0.1
    case.next_check_at = timezone.now()
    Case.objects.filter(pk=case.pk).update(next_check_at=case.next_check_at)
    outcome = sweep.sweeper_run(duration=0.25)
    assert outcome.startswith("swept ")
    assert int(outcome.split()[1]) >= 2
    assert ("reconciliation.tasks.source_check", case.pk) in lost
    assert lost[-1] == (sweep.SWEEPER_TASK,)


def test_the_minute_schedules_gave_way_to_the_sweeper(db):
    funcs = set(Schedule.objects.values_list("func", flat=True))
    assert "reconciliation.tasks.sweeper" in funcs
    assert not funcs & {
        "cases.tasks.dispatch_due",
        "reconciliation.tasks.watchdog",
        "approvals.tasks.expire_approvals",
        "reconciliation.tasks_inbound.retry_failed_events",
    }


def test_run_worker_alone_brings_a_new_case_to_review(case, live_orders, autonomous):
    Case.objects.filter(pk=case.pk).update(next_check_at=timezone.now())
    out = StringIO()
    # Two passes: the source check, then the proposal it left due (this test's transaction
    # never commits, so the fast path it queued on commit does not run: the re-drive does).
    call_command("run_worker", "--once", stdout=out)
    call_command("run_worker", "--once", stdout=out)
    case.refresh_from_db()
    assert case.status == Status.AWAITING_REVIEW, out.getvalue()
    assert OrmQ.objects.count() == 0  # it ran its own work; nothing went to the broker


def _sweeper_lock_holder() -> int | None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        row = cursor.fetchone()
    return row[0] if row else None


@pytest.mark.postgres_only
def test_a_sweeper_whose_connection_is_cut_backs_off_and_sweeps_on_under_its_lock(
    transactional_db, settings
):
    """The database drops the sweeper's connection (a restart, an admin's terminate, an
    exhausted server): the advisory lock goes with it. The sweeper waits, takes the lock
    again on a new connection and sweeps on; before, it swept on without the lock."""
    from django.db import connection

    from tests.support.proc_worker import wait_for

    settings.SWEEP_INTERVAL_SECONDS = 0.2
    result: list[str] = []

    def run() -> None:
        try:
            result.append(sweep.sweeper_run(duration=8, successor=False))
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        first = wait_for(_sweeper_lock_holder, timeout=10, what="the sweeper's lock")
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [first])
        second = wait_for(
            lambda: (holder := _sweeper_lock_holder()) not in (None, first) and holder,
            timeout=6,
            what="the sweeper to take its lock again",
        )
        assert thread.is_alive()  # still sweeping, under the lock
    finally:
        thread.join(timeout=30)
    assert second != first
    assert len(result) == 1
    assert result[0].startswith("swept "), result
    assert "another sweeper" not in result[0]
