"""Revoking a work context: an authority event ordered against admission by the case row lock.

Queued and awaiting-approval work closes at once; a running attempt gets a recorded
cancellation intent and a fence at the order system, and settles by the worker's
acknowledgement or its lease expiry. A late result from a fenced attempt is refused and recorded.
"""

from __future__ import annotations

import datetime as dt
import threading
import time

import httpx
import pytest
from django.db import connection, connections
from django.test import TestCase
from django.utils import timezone

from approvals.models import Approval, Proposal
from approvals.services import proposal_approve, proposal_prepare
from cases.exceptions import TransitionRejected
from cases.fencing import next_fencing_token
from cases.kernel import Worker
from cases.models import Attempt, Case, CaseEvent, Status
from cases.services import case_cancel_request
from reconciliation.apply import _apply, apply_case, run_attempt
from reconciliation.claims import ClaimRefused, attempts_expire_leases, case_claim
from reconciliation.client import OrderSystemClient
from reconciliation.revocation import account_revoke_access, case_revoke
from reconciliation.settle import case_reconcile

WORKER = Worker("worker:test:revocation")
RACE_ROUNDS = 6
TIMEOUTS = {"connect": 2.0, "read": 5.0, "write": 2.0, "pool": 2.0}


def _actions(case) -> list[str]:
    return list(CaseEvent.objects.filter(case=case).order_by("id").values_list("action", flat=True))


def _awaiting_review(make_case):
    from reconciliation.sources import source_check
    from reconciliation.tasks import prepare_proposal

    case = make_case()
    assert source_check(case_id=case.pk) == "checked"
    assert prepare_proposal(case.pk) == "submitted"
    case.refresh_from_db()
    assert case.status == Status.AWAITING_REVIEW
    return case


def _refusing_client() -> OrderSystemClient:
    """A client that fails the test if anything is sent to the order system."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"nothing may be sent, got {request.method} {request.url}")

    return OrderSystemClient(
        "http://orders.test", timeouts=TIMEOUTS, transport=httpx.MockTransport(handler)
    )


@pytest.mark.order_system
def test_revoking_a_case_awaiting_review_closes_its_proposal_and_stops_it(
    live_orders, make_case, lead
):
    case = _awaiting_review(make_case)
    proposal = Proposal.objects.get(case=case)

    result = case_revoke(case=case, actor=lead, reason="The customer withdrew", kind="withdrawn")

    assert result.closed_proposals == [proposal.pk]
    assert result.settled is True
    case.refresh_from_db()
    assert case.status == Status.STOPPED
    assert case.revocation_kind == "withdrawn"
    assert case.revoked_at is not None
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.WITHDRAWN
    actions = _actions(case)
    for action in (
        "cases.revocation.requested",
        "cases.revocation.unsettled_discovered",
        "cases.revocation.closed_queued",
    ):
        assert action in actions
    discovered = CaseEvent.objects.get(case=case, action="cases.revocation.unsettled_discovered")
    assert discovered.detail["proposals"] == [proposal.pk]


@pytest.mark.order_system
def test_deleting_a_ready_case_revokes_its_approval_and_stops_it(approved_case, live_orders, lead):
    case = approved_case()
    approval = Approval.objects.get(proposal__case=case)

    result = case_revoke(case=case, actor=lead, reason="Deleted in the admin", kind="deleted")

    assert result.revoked_approvals == [approval.reference]
    approval.refresh_from_db()
    assert approval.revoked_at is not None
    case.refresh_from_db()
    assert case.status == Status.STOPPED
    assert Proposal.objects.get(case=case).status == Proposal.Status.WITHDRAWN
    assert "cases.revocation.closed_queued" in _actions(case)
    assert live_orders.state("ORD-7731")["operations"] == []


@pytest.mark.order_system
def test_admission_after_revocation_is_refused(live_orders, make_case, lead, approver):
    case = _awaiting_review(make_case)
    proposal = Proposal.objects.get(case=case)
    case_revoke(case=case, actor=lead, reason="Withdrawn", kind="withdrawn")

    with pytest.raises(TransitionRejected, match="revoked"):
        proposal_prepare(case=case, actor=WORKER)
    with pytest.raises(TransitionRejected, match="revoked"):
        proposal_approve(proposal=proposal, actor=approver)
    with pytest.raises(ClaimRefused):
        case_claim(case_id=case.pk, worker=WORKER)

    assert not Approval.objects.filter(proposal__case=case).exists()
    assert Proposal.objects.filter(case=case).count() == 1
    assert not Attempt.objects.filter(case=case).exists()


def _revoke_running(approved_case, lead):
    """A case with a claimed attempt (its worker has not sent anything yet), then revoked."""
    case = approved_case()
    attempt = case_claim(case_id=case.pk, worker=WORKER)
    fresh = next_fencing_token()

    # The fence is raised once the revocation commits (the test's transaction never does).
    with TestCase.captureOnCommitCallbacks(execute=True):
        result = case_revoke(case=case, actor=lead, reason="Deleted", kind="deleted")

    assert result.cancel_requested == [attempt.reference]
    assert result.fenced == ["ORD-7731"]
    return case, attempt, fresh


@pytest.mark.order_system
def test_revocation_with_a_running_attempt_records_the_intent_and_raises_the_fence(
    approved_case, live_orders, lead
):
    case, attempt, fresh = _revoke_running(approved_case, lead)

    case.refresh_from_db()
    assert case.status == Status.APPLYING  # the stop is requested, not yet proven
    assert Attempt.objects.get(pk=attempt.pk).state == Attempt.State.CANCEL_REQUESTED
    state = live_orders.state("ORD-7731")
    assert state["fence_token"] >= fresh > attempt.fencing_token
    fenced = CaseEvent.objects.get(case=case, action="cases.revocation.fenced")
    assert fenced.detail["fence_token"] == state["fence_token"]
    assert "cases.attempt.cancel_requested" in _actions(case)


@pytest.mark.order_system
def test_the_worker_sees_the_intent_on_its_heartbeat_and_stops_and_the_case_is_stopped(
    approved_case, live_orders, lead
):
    case, attempt, _ = _revoke_running(approved_case, lead)

    with _refusing_client() as client:
        outcome = run_attempt(attempt_id=attempt.pk, client=client, worker=WORKER)

    assert outcome == "cancel acknowledged"
    assert Attempt.objects.get(pk=attempt.pk).state == Attempt.State.STOPPED
    case.refresh_from_db()
    assert case.status == Status.STOPPED
    actions = _actions(case)
    assert actions.index("cases.attempt.cancel_requested") < actions.index(
        "cases.attempt.worker_stopped"
    )
    assert actions.index("cases.attempt.worker_stopped") < actions.index(
        "cases.attempt.claim_released"
    )
    assert "cases.attempt.lease_expired" not in actions
    assert live_orders.state("ORD-7731")["operations"] == []


@pytest.mark.order_system
def test_when_the_worker_never_answers_lease_expiry_holds_and_reconcile_stops_the_case(
    approved_case, live_orders, lead
):
    case, attempt, _ = _revoke_running(approved_case, lead)

    assert attempts_expire_leases(now=timezone.now() + dt.timedelta(hours=1)) == 1

    case.refresh_from_db()
    assert case.status == Status.HELD
    assert Attempt.objects.get(pk=attempt.pk).state == Attempt.State.LEASE_EXPIRED
    assert case_reconcile(case_id=case.pk) == "stopped"
    case.refresh_from_db()
    assert case.status == Status.STOPPED
    actions = _actions(case)
    assert "cases.attempt.lease_expired" in actions
    assert "cases.attempt.claim_released" in actions
    assert "cases.attempt.worker_stopped" not in actions
    assert live_orders.state("ORD-7731")["operations"] == []


class _RevokeWhileInFlight(httpx.BaseTransport):
    """The worker's apply request is in flight: revocation and its fence land before the
    order system receives it (the paused-worker interleaving, made exact)."""

    def __init__(self, revoke) -> None:
        self._revoke = revoke
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/operations"):
            self._revoke()
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


@pytest.mark.order_system
def test_a_late_result_from_a_fenced_attempt_is_refused_by_the_order_system_and_recorded(
    approved_case, live_orders, lead
):
    case = approved_case()
    attempt = case_claim(case_id=case.pk, worker=WORKER)

    def revoke() -> None:
        with TestCase.captureOnCommitCallbacks(execute=True):
            case_revoke(case=Case(pk=case.pk), actor=lead, reason="Deleted", kind="deleted")

    transport = _RevokeWhileInFlight(revoke)
    with OrderSystemClient(live_orders.base_url, timeouts=TIMEOUTS, transport=transport) as client:
        outcome = run_attempt(attempt_id=attempt.pk, client=client, worker=WORKER)

    assert outcome.startswith("late")
    late = CaseEvent.objects.get(case=case, action="cases.attempt.late_result_refused")
    assert late.detail["outcome"] == "fenced"
    assert "stale_fencing_token" in late.reason
    state = live_orders.state("ORD-7731")
    assert state["operations"] == []
    assert state["order"]["version"] == 1
    case.refresh_from_db()
    assert case.status == Status.STOPPED


@pytest.mark.order_system
def test_a_fenced_attempt_calling_apply_directly_sends_nothing(approved_case, live_orders, lead):
    """Bypassing the heartbeat does not get a cancel-requested attempt past its last local
    check: nothing reaches the order system (and the order system would refuse its token)."""
    case, attempt, _ = _revoke_running(approved_case, lead)
    attempt = Attempt.objects.select_related("operation", "case__account").get(pk=attempt.pk)

    with _refusing_client() as client:
        outcome = _apply(attempt, client, WORKER)

    # Stopped before submitting, and acknowledged at once (worker stopped, case settled).
    assert outcome == "cancel acknowledged"
    assert Attempt.objects.get(pk=attempt.pk).submitted_at is None
    assert live_orders.state("ORD-7731")["operations"] == []


@pytest.mark.order_system
def test_operators_see_cancellation_requested_worker_stopped_lease_expired_and_claim_released(
    approved_case, live_orders, lead, agent
):
    acknowledged, first, _ = _revoke_running(approved_case, lead)
    with _refusing_client() as client:
        run_attempt(attempt_id=first.pk, client=client, worker=WORKER)
    expired = approved_case()
    case_claim(case_id=expired.pk, worker=WORKER)
    case_cancel_request(case=expired, actor=agent, reason="Not needed", via="api")
    attempts_expire_leases(now=timezone.now() + dt.timedelta(hours=1))

    seen = set(
        CaseEvent.objects.filter(case__in=[acknowledged, expired]).values_list("action", flat=True)
    )

    distinct = {
        "cases.attempt.cancel_requested",
        "cases.attempt.worker_stopped",
        "cases.attempt.lease_expired",
        "cases.attempt.claim_released",
    }
    assert distinct <= seen
    assert len(distinct) == 4
    by_case = {
        case.pk: set(CaseEvent.objects.filter(case=case).values_list("action", flat=True))
        for case in (acknowledged, expired)
    }
    assert "cases.attempt.lease_expired" not in by_case[acknowledged.pk]
    assert "cases.attempt.worker_stopped" not in by_case[expired.pk]


def test_revoking_account_access_revokes_every_open_case(make_case, lead, account, agent):
    first = make_case()
    second = make_case()
    closed = make_case()
    case_cancel_request(case=closed, actor=agent, reason="Not needed", via="api")

    results = account_revoke_access(account=account, actor=lead, reason="Contract ended")

    assert {r.case.pk for r in results} == {first.pk, second.pk}
    account.refresh_from_db()
    assert account.access_active is False
    assert account.access_revoked_at is not None
    for case in (first, second):
        case.refresh_from_db()
        assert case.status == Status.STOPPED
        assert case.revocation_kind == "access_revoked"
    closed.refresh_from_db()
    assert closed.status == Status.CANCELLED
    assert closed.revoked_at is None


# --- deletion racing admission (PostgreSQL) -------------------------------------------------


@pytest.mark.order_system
@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_deletion_racing_a_claim_never_leaves_an_admitted_attempt_unseen(
    approved_case, live_orders, lead
):
    """A claim and a revocation start together, round after round. Every round: the revocation
    completes, and either the claim was refused or the revocation saw its attempt (it is
    cancel-requested, never left running)."""
    rounds = []
    for _ in range(RACE_ROUNDS):
        case = approved_case()
        barrier = threading.Barrier(2)
        claim_result: dict = {}
        revoke_result: dict = {}

        def claim(case_id=case.pk, result=claim_result, barrier=barrier) -> None:
            try:
                connection.ensure_connection()
                barrier.wait(timeout=10)
                result["started"] = time.monotonic()
                try:
                    result["won"] = case_claim(case_id=case_id, worker=WORKER).reference
                except ClaimRefused as refusal:
                    result["reason"] = refusal.extra.get("reason")
                result["ended"] = time.monotonic()
            except Exception as exc:  # noqa: BLE001 - reported by the main thread
                result["error"] = repr(exc)
            finally:
                connections.close_all()

        def revoke(case_id=case.pk, result=revoke_result, barrier=barrier) -> None:
            try:
                connection.ensure_connection()
                barrier.wait(timeout=10)
                result["started"] = time.monotonic()
                outcome = case_revoke(
                    case=Case(pk=case_id), actor=lead, reason="Deleted", kind="deleted"
                )
                result["ended"] = time.monotonic()
                result["saw"] = outcome.cancel_requested
            except Exception as exc:  # noqa: BLE001 - reported by the main thread
                result["error"] = repr(exc)
            finally:
                connections.close_all()

        threads = [threading.Thread(target=claim), threading.Thread(target=revoke)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert "error" not in claim_result, claim_result
        assert "error" not in revoke_result, revoke_result

        case.refresh_from_db()
        assert case.revoked_at is not None
        attempts = list(Attempt.objects.filter(case=case))
        # The invariant: no admitted attempt the revocation did not see.
        assert not [a for a in attempts if a.state == Attempt.State.RUNNING]
        if "won" in claim_result:
            assert [a.reference for a in attempts] == [claim_result["won"]]
            assert attempts[0].state == Attempt.State.CANCEL_REQUESTED
            assert revoke_result["saw"] == [claim_result["won"]]
            assert case.status == Status.APPLYING
            winner = "claim"
        else:
            assert attempts == []
            assert revoke_result["saw"] == []
            assert case.status == Status.STOPPED
            winner = "revoke"
        overlapped = (
            claim_result["started"] < revoke_result["ended"]
            and revoke_result["started"] < claim_result["ended"]
        )
        rounds.append((winner, overlapped))

    # Proof the two really raced: the calls overlapped in time in at least one round.
    assert any(overlapped for _, overlapped in rounds), rounds


@pytest.mark.order_system
def test_revoking_again_or_after_the_end_does_nothing(approved_case, live_orders, lead):
    """Revocation happens once, and only while the case has authority left: a held case revoked
    a second time keeps its first revocation, and a finished case is not revoked at all --
    neither writes anything."""
    held = approved_case()
    case_claim(case_id=held.pk, worker=WORKER)
    assert attempts_expire_leases(now=timezone.now() + dt.timedelta(hours=1)) == 1
    first = case_revoke(case=held, actor=lead, reason="Withdrawn", kind="withdrawn", fence=False)
    assert not first.already
    held = Case.objects.get(pk=held.pk)
    assert held.status == Status.HELD  # the outcome is unknown: it stays for reconciliation
    events = _actions(held)

    again = case_revoke(case=held, actor=lead, reason="Deleted", kind="deleted", fence=False)

    assert again.already
    fresh = Case.objects.get(pk=held.pk)
    assert (fresh.revoked_at, fresh.revocation_kind) == (held.revoked_at, "withdrawn")
    assert fresh.version == held.version
    assert _actions(fresh) == events

    done = approved_case()
    assert apply_case(case_id=done.pk) == "done"
    done = Case.objects.get(pk=done.pk)
    events = _actions(done)

    after = case_revoke(case=done, actor=lead, reason="Too late", kind="deleted")

    assert after.already
    fresh = Case.objects.get(pk=done.pk)
    assert fresh.revoked_at is None
    assert fresh.version == done.version
    assert _actions(fresh) == events
