"""Approvers deciding the same proposal at once: the case row lock admits exactly one."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth.models import Group
from django.db import connection, connections, transaction

from approvals import services
from approvals.exceptions import ProposalNotCurrent
from approvals.models import Approval, Proposal
from cases.kernel import lock_case
from cases.models import CaseEvent, Status

from .conftest import reload

HOLD_SECONDS = 0.4


def _backend_pid() -> int:
    connection.ensure_connection()
    return connection.connection.info.backend_pid


def _blocked(pids: list[int]) -> set[int]:
    """Which of these backends wait on a lock held by another one right now (a live view)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM unnest(%s::int[]) AS pid WHERE cardinality(pg_blocking_pids(pid)) > 0",
            [pids],
        )
        return {row[0] for row in cursor.fetchall()}


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_approvers_deciding_the_same_proposal_at_once_record_exactly_one_decision(
    proposal, approver, make_user, team, enqueued
):
    """Three approvers (two approve, one rejects) start together while the case row is held.
    All three are shown waiting on the lock at the same moment; once it is released exactly
    one decision is written and the others are told the proposal is no longer current."""
    second = make_user("approver2", "approver", teams=[team])
    third = make_user("approver3", "approver", teams=[team])
    assert Group.objects.filter(name="approver").exists()
    deciders = [
        ("approve", approver),
        ("reject", second),
        ("approve", third),
    ]
    barrier = threading.Barrier(len(deciders) + 1)
    pids: list[int | None] = [None] * len(deciders)
    results: list[dict | None] = [None] * len(deciders)

    def decide(index: int, how: str, user) -> None:
        try:
            pids[index] = _backend_pid()
            barrier.wait(timeout=10)
            started = time.monotonic()
            try:
                if how == "approve":
                    services.proposal_approve(proposal=Proposal(pk=proposal.pk), actor=user)
                else:
                    services.proposal_reject(
                        proposal=Proposal(pk=proposal.pk), actor=user, reason="Not that week"
                    )
                outcome = how
            except ProposalNotCurrent:
                outcome = "not_current"
            results[index] = {"outcome": outcome, "started": started, "ended": time.monotonic()}
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            results[index] = {"outcome": f"error: {exc!r}"}
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=decide, args=(i, how, user))
        for i, (how, user) in enumerate(deciders)
    ]
    with transaction.atomic():
        lock_case(proposal.case_id)  # the admission lock every decision must pass
        for thread in threads:
            thread.start()
        barrier.wait(timeout=10)
        deadline = time.monotonic() + 10
        all_blocked = False
        while time.monotonic() < deadline:
            if _blocked([p for p in pids if p is not None]) == set(pids):
                all_blocked = True
                break
            time.sleep(0.01)
        time.sleep(HOLD_SECONDS)
        released = time.monotonic()
    for thread in threads:
        thread.join(timeout=20)

    assert all_blocked, "the deciders never all waited on the case lock at the same time"
    assert all(r is not None and not r["outcome"].startswith("error") for r in results), results
    outcomes = sorted(r["outcome"] for r in results)
    assert outcomes.count("not_current") == len(deciders) - 1, outcomes
    # Overlap: every call began before the lock was released and ended after it.
    assert all(r["started"] < released < r["ended"] for r in results)
    assert all(r["ended"] - r["started"] >= HOLD_SECONDS for r in results)

    decisions = Approval.objects.filter(proposal=proposal)
    assert decisions.count() == 1
    winner = next(r["outcome"] for r in results if r["outcome"] != "not_current")
    decision = decisions.get()
    assert decision.decision == ("approved" if winner == "approve" else "rejected")
    case = reload(proposal.case)
    assert case.status == (Status.READY if winner == "approve" else Status.PROPOSAL_REJECTED)
    decided = CaseEvent.objects.filter(case=case, from_status=Status.AWAITING_REVIEW)
    assert decided.count() == 1
