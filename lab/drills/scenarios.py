"""The seed's exercises as drills. Each scenario opens its own drill case, acts with real
worker processes and checks the order system's own records and the case's.

A scenario reports through ``Drill.check`` (a line of evidence each, a failed check ends it);
``Skip`` says why it does not apply to this deployment. Nothing here writes a case except
through services (the same ones the admin, the API and the workers call).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import hmac
import json
import os
import re
import signal
import time
from dataclasses import dataclass, field
from typing import NoReturn, TypeVar

import httpx
from django.conf import settings
from django.db import connections
from django.utils import timezone

from approvals.models import Operation, Proposal
from approvals.services import approvals_expire_due, proposal_approve
from cases.codes import Action
from cases.exceptions import TransitionRejected
from cases.kernel import SYSTEM
from cases.models import Attempt, CancellationRequest, Case, CaseEvent, Status, WaitingOn
from cases.next_action import describe_next_action
from cases.services import case_cancel_request, case_open, open_case_for
from cases.validation import IDENTIFIER_MAX_LENGTH
from lab.drills.deployment import DrillPeople, OrderSystemControl, drill_day, worker_env
from lab.drills.workers import DrillCluster, DrillWorker, wait_for
from reconciliation.claims import attempts_expire_leases
from reconciliation.revocation import case_revoke
from reconciliation.settle import case_reconcile
from reconciliation.sources import source_check
from reconciliation.tasks import prepare_proposal

T = TypeVar("T")


class CheckFailed(AssertionError):
    pass


class Skip(Exception):  # noqa: N818 - a scenario outcome, not an error
    pass


class NotImplementedDrill(Exception):  # noqa: N818
    pass


@dataclass
class Drill:
    """What one scenario works with: the deployment, its own case and workers, its evidence."""

    control: OrderSystemControl
    people: DrillPeople
    order_id: str
    run_id: str
    index: int
    name: str
    holdfast_url: str = ""
    evidence: list[str] = field(default_factory=list)
    workers: list[DrillWorker] = field(default_factory=list)
    current_case: Case | None = None  # set by ``new_case``

    # --- evidence --------------------------------------------------------------------------

    def note(self, text: str) -> None:
        self.evidence.append(text)

    def fail(self, text: str) -> NoReturn:
        self.evidence.append(f"FAILED: {text}")
        raise CheckFailed(text)

    def check(self, condition: object, text: str) -> None:
        if not condition:
            self.fail(text)
        self.evidence.append(f"ok: {text}")

    def present(self, value: T | None, text: str) -> T:
        """``value``, checked (as ``check``) not to be None."""
        if value is None:
            self.fail(text)
        self.evidence.append(f"ok: {text}")
        return value

    # --- the drill case --------------------------------------------------------------------

    def new_case(self) -> Case:
        leftover = open_case_for(
            account=self.people.account, order_id=self.order_id, kind="delivery_date"
        )
        if leftover is not None:
            # An earlier drill (this run's failed one, or a run that was interrupted) left it.
            self.note(
                f"an earlier drill left {leftover.reference} open: {close_drill_case(leftover)}"
            )
        case, _ = case_open(
            actor=SYSTEM,
            account=self.people.account,
            request_key=drill_request_key(self.run_id, self.name),
            order_id=self.order_id,
            kind="delivery_date",
            change={"kind": "delivery_date", "delivery_date": drill_day(self.index).isoformat()},
            note=f"Drill {self.name} (run {self.run_id})",
            drill=True,
        )
        self.current_case = case
        self.note(f"drill case {case.reference} on sandbox order {self.order_id}")
        return case

    @property
    def case(self) -> Case:
        """The drill case; asking for it before ``new_case`` is a mistake in the scenario."""
        if self.current_case is None:
            raise RuntimeError(f"drill {self.name}: no drill case yet (call new_case first)")
        return self.current_case

    def refresh(self) -> Case:
        self.case.refresh_from_db()
        return self.case

    def to_review(self) -> Case:
        case = self.current_case or self.new_case()
        self.check(source_check(case_id=case.pk) == "checked", "the source check read the order")
        self.check(prepare_proposal(case.pk) == "submitted", "a proposal went to review")
        return self.refresh()

    def proposal(self) -> Proposal | None:
        return Proposal.objects.filter(case=self.case).order_by("-pk").first()

    def approve(self, *, expires_at: dt.datetime | None = None) -> Case:
        proposal = Proposal.objects.get(case=self.case, status=Proposal.Status.AWAITING_REVIEW)
        proposal_approve(proposal=proposal, actor=self.people.approver, expires_at=expires_at)
        case = self.refresh()
        self.check(case.status == Status.READY, f"approved: {case.reference} is ready")
        return case

    def ready_case(self, **approve) -> Case:
        self.new_case()
        self.to_review()
        return self.approve(**approve)

    @property
    def key(self) -> str:
        return Operation.objects.get(case=self.case).key

    def operations(self) -> list[dict]:
        """The order system's own records of this case's operation."""
        return self.control.operations(self.order_id, self.key)

    def attempts(self) -> list[Attempt]:
        return list(Attempt.objects.filter(case=self.case).order_by("sequence"))

    # --- workers ---------------------------------------------------------------------------

    def worker(self, *args: str, stop_at: str = "", **env: str) -> DrillWorker:
        if stop_at:
            env["HOLDFAST_DRILL_STOP_AT"] = stop_at
        worker = DrillWorker(list(args), env=worker_env(**env))
        self.workers.append(worker)
        return worker

    def cluster(self, **env: str) -> DrillCluster:
        cluster = DrillCluster(env=worker_env(**env))
        self.workers.append(cluster)
        return cluster

    def apply_worker(self, **kwargs) -> DrillWorker:
        return self.worker("run_worker", "--apply", self.case.reference, **kwargs)

    def task_worker(self, task: str) -> DrillWorker:
        return self.worker("drill", "--task", task, "--case", self.case.reference)

    def wait_stopped(self, worker: DrillWorker, point: str) -> None:
        try:
            wait_for(worker.stopped, timeout=60, what=f"the worker to stop {point}")
        except TimeoutError:
            raise CheckFailed(f"the worker never stopped {point}:\n{worker.output()}") from None
        self.note(f"worker pid {worker.pid} stopped itself {point} (SIGSTOP)")

    def finish(self) -> None:
        for worker in self.workers:
            worker.close()
        try:
            if self.current_case is not None and not self.refresh().is_terminal:
                self.note(f"the drill is over: {close_drill_case(self.case)}")
        except Exception as exc:  # noqa: BLE001 - the next drill's intake names the case
            self.note(f"the drill case could not be closed: {type(exc).__name__}: {exc}")
        connections.close_all()

    # --- coordinator actions (what the deployment's watchdog and reconciler do) -------------

    def expire_lease(self) -> None:
        """Wait for the current attempt's lease to run out, then run the watchdog."""
        attempt = Attempt.objects.filter(case=self.case, state__in=Attempt.ACTIVE).first()
        if attempt is not None:
            delay = (attempt.lease_expires_at - timezone.now()).total_seconds()
            time.sleep(max(delay, 0) + 0.2)
        attempts_expire_leases()
        self.note(f"lease ran out; watchdog: {self.refresh().status}")

    def reconcile(self) -> str:
        outcome = case_reconcile(case_id=self.case.pk)
        self.note(f"reconcile (fence, then the consistent lookup): {outcome}")
        self.refresh()
        return outcome

    def handoff(self) -> str:
        """The handoff facts someone without the original chat reads back."""
        case = self.refresh()
        action = describe_next_action(case)
        facts = (
            f"{case.reference} is {case.get_status_display()}; waiting on "
            f"{case.get_waiting_on_display()}: {case.waiting_reason}; owner "
            f"{case.owner.get_full_name() or case.owner}; backup "
            f"{case.backup.get_full_name() if case.backup else '-'}; who must answer: "
            f"{action.who_must_answer}; follow-up: {action.follow_up}; next: {action.headline}"
        )
        self.note(f"handoff: {facts}")
        self.check(case.owner_id == self.people.lead.pk, "a named owner is responsible")
        self.check(case.backup_id == self.people.backup.pk, "a named backup is responsible")
        self.check(action.headline and action.why_waiting, "the next safe action is stated")
        self.check(action.who_must_answer, "who must answer is stated")
        return facts


def close_drill_case(case: Case) -> str:
    """Close a drill case the drill is done with, and say how it ended.

    One open case per order and kind holds for drill cases on the sandbox order too, so a
    drill case left open (a scenario that ends in review, a failed one) would refuse the next
    drill's intake. Its authority is revoked, as a lead would: what nothing was sent for stops
    at once; an attempt in flight is fenced off and its lease left to run out (drill workers
    hold two-second leases); a held case is reconciled from evidence. A case that is still
    open after that (the order system does not answer) is left for a person, and the next
    drill's intake names it."""
    case_revoke(case=case, actor=SYSTEM, reason="The drill is over")
    case.refresh_from_db()
    attempt = Attempt.objects.filter(case=case, state__in=Attempt.ACTIVE).first()
    if attempt is not None and attempt.lease_expires_at is not None:
        wait = (attempt.lease_expires_at - timezone.now()).total_seconds()
        time.sleep(min(max(wait, 0) + 0.2, 10))
        attempts_expire_leases()
        case.refresh_from_db()
    if case.status == Status.HELD:
        case_reconcile(case_id=case.pk)
        case.refresh_from_db()
    return f"{case.reference} {case.get_status_display().lower()}"


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    expectation: str
    run: object
    fast: bool = False


SCENARIOS: list[Scenario] = []


def scenario(name: str, title: str, expectation: str, *, fast: bool = False):
    def register(func):
        SCENARIOS.append(Scenario(name, title, expectation, func, fast))
        return func

    return register


def _status(outcome: str) -> str:
    return outcome.rpartition(": ")[2] if ": " in outcome else outcome


# --- handoffs ------------------------------------------------------------------------------


@scenario(
    "stop_waiting_for_source",
    "Worker stopped while the case waits for its source",
    "The case stays Waiting for source with its owner, backup, reason and next action; a new "
    "worker reads the order and the case reaches review.",
    fast=True,
)
def stop_waiting_for_source(d: Drill) -> None:
    case = d.new_case()
    d.check(case.status == Status.WAITING_SOURCE, "the case waits for its source")
    d.control.set_fault("latency", seconds=8, path_prefix=f"/orders/{d.order_id}")
    worker = d.task_worker("source_check")
    wait_for(lambda: d.control.fault_consumed("latency"), timeout=60, what="the order read")
    worker.kill()
    d.note(f"worker pid {worker.pid} killed (SIGKILL) while its order read was in flight")
    d.handoff()
    d.check(d.case.status == Status.WAITING_SOURCE, "still waiting for the source")
    d.check(d.case.next_check_at is not None, "a next check time is set")
    d.control.clear_faults()
    again = d.task_worker("source_check").outcome()
    d.note(f"new worker: {again}")
    d.check(_status(again) == "checked", "a new worker read the order")
    d.check(prepare_proposal(d.case.pk) == "submitted", "the proposal went to review")
    d.check(d.refresh().status == Status.AWAITING_REVIEW, "the case awaits review")


@scenario(
    "stop_waiting_for_approval",
    "Worker stopped while the case waits for approval",
    "A worker can do nothing to a case awaiting review; the approvers and the follow-up are "
    "named; nothing reached the order system until the approval, then exactly one change.",
    fast=True,
)
def stop_waiting_for_approval(d: Drill) -> None:
    d.to_review()
    worker = d.apply_worker()
    worker.pause()
    d.note(f"worker pid {worker.pid} paused (SIGSTOP) while the case awaits review")
    time.sleep(0.5)
    worker.resume()
    outcome = worker.outcome()
    d.note(f"worker: {outcome}")
    d.check("refused" in outcome, "the worker was refused: the case is not ready")
    d.handoff()
    d.check(d.case.waiting_on == WaitingOn.APPROVERS, "it waits on an approver")
    d.check(d.case.next_check_at is not None, "the review follow-up time is set")
    d.check(d.operations() == [], f"{d.key} is not at the order system")
    d.approve()
    outcome = d.apply_worker().outcome()
    d.note(f"worker after approval: {outcome}")
    d.check(_status(outcome) == "done", "applied after the approval")
    d.check(len(d.operations()) == 1, f"the order system holds {d.key} once")


# --- missing workers -----------------------------------------------------------------------


@scenario(
    "stop_after_claim_before_submit",
    "Stopped after claim, before submit; two replacements; the original resumes late",
    "The lease runs out and the case is held; reconciliation proves the operation absent; of "
    "two replacements exactly one applies; the original, resumed, sends nothing; every "
    "attempt carries the same operation key; one effect, from the current token.",
)
def stop_after_claim_before_submit(d: Drill) -> None:
    d.ready_case()
    original = d.apply_worker(stop_at="after_claim")
    d.wait_stopped(original, "after its claim, before submitting")
    first = d.attempts()[0]
    d.check(first.submitted_at is None, f"{first.reference} has not submitted")
    d.expire_lease()
    d.check(d.case.status == Status.HELD, "the case is held, not handed to a new worker")
    d.check(d.reconcile() == "absent", "fence + consistent lookup: proven absent")
    d.check(d.case.status == Status.READY, "the same operation may be applied again")
    replacements = [d.apply_worker(), d.apply_worker()]
    outcomes = [w.outcome() for w in replacements]
    d.note(f"replacements: {outcomes}")
    d.check(sum(_status(o) == "done" for o in outcomes) == 1, "exactly one replacement applied")
    original.resume()
    late = original.outcome()
    d.note(f"original resumed (SIGCONT): {late}")
    d.check("stale" in late, "the original stopped without sending")
    ops = d.operations()
    winner = next(a for a in d.attempts() if a.last_confirmed_step)
    d.check(len(ops) == 1, f"one effect for {d.key} at the order system")
    d.check(
        ops[0]["fencing_token"] == winner.fencing_token > first.fencing_token,
        f"the effect carries the current token {winner.fencing_token}, not {first.fencing_token}",
    )
    keys = {a.operation.key for a in d.attempts()}
    d.check(keys == {d.key}, f"every attempt carries {d.key}")
    d.check(d.refresh().status == Status.DONE, "the case is done")


@scenario(
    "stop_after_submit_before_save",
    "Stopped after submit, before saving the result",
    "The order system applied it; the lease runs out and the case is held; reconciliation finds "
    "it applied; the late original's answer is recorded as evidence only; one effect.",
)
def stop_after_submit_before_save(d: Drill) -> None:
    d.ready_case()
    original = d.apply_worker(stop_at="after_submit")
    d.wait_stopped(original, "after submitting, before saving the answer")
    d.check(len(d.operations()) == 1, "the order system already applied it")
    d.check(d.refresh().status == Status.APPLYING, "Holdfast has not saved the answer")
    d.expire_lease()
    d.check(d.case.status == Status.HELD, "held: the effect is unknown to Holdfast")
    d.check(d.reconcile() == "applied", "the consistent lookup proves it applied")
    original.resume()
    late = original.outcome()
    d.note(f"original resumed (SIGCONT): {late}")
    d.check("late" in late or "stale" in late, "the original's answer is evidence only")
    finish = d.apply_worker().outcome()
    d.note(f"next worker: {finish}")
    d.check(d.refresh().status == Status.DONE, "the remaining steps finished: done")
    d.check(len(d.operations()) == 1, f"still one effect for {d.key}")


# --- approvals, races, cancellations -------------------------------------------------------


@scenario(
    "expired_approval",
    "Expired approval",
    "A worker refuses to apply under an expired approval; the case returns to review; nothing "
    "reaches the order system.",
    fast=True,
)
def expired_approval(d: Drill) -> None:
    d.new_case()
    d.to_review()
    expires = (timezone.now() + dt.timedelta(seconds=3)).replace(microsecond=0)
    d.approve(expires_at=expires)
    time.sleep(max((expires - timezone.now()).total_seconds(), 0) + 0.5)
    outcome = d.apply_worker().outcome()
    d.note(f"worker after expiry: {outcome}")
    d.check("refused" in outcome, "the worker refused to apply")
    d.check(d.refresh().status == Status.AWAITING_REVIEW, "the case is back in review")
    d.check(d.operations() == [], "nothing reached the order system")


@scenario(
    "two_workers_claiming",
    "Two workers claim the same case",
    "Exactly one claims and applies; the other is refused; one attempt, one effect.",
    fast=True,
)
def two_workers_claiming(d: Drill) -> None:
    d.ready_case()
    workers = [d.apply_worker(), d.apply_worker()]
    outcomes = [w.outcome() for w in workers]
    d.note(f"workers: {outcomes}")
    d.check(sum(_status(o) == "done" for o in outcomes) == 1, "exactly one worker applied")
    d.check(sum("refused" in o for o in outcomes) == 1, "the other was refused")
    d.check(len(d.attempts()) == 1, "one attempt")
    d.check(len(d.operations()) == 1, "one effect at the order system")


@scenario(
    "cancellation_racing_application",
    "Cancellation races the application",
    "Exactly one wins: cancelled with nothing at the order system, or applied once and the "
    "cancellation recorded as arriving after the change — never cancelled with an effect.",
)
def cancellation_racing_application(d: Drill) -> None:
    d.ready_case()
    worker = d.apply_worker()
    with contextlib.suppress(TimeoutError):
        wait_for(lambda: d.attempts(), timeout=1.5, interval=0.01, what="a claim")
    case = d.refresh()
    try:
        case_cancel_request(
            case=case, actor=d.people.lead, reason="Drill: the customer cancels", via="drill"
        )
    except TransitionRejected as refused:
        # The change won the race outright (the stack's own workers may take an approved case
        # at once): the refused request stays on record, arriving after the change.
        d.note(f"cancellation refused: {refused}")
    d.note(f"cancellation requested while the case was {case.get_status_display()}")
    outcome = worker.outcome()
    d.note(f"worker: {outcome}")
    if d.refresh().status == Status.HELD:
        d.reconcile()
    if d.case.status == Status.READY:
        d.note(f"finishing worker: {d.apply_worker().outcome()}")
    case, ops = d.refresh(), d.operations()
    d.note(f"final: {case.get_status_display()}, {len(ops)} effect(s)")
    d.check(len(ops) <= 1, "at most one effect")
    if case.status == Status.CANCELLED:
        d.check(ops == [], "cancelled, and nothing reached the order system")
    else:
        d.check(len(ops) == 1 and case.status == Status.DONE, "applied once, case done")
        d.check(
            CancellationRequest.objects.filter(case=case).exclude(outcome="pending").exists(),
            "the cancellation is recorded as arriving after the change",
        )


@scenario(
    "source_unavailable_after_timeout",
    "Source unavailable after a timeout",
    "A reply later than the read timeout is effect unknown: held; while the source is "
    "unavailable the case stays held with its owner and a next check; once it answers, the "
    "lookup settles it applied; one effect.",
)
def source_unavailable_after_timeout(d: Drill) -> None:
    d.ready_case()
    delay = 3.0
    d.control.set_fault(
        "delay_after_commit", seconds=delay, path_prefix=f"/orders/{d.order_id}/operations"
    )
    outcome = d.apply_worker(ORDER_SYSTEM_READ_TIMEOUT="1").outcome()
    # The worker gave up 1 s after sending; the order system answers delay - 1 s after that.
    answered = time.monotonic() + delay - 1.0
    d.note(f"worker (1 s read timeout): {outcome}")
    d.check(_status(outcome) == "effect_unknown", "a timeout after sending is effect unknown")
    d.check(d.refresh().status == Status.HELD, "held")
    d.control.set_fault("unavailable", path_prefix="/", times=None)
    d.reconcile()
    d.check(d.case.status == Status.HELD, "unavailable source: still held")
    d.check(d.case.next_check_at is not None, "with a next check time")
    d.handoff()
    d.control.clear_faults()
    d.check(d.reconcile() == "applied", "the source answers: proven applied")
    d.note(f"finishing worker: {d.apply_worker().outcome()}")
    d.check(d.refresh().status == Status.DONE, "done")
    d.check(len(d.operations()) == 1, "one effect")
    # The late answer is still on its way out of the order system: a fault the next scenario
    # arms must not be spent on it.
    time.sleep(max(0.0, answered + 0.5 - time.monotonic()))


@scenario(
    "delayed_not_found",
    "A delayed not found",
    "The lagging search says not found while the order system holds the change; the case stays "
    "held until the consistent lookup proves it applied; never cancelled or re-sent.",
)
def delayed_not_found(d: Drill) -> None:
    from reconciliation.client import OrderSystemClient

    d.ready_case()
    d.control.set_fault("search_lag", seconds=120)
    d.control.set_fault("drop_after_commit", path_prefix=f"/orders/{d.order_id}/operations")
    outcome = d.apply_worker().outcome()
    d.note(f"worker (connection dropped after commit): {outcome}")
    d.check(d.refresh().status == Status.HELD, "held with the effect unknown")
    with OrderSystemClient.from_settings() as client:
        found = client.search_operation(d.key)
    d.note(f"search for {d.key}: {'found' if found else 'not found'}")
    d.check(found is None, "the lagging search answers not found")
    d.check(len(d.operations()) == 1, "but the order system holds the change")
    d.check(d.reconcile() == "applied", "the consistent lookup proves it applied")
    d.control.clear_faults()
    d.note(f"finishing worker: {d.apply_worker().outcome()}")
    d.check(d.refresh().status == Status.DONE, "done, not cancelled")
    d.check(len(d.operations()) == 1, "one effect")


@scenario(
    "expiry_and_cancellation_during_hold",
    "Approval expiry and cancellation during the hold",
    "Both are recorded while the case stays held; no worker may apply under the old approval; "
    "the hold settles from evidence (applied), and the cancellation is marked as after the "
    "change, never shown as cancelled.",
)
def expiry_and_cancellation_during_hold(d: Drill) -> None:
    d.new_case()
    d.to_review()
    # Long enough for the apply below to start under it on a loaded host (5 s expired first
    # under load: the worker refused instead of sending), short enough to wait out.
    expires = (timezone.now() + dt.timedelta(seconds=15)).replace(microsecond=0)
    d.approve(expires_at=expires)
    d.control.set_fault("drop_after_commit", path_prefix=f"/orders/{d.order_id}/operations")
    outcome = d.apply_worker().outcome()
    d.note(f"worker (connection dropped after commit): {outcome}")
    d.check(d.refresh().status == Status.HELD, "held with the effect unknown")
    case_cancel_request(
        case=d.case, actor=d.people.lead, reason="Drill: cancel during the hold", via="drill"
    )
    d.check(d.refresh().status == Status.HELD, "the cancellation is saved; still held")
    d.check(
        CancellationRequest.objects.filter(case=d.case, outcome="pending").exists(),
        "the cancellation is recorded as pending",
    )
    time.sleep(max((expires - timezone.now()).total_seconds(), 0) + 0.5)
    approvals_expire_due()
    d.note(f"approval expired at {expires:%H:%M:%S}; case {d.refresh().get_status_display()}")
    late = d.apply_worker().outcome()
    d.note(f"a later worker: {late}")
    d.check("refused" in late, "no worker may apply during the hold")
    d.check(len(d.operations()) == 1, "one effect (from the first send)")
    d.check(d.reconcile() == "applied", "the hold settles from evidence: applied")
    if d.case.status == Status.READY:
        d.note(f"finishing worker: {d.apply_worker().outcome()}")
    case = d.refresh()
    d.check(case.status != Status.CANCELLED, "not shown as cancelled")
    d.check(
        not CancellationRequest.objects.filter(case=case, outcome="pending").exists(),
        "the cancellation is settled (after the change)",
    )
    d.check(len(d.operations()) == 1, "still one effect")


@scenario(
    "revocation_while_applying",
    "Revocation while applying",
    "The revocation records a cancellation intent and raises the fence; the resumed worker "
    "sends nothing; the case ends stopped with nothing applied.",
)
def revocation_while_applying(d: Drill) -> None:
    d.ready_case()
    worker = d.apply_worker(stop_at="after_claim")
    d.wait_stopped(worker, "after its claim, before submitting")
    attempt = d.attempts()[0]
    result = case_revoke(case=d.refresh(), actor=d.people.lead, reason="Drill: withdrawn")
    d.note(f"revoked: cancel requested {result.cancel_requested}")
    fence = d.control.state(d.order_id)["fence_token"]
    d.check(
        fence is not None and fence > attempt.fencing_token,
        f"the order system's fence ({fence}) is above {attempt.reference}'s token",
    )
    worker.resume()
    late = worker.outcome()
    d.note(f"worker resumed (SIGCONT): {late}")
    d.check(d.operations() == [], "nothing reached the order system")
    if d.refresh().status == Status.APPLYING:
        d.expire_lease()
    if d.case.status == Status.HELD:
        d.reconcile()
    d.check(d.refresh().status == Status.STOPPED, "the case is stopped")
    d.check(d.operations() == [], "still nothing applied")


# --- restores, webhooks, brokers -----------------------------------------------------------


@scenario(
    "restore_older_backup",
    "Restore of an older backup after the order changed",
    "After the case's records are restored to before the apply, the replacement worker finds "
    "the pending operation and checks it against the source before resuming; the order system "
    "holds the operation once, no second write reached it, and the customer is not told twice.",
)
def restore_older_backup(d: Drill) -> None:
    """A backup of the drill case's rows is taken once it is approved and nothing was sent; a
    real worker applies the change (and notifies the customer); then the backup is restored
    over the case (``lab.drills.backup``, drill-only: the rest of the deployment's
    database is left as it is).

    Proves, against a running deployment: detection of a restore from the source with no host
    file (the order system applied an operation key these records show as never sent: the
    fencing sequence is the deployment's and is not restored, so the token comparison cannot
    fire here; drill cases on sandbox orders count like any case, the probe's own keys never
    do); that recovery holds and reconciles the case (fence, then the consistent lookup)
    before any replacement claims it; that the replacement resumes after the apply without
    writing it again (a trip-wire on the order system's write path stays untouched); and that
    the notification the restored records lack is shown as possibly sent, not sent again
    (drill workers print their mail: their logs are read back).

    The recovery it triggers is the deployment's real one: every open case with an unconfirmed
    operation is held and reconciled, and the counters move on (see
    ``reconciliation.restore_recovery``).
    """
    from lab.drills.backup import RestoreRefused, case_rows_backup, case_rows_restore
    from reconciliation.restore_detection import SOURCE_CHECK_MAX_AGE

    d.ready_case()
    backup = case_rows_backup(d.case)
    d.note(
        f"backup of {d.case.reference}'s {backup.row_count} rows taken while it is ready "
        "(approved, nothing sent)"
    )
    key = d.key
    notify_key = f"{key}:notify"
    first = d.apply_worker()
    outcome = first.outcome()
    d.note(f"first worker: {outcome}")
    d.check(_status(outcome) == "done", "a real worker applied the change")
    d.check(len(d.operations()) == 1, f"the order system holds {key}")
    sent_before = first.output().count(notify_key)
    d.check(sent_before >= 1, f"the customer was notified ({notify_key})")
    if d.holdfast_url:
        # A backup restored later was taken before the change; the deployment received the
        # order system's webhook for it meanwhile (and no order system sends it again).
        from reconciliation.models import InboundEvent

        version = Operation.objects.get(case=d.case).result_order_version
        try:
            wait_for(
                lambda: (
                    version is not None
                    and InboundEvent.objects.filter(
                        order_id=d.order_id, order_version=version, processed_at__isnull=False
                    ).exists()
                ),
                timeout=20,
                interval=0.2,
                what="the deployment to process the webhook",
            )
            d.note(f"the deployment processed the webhook for order version {version}")
        except TimeoutError:
            d.note(f"no webhook for order version {version} processed within 20 s")
    tripwire = f"/orders/{d.order_id}/operations"
    d.control.set_fault("latency", seconds=0.01, path_prefix=tripwire, times=1)
    try:
        cut = case_rows_restore(backup, marker_age=SOURCE_CHECK_MAX_AGE + dt.timedelta(seconds=1))
    except RestoreRefused as why:
        raise Skip(str(why)) from None
    restored_at = timezone.now()
    case = d.refresh()
    d.note(
        "restored the backup over the case: cut "
        + ", ".join(f"{n} {label.rpartition('.')[2]}" for label, n in cut.items() if n)
    )
    d.check(
        case.status == Status.READY and not Attempt.objects.filter(case=case).exists(),
        f"the restored records show {case.reference} ready, {key} never sent",
    )
    # Replacement workers, one after another, until the case is settled. A running deployment
    # may detect the restore first (its dispatcher asks too): then the case is held while its
    # recovery runs, and the next replacement resumes after it.
    outcomes: list[str] = []
    deadline = time.monotonic() + 30
    while len(outcomes) < 4 and time.monotonic() < deadline:
        status = d.refresh().status
        if status == Status.READY:
            outcomes.append(d.apply_worker().outcome())
        elif status == Status.HELD:
            time.sleep(0.3)
        else:
            break
    d.note(f"replacement workers: {outcomes}; the case is {d.case.get_status_display()}")
    later = CaseEvent.objects.filter(case=d.case, created_at__gte=restored_at).order_by("pk")
    held = d.present(
        later.filter(detail__transition="hold_for_recovery").first(),
        "recovery held the case: the pending operation was found",
    )
    d.check(
        later.filter(
            action=Action.RESTORE_APPLIED_BEFORE_RESTORE, detail__operation_key=key
        ).exists(),
        f"the source check found {key} applied after the backup was taken",
    )
    claimed = [a for a in d.attempts() if a.claimed_at < held.created_at]
    d.check(not claimed, "no replacement claimed the case before it was checked")
    d.check(
        not any(a.submitted_at for a in d.attempts()),
        "no replacement attempt sent the write",
    )
    d.check(not d.control.fault_consumed("latency"), f"no write reached {tripwire} again")
    ops = d.operations()
    d.check(len(ops) == 1, f"the order system holds exactly one {key}")
    resent = sum(w.output().count(notify_key) for w in d.workers if w is not first)
    d.check(resent == 0, f"no second notification {notify_key} went out")
    d.check(
        later.filter(action=Action.NOTIFICATION_MAY_HAVE_GONE).exists(),
        "the case shows the notification may already have gone",
    )
    d.check(d.refresh().status == Status.DONE, f"{d.case.reference} is done")


def _post_webhook(d: Drill, body: dict) -> str:
    from reconciliation.inbound import inbound_event_process, inbound_event_receive
    from reconciliation.webhooks import EVENT_ID_HEADER, SIGNATURE_HEADER, parse_event

    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    # Signed as the order system signs each delivery: over "<unix seconds>." + the raw body.
    signed_at = str(int(time.time()))
    secret = settings.ORDER_WEBHOOK_SECRET.encode()
    digest = hmac.new(secret, signed_at.encode() + b"." + raw, hashlib.sha256).hexdigest()
    if d.holdfast_url:
        response = httpx.post(
            d.holdfast_url.rstrip("/") + "/api/hooks/orders/",
            content=raw,
            headers={
                "Content-Type": "application/json",
                EVENT_ID_HEADER: body["event_id"],
                SIGNATURE_HEADER: f"t={signed_at},sha256={digest}",
                "X-Orders-Timestamp": signed_at,
            },
            timeout=10,
        )
        return str(response.status_code)
    receipt = inbound_event_receive(**parse_event(raw, body["event_id"]))
    inbound_event_process(event_id=body["event_id"])
    return receipt.body.get("status", "stored")


@scenario(
    "duplicated_out_of_order_webhooks",
    "Duplicated and out-of-order webhooks",
    "Each event is stored once by its id; re-deliveries and old events change nothing: the "
    "case stays done at the same version.",
)
def duplicated_out_of_order_webhooks(d: Drill) -> None:
    from reconciliation.models import InboundEvent

    d.ready_case()
    d.check(_status(d.apply_worker().outcome()) == "done", "applied")
    events = [e for e in d.control.state(d.order_id)["events"] if e["type"] and e["order_version"]][
        -3:
    ]
    d.check(events, "the order system emitted events for the order")
    version = d.refresh().version
    deliveries = [*reversed(events), *events, *reversed(events)]
    answers = []
    for event in deliveries:
        body = {k: event[k] for k in ("event_id", "type", "order_id", "order_version")}
        body["occurred_at"] = event["occurred_at"]
        answers.append(_post_webhook(d, body))
    d.note(f"{len(deliveries)} deliveries of {len(events)} events (reversed, duplicated)")
    ids = [e["event_id"] for e in events]
    d.check(
        InboundEvent.objects.filter(event_id__in=ids).count() == len(ids),
        "each event stored once",
    )
    if d.holdfast_url:
        try:
            wait_for(
                lambda: (
                    not InboundEvent.objects.filter(
                        event_id__in=ids, processed_at__isnull=True
                    ).exists()
                ),
                timeout=30,
                what="the deployment to process the events",
            )
        except TimeoutError:
            d.note("the deployment had not processed every event within 30 s")
    case = d.refresh()
    d.check(case.status == Status.DONE, "the case is still done")
    d.check(case.version == version, f"the case version is unchanged ({version})")
    d.check(len(d.operations()) == 1, "one effect")


REDIS_DEFAULT = "redis://127.0.0.1:6379"
PREPARE_DELAY = 60  # seconds: long enough to stop and kill the worker inside the task


def _free_redis_db(base: str):
    """A Redis database nobody uses (empty), reserved for this scenario; ``(url, client)``."""
    import redis

    base = base.rstrip("/")
    scheme, _, rest = base.partition("://")
    host = rest.split("/", 1)[0]
    used = rest.split("/", 1)[1] if "/" in rest else "0"
    try:
        for number in range(15, 0, -1):
            if str(number) == used:
                continue
            url = f"{scheme}://{host}/{number}"
            client = redis.from_url(url, socket_timeout=3)
            if client.dbsize() == 0 and client.set("holdfast:drill", "reserved", nx=True):
                return url, client
    except redis.RedisError as exc:
        raise Skip(f"no Redis to drill with at {scheme}://{host} ({exc})") from None
    raise Skip(f"no free Redis database at {scheme}://{host}")


def _redis_broker(url: str):
    """The drill cluster's queue, for the enqueues the deployment would make."""
    import redis
    from django_q.brokers.redis_broker import Redis

    class DrillRedis(Redis):
        @staticmethod
        def get_connection(list_key: str | None = None):
            return redis.from_url(url)

    return DrillRedis()


def _dispatch_own_case(d: Drill, broker, *, lease: float) -> bool:
    """The dispatcher's pass for the drill case (the deployment's dispatcher leaves sandbox
    orders to the drill): if its next check is due, move it forward by the stage's lease
    (compare-and-set, as ``reconciliation.dispatch.dispatch_due`` does) and enqueue the stage's
    task."""
    from django_q.tasks import async_task

    from reconciliation.dispatch import TASK_FOR_STATUS

    case = d.refresh()
    now = timezone.now()
    if case.status not in TASK_FOR_STATUS or case.next_check_at is None:
        return False
    if case.next_check_at > now:
        return False
    func, _kind = TASK_FOR_STATUS[case.status]
    if not Case.objects.filter(pk=case.pk, next_check_at=case.next_check_at).update(
        next_check_at=now + dt.timedelta(seconds=lease)
    ):
        return False
    async_task(func, case.pk, broker=broker, group=func.rsplit(".", 1)[-1])
    d.note(f"due at {timezone.localtime(case.next_check_at):%H:%M:%S}: dispatched {func}")
    return True


@scenario(
    "redis_worker_death",
    "Redis broker: a worker dies mid-task",
    "With the Redis broker a killed worker's task is lost; the case is re-driven from the "
    "database (a due next check), never stranded waiting on a worker.",
)
def redis_worker_death(d: Drill) -> None:
    """Runs on any deployment: the drill starts its own ``manage.py run_cluster`` with the Redis
    broker (``REDIS_URL`` at a free database of the Redis at the deployment's ``REDIS_URL``, or
    127.0.0.1:6379) against this deployment's database. Its worker is stopped (SIGSTOP) inside
    ``prepare_proposal`` (``PREPARE_TEST_DELAY_SECONDS``: the task has started and logged its
    process) and killed (SIGKILL); the cluster is stopped and a replacement started. The case
    must hold a due next check in the database, and the dispatcher's pass (the drill's own for
    its case, the same compare-and-set on the due time) re-drives it to review."""
    lease = 3.0
    url, redis_client = _free_redis_db(settings.REDIS_URL or REDIS_DEFAULT)
    try:
        d.note(f"drill cluster broker: {url}")
        broker = _redis_broker(url)
        env = {
            "REDIS_URL": url,
            "Q_WORKERS": "1",
            "SOURCE_CHECK_LEASE_SECONDS": str(lease),
            "SOURCE_CHECK_HEARTBEAT_SECONDS": "1",
            "PREPARE_LEASE_SECONDS": str(lease),
            "PREPARE_HEARTBEAT_SECONDS": "1",
        }
        first = d.cluster(PREPARE_TEST_DELAY_SECONDS=str(PREPARE_DELAY), **env)
        case = d.new_case()
        from django_q.tasks import async_task

        async_task("reconciliation.tasks.source_check", case.pk, broker=broker)
        d.note("source check enqueued on the drill cluster's Redis queue")
        pattern = re.compile(rf"prepare_proposal\({case.pk}\) in process (\d+)")
        try:
            found = wait_for(
                lambda: pattern.search(first.output()), timeout=60, what="prepare_proposal"
            )
        except TimeoutError:
            raise CheckFailed(
                f"the cluster never started prepare_proposal:\n{first.output()[-2000:]}"
            ) from None
        pid = int(found.group(1))
        d.check(
            d.refresh().status == Status.PREPARING_PROPOSAL,
            f"the cluster's worker (pid {pid}) is inside prepare_proposal",
        )
        os.kill(pid, signal.SIGSTOP)
        d.note(f"worker pid {pid} stopped (SIGSTOP) mid-task")
        os.kill(pid, signal.SIGKILL)
        d.note(f"worker pid {pid} killed (SIGKILL)")
        first.stop(grace=3)
        queued = redis_client.llen(broker.list_key)
        d.note(f"the drill cluster stopped; tasks left on its Redis queue: {queued}")
        case = d.refresh()
        d.note(
            f"after the kill: {case.get_status_display()}, waiting on "
            f"{case.get_waiting_on_display()}, next check {case.next_check_at}"
        )
        d.check(case.status == Status.PREPARING_PROPOSAL, "no proposal was prepared")
        d.check(
            case.next_check_at is not None,
            "the case is not left waiting on a worker without a next check",
        )
        d.cluster(**env)
        d.note("a replacement cluster started (same Redis queue, no delay)")

        def reached_review() -> bool:
            _dispatch_own_case(d, broker, lease=lease)
            return d.refresh().status == Status.AWAITING_REVIEW

        try:
            wait_for(
                reached_review,
                timeout=60,
                interval=0.5,
                what="the re-driven case to reach review",
            )
        except TimeoutError:
            case = d.refresh()
            raise CheckFailed(
                f"not re-driven: {case.reference} is {case.get_status_display()}, next check "
                f"{case.next_check_at}"
            ) from None
        proposals = Proposal.objects.filter(case=d.case).exclude(status=Proposal.Status.DRAFT)
        d.check(proposals.count() == 1, "re-driven from the database: one proposal in review")
    finally:
        for worker in d.workers:
            if isinstance(worker, DrillCluster):
                worker.stop(grace=5)
        redis_client.flushdb()  # the database was empty and reserved: only the drill's keys


def lookup(names: list[str] | None, *, fast: bool = False) -> list[Scenario]:
    chosen = [s for s in SCENARIOS if (not names or s.name in names) and (s.fast or not fast)]
    unknown = set(names or ()) - {s.name for s in SCENARIOS}
    if unknown:
        raise KeyError(", ".join(sorted(unknown)))
    return chosen


# --- change kinds: a fault scenario per kind ------------------------------------------------
# The scenarios above drill the delivery date kind. These open cases of the other kinds on the
# same sandbox order: one open case per order and kind, and different kinds on one order may be
# open together. A cancellation really closes the sandbox order, so every scenario here starts
# and ends with the order open again (the seed changes no version and writes no event).

# Scenario name -> the change kinds it drills (the delivery date kind: every scenario above).
KIND_DRILLS: dict[str, tuple[str, ...]] = {}


def kind_scenario(name: str, title: str, expectation: str, *, kinds: tuple[str, ...]):
    KIND_DRILLS[name] = kinds
    return scenario(name, title, expectation, fast=True)


def drill_address(d: Drill, n: int = 0) -> dict:
    """An address the sandbox order has never had: the run and the scenario name it."""
    return {
        "kind": "shipping_address",
        "address": {
            "name": f"Drill {d.name}"[:100],
            "line1": f"{d.index * 10 + n} Drill Lane",
            "line2": f"Run {d.run_id}",
            "city": "Leeds",
            "postal_code": f"LS{d.index % 10} {n}DR",
            "country": "GB",
        },
    }


def drill_request_key(run_id: str, name: str) -> str:
    """The drill case's request key: readable, unique per run and scenario, and within the
    intake's identifier rule (64 characters): a long scenario name is cut and a digest of the
    whole name keeps two such names apart."""
    key = f"drill-{run_id}-{name}"
    if len(key) <= IDENTIFIER_MAX_LENGTH:
        return key
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{key[: IDENTIFIER_MAX_LENGTH - len(digest) - 1]}-{digest}"


def kind_case(d: Drill, change: dict, *, tag: str = "") -> Case:
    """Open a drill case of ``change``'s kind on the sandbox order (closing one an earlier run
    left open) and make it the drill's case."""
    kind = change["kind"]
    leftover = open_case_for(account=d.people.account, order_id=d.order_id, kind=kind)
    if leftover is not None:
        d.note(f"an earlier drill left {leftover.reference} open: {close_drill_case(leftover)}")
    case, _ = case_open(
        actor=SYSTEM,
        account=d.people.account,
        request_key=drill_request_key(d.run_id, f"{d.name}{tag}"),
        order_id=d.order_id,
        kind=kind,
        change=change,
        note=f"Drill {d.name} (run {d.run_id}): {kind}",
        drill=True,
    )
    d.current_case = case
    d.note(f"drill case {case.reference} ({kind}) on sandbox order {d.order_id}")
    return case


def reopen_order(d: Drill) -> dict:
    """The sandbox order open again (a cancellation drill closed it, or an earlier run did)."""
    order = d.control.state(d.order_id)["order"]
    if order["status"] != "open":
        d.control.set_order(d.order_id, status="open", bump_version=False)
        d.note(f"sandbox order {d.order_id} was {order['status']}: open again")
    return d.control.state(d.order_id)["order"]


def _address_effects(operations: list[dict]) -> int:
    return sum(op["change"].get("kind") == "shipping_address" for op in operations)


def order_effects(d: Drill) -> list[dict]:
    """Every effect the order system recorded on the sandbox order."""
    return d.control.state(d.order_id)["operations"]


@kind_scenario(
    "address_dropped_answer",
    "Shipping address: the answer is lost after the order system applied it",
    "The address change is held with its effect unknown; fence + consistent lookup find it "
    "applied with the same change; the case settles from evidence and finishes with no second "
    "write: one effect, and the order shows the new address.",
    kinds=("shipping_address",),
)
def address_dropped_answer(d: Drill) -> None:
    before = reopen_order(d)
    change = drill_address(d)
    kind_case(d, change)
    d.to_review()
    d.approve()
    effects_before = len(order_effects(d))
    d.control.set_fault("drop_after_commit", path_prefix=f"/orders/{d.order_id}/operations")
    outcome = d.apply_worker().outcome()
    d.note(f"worker (connection dropped after commit): {outcome}")
    d.check(d.refresh().status == Status.HELD, "held with the effect unknown")
    d.check(d.case.owner_id is not None and d.case.next_check_at, "held with an owner and a check")
    ops = d.operations()
    d.check(len(ops) == 1, f"the order system holds {d.key} once")
    d.check(ops[0]["change"]["kind"] == "shipping_address", "the effect is an address change")
    d.control.clear_faults()
    d.check(d.reconcile() == "applied", "fence + consistent lookup: applied, the same change")
    if d.case.status == Status.READY:
        d.note(f"finishing worker: {d.apply_worker().outcome()}")
    d.check(d.refresh().status == Status.DONE, "done from evidence")
    d.check(len(d.operations()) == 1, f"still one effect for {d.key}: no second write")
    d.check(
        len(order_effects(d)) == effects_before + 1,
        "the order holds one new effect in all (nothing else was written)",
    )
    order = d.control.state(d.order_id)["order"]
    shown = {k: v for k, v in order["shipping_address"].items() if v}
    d.check(
        shown == {k: v for k, v in change["address"].items() if v},
        f"the order ships to the new address ({order['shipping_address']['line1']})",
    )
    d.check(order["version"] == before["version"] + 1, "the order's version moved once")


@kind_scenario(
    "cancellation_voids_address_review",
    "A cancellation applied while an address change on the same order awaits review",
    "Both cases are open together on one order; the cancellation is approved and applied once "
    "and the order is cancelled; the address change's proposal, read at the older version, is "
    "invalidated; the address never reaches the order system.",
    kinds=("order_cancellation", "shipping_address"),
)
def cancellation_voids_address_review(d: Drill) -> None:
    reopen_order(d)
    address = kind_case(d, drill_address(d), tag="-address")
    d.to_review()
    proposal = d.present(d.proposal(), "the address change has a proposal")
    d.check(d.case.status == Status.AWAITING_REVIEW, "the address change awaits review")
    state = d.control.state(d.order_id)
    address_before = state["order"]["shipping_address"]
    addresses_before = _address_effects(state["operations"])
    try:
        kind_case(d, {"kind": "order_cancellation", "reason_code": "customer_request"})
        d.to_review()
        d.approve()
        outcome = d.apply_worker().outcome()
        d.note(f"worker (cancellation): {outcome}")
        d.check(d.refresh().status == Status.DONE, "the cancellation is done")
        d.check(len(d.operations()) == 1, f"the order system holds {d.key} once")
        d.check(
            d.control.state(d.order_id)["order"]["status"] == "cancelled",
            "the order system's own record: the order is cancelled",
        )
        d.current_case = address
        # The order's webhook may reach the deployment first; either way the source check
        # (or the inbound event) sees the newer version and voids the proposal.
        d.note(f"source check of {address.reference}: {source_check(case_id=address.pk)}")
        proposal.refresh_from_db()
        d.check(
            proposal.status == Proposal.Status.INVALIDATED,
            f"the address proposal is invalidated ({proposal.get_status_display()})",
        )
        d.check(
            d.refresh().status not in {Status.READY, Status.APPLYING, Status.DONE},
            f"the address change cannot be applied ({d.case.get_status_display()})",
        )
        state = d.control.state(d.order_id)
        d.check(
            _address_effects(state["operations"]) == addresses_before
            and state["order"]["shipping_address"] == address_before,
            "the address never reached the order system",
        )
    finally:
        d.current_case = address
        reopen_order(d)


@kind_scenario(
    "cancellation_refused_not_open",
    "A cancellation the order system refuses: the order shipped after the approval",
    "The order ships at the same version after the cancellation was approved; the worker's "
    "write is refused 409 order_not_open, a definite refusal: nothing applied, the case needs "
    "a person, no retry writes; the order stays shipped.",
    kinds=("order_cancellation",),
)
def cancellation_refused_not_open(d: Drill) -> None:
    reopen_order(d)
    try:
        kind_case(d, {"kind": "order_cancellation", "reason_code": "duplicate"})
        d.to_review()
        d.approve()
        version = d.control.state(d.order_id)["order"]["version"]
        # Shipped by the warehouse at the same version: only the receiver's own check, in its
        # applying transaction, can refuse the cancellation now.
        d.control.set_order(d.order_id, status="shipped", bump_version=False)
        d.note(f"sandbox order {d.order_id} shipped at version {version}")
        outcome = d.apply_worker().outcome()
        d.note(f"worker: {outcome}")
        case = d.refresh()
        d.check(
            case.status == Status.NEEDS_ATTENTION,
            f"a definite refusal: the case needs a person ({case.get_status_display()})",
        )
        d.check("order_not_open" in (case.last_error + outcome), "refused with order_not_open")
        d.check(d.operations() == [], f"nothing applied for {d.key}")
        again = d.apply_worker().outcome()
        d.note(f"another worker: {again}")
        d.check(d.operations() == [], "no retry wrote anything")
        order = d.control.state(d.order_id)["order"]
        d.check(
            order["status"] == "shipped" and order["version"] == version,
            "the order system's own record: still shipped, same version",
        )
    finally:
        reopen_order(d)


@kind_scenario(
    "address_country_refused",
    "Shipping address: a country the order system does not ship to",
    "The approver is told before approving that the order system does not ship there; the "
    "write is refused 422 invalid_field, a definite refusal: nothing applied, the case needs "
    "corrected input, and the order keeps its address.",
    kinds=("shipping_address",),
)
def address_country_refused(d: Drill) -> None:
    served = d.control.client.get("/capabilities").json().get("ship_to_countries") or []
    country = next((c for c in ("US", "CA", "AU", "JP", "BR") if c not in served), None)
    if country is None:
        raise Skip("the order system ships to every country this drill would try")
    reopen_order(d)
    before = d.control.state(d.order_id)["order"]
    change = drill_address(d)
    change["address"]["country"] = country
    kind_case(d, change)
    d.to_review()
    proposal = d.present(d.proposal(), "an address proposal awaits review")
    d.check(
        f"does not ship to {country}" in proposal.advisory_note,
        f"the approver is told first: {proposal.advisory_note}",
    )
    d.approve()
    outcome = d.apply_worker().outcome()
    d.note(f"worker: {outcome}")
    case = d.refresh()
    d.check(
        case.status == Status.NEEDS_ATTENTION,
        f"a definite refusal: the case needs corrected input ({case.get_status_display()})",
    )
    d.check(
        "invalid_field" in case.last_error,
        f"refused as invalid input, not retried: {case.last_error}",
    )
    d.check(d.operations() == [], f"nothing applied for {d.key}")
    order = d.control.state(d.order_id)["order"]
    d.check(
        order["shipping_address"] == before["shipping_address"]
        and order["version"] == before["version"],
        "the order system's own record: the address and version are unchanged",
    )
