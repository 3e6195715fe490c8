"""A lock that waited reads what the step it waited for left (PostgreSQL, real threads).

In READ COMMITTED, ``SELECT … FOR UPDATE`` that waits for another transaction's row lock reads
the row as that transaction left it, but everything else in the statement (a subquery over
other tables) as it was when the statement began. The case's lock with the audit chain's head
and with whether a cancellation is pending (``cases.kernel.lock_case_at_head``) reads both by
subquery: after a wait they could be from before the step it waited for, and the next event
would then link to a link that is no longer the last (a fork in the chain), or a pending
cancellation would go unmarked. Each step bumps the case's version and records the event of
that version, so a head whose version is not the locked row's is from before the wait, and the
lock reads both again."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections, transaction

from cases.audit import verify_chains
from cases.codes import Action
from cases.kernel import Worker, lock_case, lock_case_at_head, record_fact, writes_batched
from cases.models import CancellationRequest, CaseEvent
from cases.services import CANCELLATION_PENDING

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]

WORKER = Worker("lock-test")


def _blocked(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", [pid])
        return cursor.fetchone()[0]


def _waiting_for(case, step, body) -> tuple[bool, dict[str, object]]:
    """``body(found)`` on a connection of its own, started while this thread holds the case's
    lock; once it waits for that lock, ``step(held)`` runs here and commits. Whether it waited,
    and what ``body`` put in ``found`` (``error``: what it raised)."""
    found: dict[str, object] = {}
    pid: list[int] = []
    connected = threading.Event()

    def run() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pid.append(cursor.fetchone()[0])
            connected.set()
            body(found)
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            found["error"] = repr(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    waited = False
    with transaction.atomic():
        held = lock_case(case.pk)
        thread.start()
        assert connected.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not waited:
            waited = _blocked(pid[0])
            time.sleep(0.01)
        step(held)
    thread.join(timeout=30)
    return waited, found


def test_a_lock_that_waited_reads_the_head_and_the_cancellation_the_step_before_it_left(
    make_case,
):
    case = make_case()

    def step_after(found: dict[str, object]) -> None:
        with transaction.atomic():
            locked, head = lock_case_at_head(case.pk, ("account",), exists=CANCELLATION_PENDING)
            found["pending"] = locked.cancellation_pending
            with writes_batched(locked, head=head):
                record_fact(
                    case=locked,
                    action=Action.STEP_NOTIFIED,
                    actor=WORKER,
                    reason="the step that waited",
                )

    def step_before(held) -> None:  # a cancellation requested, with its event
        CancellationRequest.objects.create(case=held, reason="stop", via="api")
        record_fact(
            case=held, action=Action.CANCELLATION_REQUESTED, actor=WORKER, reason="the step before"
        )

    waited, found = _waiting_for(case, step_before, step_after)

    assert waited, "the second step never waited for the first one's lock"
    assert "error" not in found, found
    assert found["pending"] is True
    assert verify_chains(case_reference=case.reference).ok
    reasons = list(
        CaseEvent.objects.filter(case=case).order_by("id").values_list("reason", flat=True)
    )
    assert reasons[-2:] == ["the step before", "the step that waited"]


def test_a_claim_that_waited_for_a_step_links_its_event_to_that_steps(approved_case):
    """The one-statement claim (``reconciliation.claims``) reads its guards and the chain's head
    by subquery too: after waiting for a step that recorded an event, it writes nothing on that
    read and claims again in a new statement, whose event links to the step's (before, it was
    refused: "changed while it was claimed")."""
    from reconciliation.claims import case_claim

    case = approved_case()

    def claim(found: dict[str, object]) -> None:
        found["attempt"] = case_claim(case_id=case.pk, worker=WORKER).reference

    def step_before(held) -> None:
        record_fact(case=held, action=Action.STEP_NOTIFIED, actor=WORKER, reason="the step before")

    waited, found = _waiting_for(case, step_before, claim)

    assert waited, "the claim never waited for the step's lock"
    assert "error" not in found, found
    assert verify_chains(case_reference=case.reference).ok
    actions = list(
        CaseEvent.objects.filter(case=case).order_by("id").values_list("action", flat=True)
    )
    assert actions[-2:] == [Action.STEP_NOTIFIED, "cases.case.claimed"]
