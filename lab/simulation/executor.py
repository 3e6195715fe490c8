"""Run one generated schedule through Holdfast's services, in-process, against a live order
system.

Workers are logical actors calling the worker functions (claim, apply with its step runners,
heartbeat, reconcile). Concurrency is modelled by interleaving, so a schedule replays exactly:

- **pause**: a worker claims and does not continue, or is frozen at the moment its write would
  leave (``pause_at_send``: the write is held back, nothing after it runs). A later ``run``
  step wakes it: the held-back write reaches the order system with the worker's old fencing
  token and grant, and the worker records the answer as its own code would
  (``attempt_record_applied`` / ``attempt_record_refusal``), then continues its remaining steps.
- **kill**: a worker that never continues; ``kill_after_send``: the write reaches the order
  system and the worker dies before recording anything.
- **lease expiry**: the watchdog runs with a ``now`` one lease ahead.
- **approval expiry**: the approval's stored expiry is moved to now (the clock passing it). The
  signed grant still carries the original expiry, so the receiver would accept it: only
  Holdfast's own guards can keep such an approval from producing an effect.
- **restore**: a savepoint taken at ``snapshot`` is rolled back and the fencing sequence is set
  back to its value then (what ``pg_restore`` does); the order system and the host's epoch
  file keep what happened after it.

Every schedule runs inside one transaction that is rolled back at the end; nothing is ever
enqueued (``on_commit`` never fires).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from approvals.models import Approval, Operation, Proposal
from approvals.services import (
    approvals_expire_due,
    case_change_intent,
    proposal_approve,
    proposal_prepare,
)
from cases.append_only import maintenance
from cases.exceptions import CaseError
from cases.fencing import FENCING_SEQUENCE, fencing_current
from cases.kernel import SYSTEM, Worker
from cases.models import Attempt, Case, Status
from cases.services import case_cancel_request, case_open
from lab.simulation.generator import describe
from reconciliation.apply import (
    apply_case,
    attempt_record_applied,
    attempt_record_refusal,
    run_attempt,
)
from reconciliation.claims import ClaimRefused, attempts_expire_leases, case_claim
from reconciliation.client import OrderSystemClient
from reconciliation.dispatch import dispatch_due
from reconciliation.exceptions import OrderSystemError
from reconciliation.inbound import inbound_event_process, inbound_event_receive
from reconciliation.restore_detection import RecoveryRequired
from reconciliation.settle import case_reconcile

GRACE = dt.timedelta(seconds=5)
CANCEL_REASONS = ("customer_request", "duplicate", "fraud_suspected", "other")
# What the reference order system gives an order seeded without an address
# (orders.services.SEED_ADDRESS); the simulation seeds it explicitly.
SEED_ADDRESS = {
    "name": "Goods In",
    "line1": "1 Dock Road",
    "line2": "",
    "city": "Bristol",
    "postal_code": "BS1 6XX",
    "country": "GB",
}


def describe_change(change: dict) -> str:
    if change["kind"] == "shipping_address":
        return f"address {change['address']['line1']}"
    if change["kind"] == "order_cancellation":
        return f"cancellation ({change['reason_code']})"
    return str(change["delivery_date"])


def _operation_key(approval: Approval) -> str:
    """The key of the operation an approval authorizes: ``proposal_approve`` always names one."""
    if approval.operation is None:
        raise AssertionError(f"approval {approval.reference} names no operation")
    return approval.operation.key


class Paused(BaseException):  # noqa: N818 - a control signal, not an error
    """The worker froze just before its write left; nothing after it ran."""

    def __init__(self, order_id: str, kwargs: dict) -> None:
        super().__init__(order_id)
        self.order_id, self.kwargs = order_id, kwargs
        self.frozen_at = timezone.now()


class Killed(BaseException):  # noqa: N818 - a control signal, not an error
    """The worker died right after its write reached the order system."""


@dataclass
class Journal:
    """What the simulation saw, kept outside the database so a restore cannot erase it."""

    attempts: dict[int, dict] = field(default_factory=dict)
    approvals: dict[int, dict] = field(default_factory=dict)
    operations: dict[str, dict] = field(default_factory=dict)
    fences: list[dict] = field(default_factory=list)
    intent_changes: list[dict] = field(default_factory=list)
    restores: list[dt.datetime] = field(default_factory=list)
    # Writes that left late (a frozen worker woke): Holdfast decided to send them at
    # ``frozen_at``; after that only the receiver can refuse them.
    late_writes: list[dict] = field(default_factory=list)
    applying_without_attempt: list[str] = field(default_factory=list)
    held_without_owner: list[str] = field(default_factory=list)
    # order id -> when it shipped (the order system refuses every change after).
    shipped: dict[str, dt.datetime] = field(default_factory=dict)


class SimClient(OrderSystemClient):
    """The real client, with the two places a process can freeze or die around its write."""

    journal: Journal | None = None
    plan: str = ""

    def apply_operation(self, order_id, **kwargs):
        plan, self.plan = self.plan, ""
        if plan == "pause_at_send":
            raise Paused(order_id, kwargs)
        result = super().apply_operation(order_id, **kwargs)
        if plan == "kill_after_send":
            raise Killed
        return result

    def fence(self, order_id, fencing_token):
        result = super().fence(order_id, fencing_token)
        if self.journal is not None:
            self.journal.fences.append(
                {"order_id": order_id, "token": fencing_token, "at": timezone.now()}
            )
        return result


@dataclass
class WorkerState:
    attempt_id: int | None = None
    paused: Paused | None = None


class Executor:
    def __init__(self, *, world, orders, clients: dict[str, SimClient], schedule: dict) -> None:
        self.world = world
        self.orders = orders  # the order system process (control API)
        self.clients = clients
        self.schedule = schedule
        self.journal = Journal()
        for client in clients.values():
            client.journal, client.plan = self.journal, ""
        self.case_pks: list[int | None] = [None] * schedule["cases"]
        self.workers = {name: WorkerState() for name in ("w1", "w2", "w3", "drain")}
        self.snapshot: tuple[str, int] | None = None
        self.log: list[str] = []

    # --- helpers ---------------------------------------------------------------------------

    def order_id(self, index: int) -> str:
        """The order case ``index`` works on (cases of different kinds may share one)."""
        shared = self.schedule.get("orders") or range(self.schedule["cases"])
        return f"ORD-S{shared[index] + 1}"

    def order_ids(self) -> list[str]:
        """The schedule's orders, each once."""
        return sorted({self.order_id(i) for i in range(self.schedule["cases"])})

    def kind_of(self, index: int) -> str:
        return (self.schedule.get("kinds") or ["delivery_date"] * (index + 1))[index]

    def seeded(self) -> dict[str, dict]:
        """Each order's fields as ``seed_orders`` sets them (what no effect has touched)."""
        day = timezone.localdate() + dt.timedelta(days=3)
        return {
            order: {
                "status": "open",
                "delivery_date": day.isoformat(),
                "shipping_address": dict(SEED_ADDRESS),
            }
            for order in self.order_ids()
        }

    def case(self, index: int) -> Case | None:
        pk = self.case_pks[index]
        return Case.objects.filter(pk=pk).first() if pk else None

    def worker(self, name: str) -> Worker:
        return Worker(f"sim:{name}")

    def seed_orders(self) -> None:
        today = timezone.localdate()
        self.orders.seed(
            accounts=[{"account_id": self.world.account.reference, "name": "Sim"}],
            orders=[
                {
                    "order_id": order,
                    "account_id": self.world.account.reference,
                    **fields,
                }
                for order, fields in self.seeded().items()
            ],
            slots=[
                # The dates a schedule can ask for (7-9 days out; 5-20 after a change).
                {"date": str(today + dt.timedelta(days=d)), "capacity": 5}
                for d in range(5, 21)
            ],
        )

    # --- running ---------------------------------------------------------------------------

    def run(self) -> None:
        for number, step in enumerate(self.schedule["steps"]):
            self.ship_due(number)
            try:
                outcome = getattr(self, f"step_{step['kind']}")(step)
            except (Paused, Killed) as signal:  # pragma: no cover - caught in the steps
                outcome = f"unexpected {type(signal).__name__}"
            self.log.append(f"{number:2d} {describe(step)} -> {outcome}")
            if step["kind"] not in {"fault", "snapshot", "order_changed", "lease_expiry"}:
                self.capture()
            self.check_states(number)
        self.ship_due(len(self.schedule["steps"]))

    def ship_due(self, number: int) -> None:
        """The orders that ship before step ``number`` (``schedule["ships"]``): an open order
        becomes shipped at its version, as a warehouse would; what comes after is refused by
        the receiver alone."""
        for at, case in self.schedule.get("ships", []):
            if at != number:
                continue
            order = self.order_id(case)
            status = self.orders.state(order)["order"]["status"]
            if status != "open":
                self.log.append(f"   {order} would ship: it is {status}")
                continue
            self.orders.set_order(order, status="shipped", bump_version=False)
            self.journal.shipped[order] = timezone.now()
            self.log.append(f"   {order} shipped (same version)")

    def capture(self) -> None:
        """Copy what the records show now into the journal (a restore may erase it later)."""
        pks = [pk for pk in self.case_pks if pk]
        index_of = {pk: i for i, pk in enumerate(self.case_pks) if pk}
        for attempt in Attempt.objects.filter(case_id__in=pks).select_related("operation"):
            self.journal.attempts.setdefault(
                attempt.pk,
                {
                    "case": index_of[attempt.case_id],
                    "reference": attempt.reference,
                    "token": attempt.fencing_token,
                    "operation_key": attempt.operation.key,
                    "claimed_at": attempt.claimed_at,
                },
            )
        for operation in Operation.objects.filter(case_id__in=pks):
            self.journal.operations.setdefault(
                operation.key,
                {"case": index_of[operation.case_id], "order_id": operation.order_id},
            )
        for approval in Approval.objects.filter(
            proposal__case_id__in=pks, decision=Approval.Decision.APPROVED
        ).select_related("proposal", "operation"):
            seen = self.journal.approvals.setdefault(
                approval.pk,
                {
                    "reference": approval.reference,
                    "case": index_of[approval.proposal.case_id],
                    "operation_key": _operation_key(approval),
                    "order_id": approval.proposal.order_id,
                    "change": approval.proposal.change,
                    "expires_at": approval.expires_at,
                    "revoked_at": approval.revoked_at,
                },
            )
            # The earliest end any copy of the records ever showed is the one that counts.
            seen["expires_at"] = min(seen["expires_at"], approval.expires_at)
            if approval.revoked_at and (
                seen["revoked_at"] is None or approval.revoked_at < seen["revoked_at"]
            ):
                seen["revoked_at"] = approval.revoked_at

    def check_states(self, number: int) -> None:
        """Between steps: an applying case has a live attempt; a held case has a responsible
        person and a next check."""
        for case in Case.objects.filter(pk__in=[pk for pk in self.case_pks if pk]):
            if (
                case.status == Status.APPLYING
                and not case.attempts.filter(state__in=Attempt.ACTIVE).exists()
            ):
                self.journal.applying_without_attempt.append(f"step {number}: {case.reference}")
            if case.status == Status.HELD and (case.owner_id is None or case.next_check_at is None):
                self.journal.held_without_owner.append(
                    f"step {number}: {case.reference} owner={case.owner_id} "
                    f"next_check_at={case.next_check_at}"
                )

    # --- steps -----------------------------------------------------------------------------

    def step_advance(self, step: dict) -> str:
        case = self.case(step["case"])
        if case is None:
            return self.step_intake(step)
        status = case.status
        if status == Status.WAITING_SOURCE:
            return "source check: " + self._source_check(case)
        if status == Status.PREPARING_PROPOSAL:
            return self._prepare(case)
        if status == Status.AWAITING_REVIEW:
            return self._approve(case)
        if status == Status.READY:
            return self.step_apply({**step, "mode": "normal"})
        if status == Status.HELD:
            return self.step_reconcile(step)
        if status == Status.APPLYING:
            for name, state in self.workers.items():
                if (
                    state.attempt_id
                    and Attempt.objects.filter(pk=state.attempt_id, case=case).exists()
                ):
                    return self.step_run({**step, "worker": name})
            return "applying: its worker is gone (only the watchdog can help)"
        return f"rest ({status})"

    def step_intake(self, step: dict) -> str:
        index = step["case"]
        kind = self.kind_of(index)
        try:
            case, created = case_open(
                actor=SYSTEM,
                account=self.world.account,
                request_key=f"sim-{index}",
                order_id=self.order_id(index),
                kind=kind,
                change=self.change_for(index, 7 + index),
            )
        except CaseError as exc:
            return f"intake refused: {exc.code}"
        self.case_pks[index] = case.pk
        return f"intake {case.reference} {kind} ({'new' if created else 'same case'})"

    def change_for(self, index: int, days: int) -> dict:
        """Case ``index``'s change, variant ``days``: a delivery ``days`` out; an address
        numbered ``days`` (another street for another variant); a cancellation reason that
        turns with ``days``."""
        kind = self.kind_of(index)
        if kind == "shipping_address":
            return {
                "kind": kind,
                "address": {
                    "name": f"Sim Customer {index + 1}",
                    "line1": f"{days} Harbour Road",
                    "city": "Leeds",
                    "postal_code": f"LS{index + 1} {days % 10}AB",
                    "country": "GB",
                },
            }
        if kind == "order_cancellation":
            return {"kind": kind, "reason_code": CANCEL_REASONS[days % len(CANCEL_REASONS)]}
        day = timezone.localdate() + dt.timedelta(days=days)
        return {"kind": "delivery_date", "delivery_date": day.isoformat()}

    def _source_check(self, case: Case) -> str:
        from reconciliation.sources import source_check

        return source_check(case_id=case.pk, client=self.clients["system"])

    def _prepare(self, case: Case) -> str:
        # What reconciliation.tasks.prepare_proposal does, without its advisory slot read.
        if (
            case.proposals.filter(status__in=Proposal.OPEN)
            .exclude(status=Proposal.Status.DRAFT)
            .exists()
        ):
            return "prepare: skipped"
        try:
            proposal = proposal_prepare(
                case=case, actor=Worker("sim:proposer"), advisory_note="(simulation)"
            )
        except CaseError as exc:
            return f"prepare refused: {exc.code}"
        return f"prepared proposal #{proposal.pk}"

    def _approve(self, case: Case) -> str:
        proposal = case.proposals.filter(status=Proposal.Status.AWAITING_REVIEW).first()
        if proposal is None:
            return "approve: nothing to decide"
        try:
            approval = proposal_approve(proposal=proposal, actor=self.world.approver)
        except CaseError as exc:
            return f"approve refused: {exc.code}"
        return f"approved {approval.reference} for {_operation_key(approval)}"

    def step_apply(self, step: dict) -> str:
        case = self.case(step["case"])
        state = self.workers[step["worker"]]
        if case is None:
            return "no case"
        if state.paused is not None or state.attempt_id is not None:
            return "worker busy (frozen or holding an attempt)"
        client = self.clients[step["worker"]]
        client.plan = step.get("mode", "normal")
        worker = self.worker(step["worker"])
        try:
            return apply_case(case_id=case.pk, client=client, worker=worker)
        except Paused as paused:
            attempt = Attempt.objects.filter(case=case, worker=worker.label).latest("sequence")
            state.paused, state.attempt_id = paused, attempt.pk
            return "frozen just before its write left"
        except Killed:
            return "killed after its write reached the order system"
        finally:
            client.plan = ""

    def step_claim(self, step: dict) -> str:
        case = self.case(step["case"])
        state = self.workers[step["worker"]]
        if case is None or state.paused is not None or state.attempt_id is not None:
            return "skipped"
        try:
            attempt = case_claim(case_id=case.pk, worker=self.worker(step["worker"]))
        except ClaimRefused as refusal:
            return f"refused: {refusal.extra.get('reason', refusal.code)}"
        except RecoveryRequired:
            return "refused: recovery required"
        state.attempt_id = attempt.pk
        return f"claimed {attempt.reference} (token {attempt.fencing_token}), then paused"

    def step_run(self, step: dict) -> str:
        state = self.workers[step["worker"]]
        client = self.clients[step["worker"]]
        worker = self.worker(step["worker"])
        attempt_id, paused = state.attempt_id, state.paused
        state.attempt_id = state.paused = None
        if attempt_id is None:
            return "nothing to continue"
        if paused is None:
            return "continued: " + run_attempt(attempt_id=attempt_id, client=client, worker=worker)
        # The frozen write leaves now, with the old token and grant.
        self.journal.late_writes.append(
            {
                "operation_key": paused.kwargs["operation_key"],
                "token": paused.kwargs["fencing_token"],
                "frozen_at": paused.frozen_at,
            }
        )
        attempt = (
            Attempt.objects.select_related("operation", "case__account")
            .filter(pk=attempt_id)
            .first()
        )
        try:
            result = OrderSystemClient.apply_operation(client, paused.order_id, **paused.kwargs)
        except OrderSystemError as exc:
            sent = f"late write refused ({exc.error})"
            if attempt is None:
                return sent + "; its attempt is not in these records"
            return f"{sent}; recorded: {attempt_record_refusal(attempt, worker, exc)}"
        if attempt is None:
            return "late write applied; its attempt is not in these records"
        outcome = attempt_record_applied(attempt, worker, result)
        if outcome == "confirmed":
            outcome += "; " + run_attempt(attempt_id=attempt_id, client=client, worker=worker)
        return f"late write applied ({'replayed' if result.replayed else 'new'}); {outcome}"

    def step_lease_expiry(self, step: dict) -> str:
        lease = dt.timedelta(seconds=settings.LEASES["apply"]["lease_seconds"])
        expired = attempts_expire_leases(now=timezone.now() + lease + dt.timedelta(seconds=1))
        return f"{expired} lease(s) expired"

    def step_reconcile(self, step: dict) -> str:
        case = self.case(step["case"])
        if case is None:
            return "no case"
        return case_reconcile(
            case_id=case.pk, client=self.clients["system"], actor=Worker("sim:reconcile")
        )

    def step_cancel(self, step: dict) -> str:
        case = self.case(step["case"])
        if case is None:
            return "no case"
        try:
            case = case_cancel_request(
                case=case, actor=self.world.lead, reason="The customer cancels", via="simulation"
            )
        except CaseError as exc:
            return f"cancel refused: {exc.code}"
        return f"cancel requested: now {case.status}"

    def step_expire_approval(self, step: dict) -> str:
        case = self.case(step["case"])
        if case is None:
            return "no case"
        now = timezone.now()
        lapsed = Approval.objects.filter(
            proposal__case=case,
            decision=Approval.Decision.APPROVED,
            revoked_at__isnull=True,
            expires_at__gt=now,
        )
        self.capture()
        # A decided approval is append-only (cases.append_only): moving its clock is the
        # owner's repair, as in the tests.
        with maintenance():
            count = lapsed.update(expires_at=now)
        self.capture()
        returned = approvals_expire_due()
        return f"{count} approval(s) expired; {returned} case(s) back to review"

    def step_change_intent(self, step: dict) -> str:
        case = self.case(step["case"])
        if case is None:
            return "no case"
        change = self.change_for(step["case"], step["days"])
        before = case.change
        try:
            case = case_change_intent(
                case=case, actor=self.world.lead, change=change, reason="Another change"
            )
        except CaseError as exc:
            return f"change refused: {exc.code}"
        if case.change != before:
            self.journal.intent_changes.append({"case": step["case"], "at": timezone.now()})
            return f"intent changed to {describe_change(change)}"
        return "same intent"

    def step_fault(self, step: dict) -> str:
        order = self.order_id(step["case"])
        kind = step["fault"]
        if kind == "search_lag":
            self.orders.set_fault("search_lag", seconds=30)
        elif kind == "unavailable_lookup":
            self.orders.set_fault("unavailable", path_prefix="/operations/")
        elif kind == "latency":
            self.orders.set_fault("latency", seconds=0.05, path_prefix=f"/orders/{order}")
        elif kind == "unavailable":
            self.orders.set_fault("unavailable", path_prefix=f"/orders/{order}")
        else:
            self.orders.set_fault(kind, path_prefix=f"/orders/{order}/operations")
        return f"armed {kind} on {order}"

    def step_webhook(self, step: dict) -> str:
        order = self.order_id(step["case"])
        events = self.orders.state(order)["events"]
        if not events:
            return "no event yet"
        event = events[-1] if step["resend"] == "latest" else events[0]
        fields = {
            "event_id": event["event_id"],
            "type": event["type"],
            "order_id": event["order_id"],
            "order_version": event["order_version"],
            "occurred_at": dt.datetime.fromisoformat(event["occurred_at"].replace("Z", "+00:00")),
        }
        body = {**fields, "occurred_at": event["occurred_at"]}
        first = inbound_event_receive(**fields, body=body)
        inbound_event_receive(**fields, body=body)  # the duplicate delivery
        outcome = inbound_event_process(event_id=event["event_id"], client=self.clients["system"])
        return (
            f"event v{event['order_version']} delivered twice ({first.body['status']}): {outcome}"
        )

    def step_snapshot(self, step: dict) -> str:
        self.snapshot = (transaction.savepoint(), fencing_current())
        return f"snapshot at fencing token {self.snapshot[1]}"

    def step_restore(self, step: dict) -> str:
        if self.snapshot is None:
            return "no snapshot"
        sid, token = self.snapshot
        self.capture()
        transaction.savepoint_rollback(sid)
        with connection.cursor() as cursor:
            if token > 0:
                cursor.execute("SELECT setval(%s, %s, true)", [FENCING_SEQUENCE, token])
            else:
                cursor.execute("SELECT setval(%s, 1, false)", [FENCING_SEQUENCE])
        self.journal.restores.append(timezone.now())
        return f"restored to the snapshot (fencing sequence back to {token})"

    def step_tick(self, step: dict, *, ahead: dt.timedelta = dt.timedelta(minutes=15)) -> str:
        """The periodic worker: approval expiry, then the dispatcher (restore detection
        included), running what it hands out in-process."""
        ran: list[str] = []
        client = self.clients["system"]
        worker = Worker("sim:dispatcher")

        def run(func: str, pk: int) -> None:
            name = func.rsplit(".", 1)[-1]
            case = Case.objects.get(pk=pk)
            if name == "source_check":
                outcome = self._source_check(case)
            elif name == "prepare_proposal":
                outcome = self._prepare(case)
            elif name == "apply_case":
                outcome = apply_case(case_id=pk, client=client, worker=worker)
            else:
                outcome = case_reconcile(case_id=pk, client=client, actor=worker)
            ran.append(f"{case.reference} {name}: {outcome}")

        approvals_expire_due()
        dispatch_due(now=timezone.now() + ahead, run=run)
        return "; ".join(ran) or "nothing due"

    def step_order_changed(self, step: dict) -> str:
        order = self.order_id(step["case"])
        current = self.orders.state(order)["order"]
        self.orders.seed(
            orders=[
                {
                    "order_id": order,
                    "account_id": current["account_id"],
                    "delivery_date": current["delivery_date"],
                    "version": current["version"] + 1,
                }
            ]
        )
        return f"{order} changed elsewhere (version {current['version'] + 1})"

    # --- the end of a schedule --------------------------------------------------------------

    def final_sweep(self) -> list[str]:
        """Time passes past every lease plus grace and the watchdog runs; then the periodic
        worker runs once. Returns the cases still applying after the watchdog."""
        self.orders.clear_faults()
        lease = dt.timedelta(seconds=settings.LEASES["apply"]["lease_seconds"])
        attempts_expire_leases(now=timezone.now() + lease + GRACE)
        stuck = list(
            Case.objects.filter(
                pk__in=[pk for pk in self.case_pks if pk], status=Status.APPLYING
            ).values_list("reference", flat=True)
        )
        self.log.append(f"-- sweep: {self.step_tick({})}")
        self.capture()
        return stuck

    def drain(self, rounds: int = 4) -> None:
        """No more faults: reconcile what is held and apply what is ready until nothing moves
        (what the periodic worker would do over the next minutes)."""
        pks = [pk for pk in self.case_pks if pk]
        for _ in range(rounds):
            moved = False
            for index, pk in enumerate(self.case_pks):
                case = self.case(index) if pk else None
                if case is None or case.status not in {Status.HELD, Status.READY}:
                    continue
                version = case.version
                self.workers["drain"] = WorkerState()
                outcome = self.step_advance({"case": index, "worker": "drain"})
                self.log.append(f"-- drain case={index}: {outcome}")
                moved = moved or Case.objects.filter(pk=case.pk).exclude(version=version).exists()
            if not moved:
                break
        self.workers["drain"] = WorkerState()
        if pks:
            self.capture()
