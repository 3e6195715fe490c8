"""What one safe apply costs the database, and a worker that takes the next due case at once.

Issue 13's budget, and issue 27's: a claim is one statement, committed alone; a whole safe apply
(claim → mark the send → the order system's answer with the notification's start → the
notification's confirmation with the close) at most 6 transactions in Holdfast's database,
reads included. Counted on PostgreSQL (``tests/support/txcount.py``: each commit, and each
statement outside an atomic block, as ``xact_commit`` counts them); the order system's own
records are the ground truth that each order changed exactly once.
"""

from __future__ import annotations

import contextlib
import datetime as dt

import pytest
from django.core import mail
from django.db import connection

from cases.append_only import maintenance
from cases.kernel import Worker
from cases.models import Attempt, CancellationRequest, CaseEvent, Notification, Status
from cases.services import case_cancel_request
from reconciliation.apply import apply_case, apply_due
from reconciliation.claims import case_claim, claim_next_due
from reconciliation.restore_detection import source_verified
from tests.support.fixtures import days_ahead
from tests.support.txcount import database_cost, round_trips

pytestmark = [pytest.mark.order_system, pytest.mark.django_db(transaction=True)]

WORKER = Worker("hot-path-test")
postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="statement and transaction budgets: PostgreSQL"
)


def _apply_measured(approved_case, live_orders):
    """One approved case applied by ``apply_case`` while its database cost is counted; the
    case, the cost, and the order's version before."""
    case = approved_case()
    source_verified()
    before = live_orders.state("ORD-7731")["order"]["version"]
    with database_cost() as cost:
        outcome = apply_case(case_id=case.pk)
    assert outcome == "done"
    return case, cost, before


def _actions_from_the_claim(case) -> list[str]:
    """The case's audit actions from its claim on, once its chain verified link by link."""
    from cases.audit import verify_chains

    assert verify_chains(case_reference=case.reference).ok
    actions = list(
        CaseEvent.objects.filter(case=case).order_by("id").values_list("action", flat=True)
    )
    return actions[actions.index("cases.case.claimed") :]


def _orders(live_orders, account, count: int) -> list[str]:
    ids = [f"ORD-HP{i}" for i in range(count)]
    live_orders.seed(
        orders=[
            {
                "order_id": order_id,
                "account_id": account.reference,
                "delivery_date": str(days_ahead(3)),
            }
            for order_id in ids
        ]
    )
    return ids


def _applied(live_orders, order_id: str) -> list[dict]:
    return [op for op in live_orders.state(order_id)["operations"] if op["status"] == "applied"]


@postgres_only
def test_a_claim_is_one_statement_and_one_commit(approved_case):
    """The read that locks the case with every guard, the guards, and the write of the case,
    the attempt and the event: one statement, committed on its own (issue 27's goal 4: one
    query and one commit per claim)."""
    from cases.audit import verify_chains

    case = approved_case()
    source_verified()
    with database_cost() as cost:
        attempt = case_claim(case_id=case.pk, worker=WORKER)
    assert attempt.state == Attempt.State.RUNNING
    assert cost.queries == 1, cost.statements
    assert cost.transactions == 1, cost
    (statement,) = cost.statements
    assert "FOR UPDATE OF c" in statement
    assert 'UPDATE "cases_case"' in statement
    assert 'INSERT INTO "cases_attempt"' in statement
    assert 'INSERT INTO "cases_caseevent"' in statement
    event = CaseEvent.objects.filter(case=case).order_by("-id").first()
    assert event.action == "cases.case.claimed"
    assert event.version == attempt.case.version
    assert Attempt.objects.get(pk=attempt.pk).reference == attempt.reference
    # The server computed the event's hash: the chain verifies link by link in Python.
    assert verify_chains(case_reference=case.reference).ok


@postgres_only
def test_claiming_the_next_due_case_is_one_statement_and_one_commit(approved_case):
    case = approved_case()
    source_verified()
    with database_cost() as cost:
        claimed = claim_next_due(worker=WORKER)
    assert claimed is not None
    assert claimed.case.pk == case.pk
    assert cost.queries == 1, cost.statements
    assert cost.transactions == 1, cost
    # The pick (SKIP LOCKED), the read by id of what it picked, and the write.
    (statement,) = cost.statements
    assert "SKIP LOCKED" in statement
    assert "FOR UPDATE OF c" in statement.rpartition("SKIP LOCKED")[2]


def test_the_claim_reads_the_live_approval_and_each_marker_once():
    """The claim's one statement reads the case's live approval once for its four columns, and
    each system marker once: as scalar subqueries it walked the same approval four times and
    the restore marker twice (0.26 ms of a 4 ms claim, alternated in one process)."""
    from reconciliation.claims import _pg_claim_statement

    for next_due in (False, True):
        sql = " ".join(_pg_claim_statement(next_due).split())
        assert sql.count("FROM approvals_approval ") == 1
        assert sql.count("cases_systemmarker ") == 2  # the restore marker, the source check


@postgres_only
def test_a_lease_renewal_rewrites_no_index(approved_case):
    """Issue 27: a heartbeat's renewal of an attempt's lease is a HOT update, which adds no
    entry to any of the attempt's indexes. With an index on the lease, every renewal (each
    heartbeat, and those with each apply's send and answer) added one to all nine: 0 of 71,645
    attempt updates of a make bench run were HOT."""
    from django.db import transaction
    from django.utils import timezone

    from reconciliation.leases import lease_extend

    attempt = case_claim(case_id=approved_case().pk, worker=WORKER)

    def hot_updates() -> tuple[int, int]:  # of this transaction (pg_stat_xact_user_tables)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables "
                "WHERE relname = 'cases_attempt'"
            )
            updates, hot = cursor.fetchone()
        return updates, hot

    now = timezone.now()
    with transaction.atomic():
        assert hot_updates() == (0, 0)
        assert lease_extend(
            attempt_id=attempt.pk,
            fencing_token=attempt.fencing_token,
            expires=now + dt.timedelta(minutes=5),
            now=now,
        )
        assert hot_updates() == (1, 1)


@postgres_only
def test_a_safe_apply_is_at_most_six_transactions_and_changes_the_order_once(
    approved_case, live_orders
):
    case, cost, before = _apply_measured(approved_case, live_orders)
    assert cost.transactions <= 6, (cost.transactions, cost.statements)
    # The two writes before the answer (claim, mark) and the two after it (answer with the
    # notification's start, confirmation with the close): nothing read outside them.
    assert cost.transactions == 4, (cost.transactions, cost.statements)
    case.refresh_from_db()
    assert case.status == Status.DONE
    assert live_orders.state("ORD-7731")["order"]["version"] == before + 1
    assert len(_applied(live_orders, "ORD-7731")) == 1
    assert len(mail.outbox) == 1
    # Events recorded one after another under one lock chain onto each other without reading
    # the head again: the chain still verifies link by link.
    assert _actions_from_the_claim(case) == [
        "cases.case.claimed",
        "cases.step.applied",
        "cases.notification.sending",
        "cases.step.notified",
        "cases.case.transitioned",
    ]


@postgres_only
def test_after_the_answer_each_transaction_saves_the_case_once_and_reads_no_head_or_history(
    approved_case, live_orders
):
    """Issue 27 (round trips per apply): the answer with the notification's start, and the
    notification's confirmation with the close, each lock the case with the audit chain's head
    in one statement, save the case once and insert their events in one statement; a change
    the order system applied for the first time is not searched for an earlier notification
    (nobody can have been told of a change never applied). Before: 23 statements, two of them
    reads of the head, one a search of the case's events, four saves of the case."""
    case, cost, _before = _apply_measured(approved_case, live_orders)

    def count(start: str) -> int:
        return sum(sql.lstrip().startswith(start) for sql in cost.statements)

    assert count('SELECT "hash" FROM "cases_caseevent"') == 0, cost.statements
    assert count('SELECT COUNT("cases_caseevent"') == 0, cost.statements
    assert count('INSERT INTO "cases_caseevent" ') == 2, cost.statements
    assert count('UPDATE "cases_case" ') == 2, cost.statements
    assert cost.transactions == 4, cost.statements
    # Claim 1, mark 1, answer 6 (lock with head, the operation and whether a cancellation is
    # pending, confirm, evidence, lease, case, events), close 5 (lock with head and whether a
    # cancellation is pending, notified, attempt, case, events).
    assert cost.queries == 13, cost.statements
    # The chain still verifies link by link, and the customer was told once.
    assert _actions_from_the_claim(case)[-3:] == [
        "cases.notification.sending",
        "cases.step.notified",
        "cases.case.transitioned",
    ]
    assert len(mail.outbox) == 1


@postgres_only
def test_a_safe_apply_nobody_is_told_of_reads_and_writes_nothing_of_notifications(
    approved_case, live_orders
):
    """A case the system or an integration opened: its close tells nobody, and the apply costs
    no statement more for it (nor for the follow-up clock: it never waits on a person)."""
    case, cost, _before = _apply_measured(approved_case, live_orders)
    print(f"\nsafe apply: {cost.transactions} transactions, {cost.queries} statements")
    assert cost.transactions == 4
    touched = [
        sql
        for sql in cost.statements
        if any(t in sql for t in ("cases_notification", "cases_followuppolicy"))
    ]
    assert touched == []
    assert not Notification.objects.filter(case=case, kind="done").exists()


@postgres_only
def test_the_staff_member_who_opened_the_case_is_told_in_the_closes_own_transaction(
    approved_case, live_orders, agent
):
    """Opened by a person at the desk: the close writes that person's notification with the
    events that close it; the apply is still four transactions."""
    case, cost, _before = _apply_measured(lambda: _opened_by(approved_case(), agent), live_orders)
    print(f"\nsafe apply, opener told: {cost.transactions} transactions, {cost.queries} statements")
    assert cost.transactions == 4, cost.statements
    inserts = [
        s for s in cost.statements if s.lstrip().startswith('INSERT INTO "cases_notification"')
    ]
    assert len(inserts) == 1, cost.statements
    (told,) = Notification.objects.filter(case=case, kind="done")
    assert (told.recipient, told.kind) == (agent, "done")
    assert told.event.to_status == Status.DONE


def _opened_by(case, person):
    type(case).objects.filter(pk=case.pk).update(opened_by=person)
    case.refresh_from_db()
    return case


@postgres_only
def test_with_no_address_to_notify_the_answer_closes_the_case_in_its_own_transaction(
    approved_case, live_orders, account
):
    account.email = ""
    account.save(update_fields=["email"])
    case, cost, before = _apply_measured(approved_case, live_orders)
    # Claim, mark, and the answer with the notification's step and the close: nothing leaves
    # for the notification, so nothing waits for a fourth transaction.
    assert cost.transactions == 3, (cost.transactions, cost.statements)

    # In the answer's transaction the case is saved once and its three events (applied,
    # notified, done) are one insert (cases.kernel.writes_batched).
    def count(start: str) -> int:
        return sum(sql.lstrip().startswith(start) for sql in cost.statements)

    assert count('INSERT INTO "cases_caseevent" ') == 1, cost.statements
    assert count('UPDATE "cases_case" ') == 1, cost.statements
    case.refresh_from_db()
    assert case.status == Status.DONE
    assert live_orders.state("ORD-7731")["order"]["version"] == before + 1
    assert len(_applied(live_orders, "ORD-7731")) == 1
    assert mail.outbox == []
    attempt = Attempt.objects.get(case=case)
    assert attempt.state == Attempt.State.SUCCEEDED
    assert attempt.last_confirmed_step == Attempt.Step.CLOSED
    assert attempt.operation.notified_at is not None
    assert _actions_from_the_claim(case) == [
        "cases.case.claimed",
        "cases.step.applied",
        "cases.step.notified",
        "cases.case.transitioned",
    ]


def test_a_worker_takes_every_due_case_one_after_another(approved_case, live_orders, account):
    """``apply_due`` applies the backlog without waiting for a dispatcher pass, skips (once) a
    case whose guard refuses, and leaves cases that are not due yet alone."""
    orders = _orders(live_orders, account, 4)
    cases = [approved_case(order_id=order_id) for order_id in orders]
    waiting = cases[3]
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    type(waiting).objects.filter(pk=waiting.pk).update(next_check_at=later)
    cancelled = cases[2]
    case_cancel_request(
        case=cancelled, actor=Worker("customer-api"), reason="changed mind", via="api"
    )
    outcomes = apply_due(worker=WORKER, seconds=60)

    assert outcomes.count("done") == 2, outcomes
    for case in cases[:2]:
        case.refresh_from_db()
        assert case.status == Status.DONE
        assert len(_applied(live_orders, case.order_id)) == 1
    waiting.refresh_from_db()
    assert waiting.status == Status.READY  # not due: not taken
    assert _applied(live_orders, waiting.order_id) == []
    cancelled.refresh_from_db()
    assert _applied(live_orders, cancelled.order_id) == []
    assert CancellationRequest.objects.filter(case=cancelled).exists()
    assert not Attempt.objects.filter(case__in=[waiting, cancelled]).exists()
    # Nothing left due: the next call returns at once with nothing done.
    assert apply_due(worker=WORKER, seconds=60) == []


@postgres_only
def test_the_written_out_claim_read_reads_what_the_orm_query_reads(
    approved_case, live_orders, account, lead
):
    """PostgreSQL claims through one statement written out (``claims._pg_claim_sql``); the ORM
    query (``claims._claim_query``) is the same read for the other databases. Both must see the
    same case, operation and guards whatever state the case is in."""
    from django.db import transaction
    from django.utils import timezone

    from approvals.models import Approval
    from cases.models import Case
    from reconciliation.claims import _GUARD_COLUMNS, _claim_read_orm, _claim_read_sql

    orders = _orders(live_orders, account, 4)
    fresh, expired, cancelling, claimed = (approved_case(order_id=o) for o in orders)
    with maintenance():  # a decided approval never changes: the owner's repair moves its clock
        Approval.objects.filter(proposal__case=expired).update(expires_at=timezone.now())
    case_cancel_request(case=cancelling, actor=Worker("customer-api"), reason="no", via="api")
    case_claim(case_id=claimed.pk, worker=WORKER)  # an attempt, events, a sequence
    Case.objects.filter(pk=fresh.pk).update(next_check_at=timezone.now())

    def same(read_sql, read_orm) -> None:
        assert (read_sql is None) == (read_orm is None)
        if read_sql is None:
            return
        for name in _GUARD_COLUMNS:
            assert getattr(read_sql, name) == getattr(read_orm, name), name
        assert read_sql.case.version == read_orm.case.version
        assert read_sql.case.status == read_orm.case.status
        assert read_sql.case.retry_counts == read_orm.case.retry_counts
        assert read_sql.case.account.access_active == read_orm.case.account.access_active
        assert read_sql.operation.key == read_orm.operation.key
        assert read_sql.token is not None

    now = timezone.now()
    for case in (fresh, expired, cancelling, claimed):
        with transaction.atomic():
            same(
                _claim_read_sql(now, case_id=case.pk, skip=set()),
                _claim_read_orm(now, case_id=case.pk, skip=set()),
            )
    with transaction.atomic():
        first = _claim_read_sql(now, case_id=None, skip=set())
        assert first is not None
        same(first, _claim_read_orm(now, case_id=None, skip=set()))
        skip = {first.case_id}
        same(
            _claim_read_sql(now, case_id=None, skip=skip),
            _claim_read_orm(now, case_id=None, skip=skip),
        )


@postgres_only
def test_the_written_out_claim_writes_what_the_orm_writes(approved_case, live_orders, account):
    """On PostgreSQL the claim is one statement (``kernel.pg_claim_statement``); the ORM's
    read and three writes (``claims._claim_won``, ``kernel.claim_write``) are the other
    databases' way. Claimed once each way, two cases end up with the same case fields, attempt
    and event, and both audit chains verify (the statement's hash is the server's)."""
    from django.db import transaction
    from django.forms.models import model_to_dict
    from django.utils import timezone

    from cases.audit import verify_chains
    from reconciliation.claims import _claim_read_sql, _claim_won

    one, other = (approved_case(order_id=o) for o in _orders(live_orders, account, 2))
    by_sql = case_claim(case_id=one.pk, worker=WORKER)
    with transaction.atomic():
        now = timezone.now()
        row = _claim_read_sql(now, case_id=other.pk, skip=set())
        by_orm = _claim_won(row, worker=WORKER, kind="apply", now=now, source_checked=True).attempt

    def attempt_row(attempt) -> dict:
        row = model_to_dict(Attempt.objects.get(pk=attempt.pk))
        for name in ("id", "case", "operation", "reference", "fencing_token"):
            row.pop(name, None)
        row["claimed_at"] = row["lease_expires_at"] - row["claimed_at"]
        row.pop("lease_expires_at"), row.pop("heartbeat_at")
        return row

    def event_row(attempt) -> dict:
        event = CaseEvent.objects.filter(case_id=attempt.case_id).order_by("-id").first()
        row = model_to_dict(event)
        for name in ("id", "case", "reason", "hash", "prev_hash", "created_at"):
            row.pop(name, None)
        for name in ("attempt", "operation_key", "fencing_token", "approval", "lease_expires_at"):
            row["detail"].pop(name)
        return row

    assert attempt_row(by_sql) == attempt_row(by_orm)
    assert event_row(by_sql) == event_row(by_orm)
    for case in (one, other):
        case.refresh_from_db()
        assert case.status == Status.APPLYING
        assert case.waiting_on == "worker"
        assert case.next_check_at == Attempt.objects.get(case=case).lease_expires_at
    for case in (one, other):
        assert verify_chains(case_reference=case.reference).ok


@postgres_only
def test_the_written_out_mark_of_the_send_decides_and_writes_what_the_orm_does(
    approved_case, live_orders, account
):
    """On PostgreSQL the mark that the write may leave is one statement written out
    (``leases._submitting_sql``), elsewhere the ORM's (``leases._submitting_orm``). Both must
    let the send go, or refuse it, in the same states, and write the same times."""
    from django.db import transaction
    from django.db.models import F
    from django.utils import timezone

    from approvals.models import Approval
    from reconciliation.apply import _authority
    from reconciliation.leases import _submitting_orm, _submitting_sql, lease_expiry

    case = approved_case(order_id=_orders(live_orders, account, 1)[0])
    attempt = case_claim(case_id=case.pk, worker=WORKER)
    authority = _authority(attempt, None)
    assert authority is not None
    attempts = Attempt.objects.filter(pk=attempt.pk)

    def both(change, *, with_authority: bool = True) -> bool:
        seen = []
        for mark in (_submitting_sql, _submitting_orm):
            with transaction.atomic():
                point = transaction.savepoint()
                change()
                now = timezone.now()
                lease = lease_expiry(attempt.kind, now)
                approval_id = authority.approval_id if with_authority else None
                moved = mark(attempt, approval_id, now=now, lease=lease)
                row = attempts.values("submitted_at", "heartbeat_at", "lease_expires_at").get()
                seen.append((moved, row == {"submitted_at": now, "heartbeat_at": now,
                                            "lease_expires_at": lease}))  # fmt: skip
                transaction.savepoint_rollback(point)
        assert seen[0] == seen[1]
        moved, written = seen[0]
        assert moved == written
        return moved

    approval = Approval.objects.filter(pk=authority.approval_id)
    assert both(lambda: None)
    assert both(lambda: None, with_authority=False)

    def expire() -> None:
        with maintenance():
            approval.update(expires_at=timezone.now())

    def fence() -> None:
        with maintenance():
            attempts.update(fencing_token=F("fencing_token") + 10**6)

    assert not both(expire)
    assert not both(lambda: approval.update(revoked_at=timezone.now()))
    assert both(lambda: approval.update(revoked_at=timezone.now()), with_authority=False)
    assert not both(lambda: attempts.update(lease_expires_at=timezone.now()))
    assert not both(lambda: attempts.update(state=Attempt.State.CANCEL_REQUESTED))
    assert not both(fence)


@postgres_only
def test_the_one_statement_claim_writes_exactly_when_the_guards_let_it(
    approved_case, live_orders, account
):
    """On PostgreSQL the guards decide inside the claim's statement (``claims._PG_GUARDS``); on
    every database ``_claim_refusal`` says which guard stopped a claim. Case by case, in every
    state a guard looks at, the statement writes exactly when ``_claim_refusal`` lets it: a
    write the Python guards refuse would be a claim nobody may make, a refusal they let through
    a case no worker ever takes."""
    from django.db import transaction
    from django.db.models import F
    from django.utils import timezone

    from approvals.models import Approval
    from cases.models import Case, SystemMarker
    from reconciliation.claims import (
        ClaimRefused,
        SourceCheckDue,
        _claim_read_sql,
        _claim_refusal,
        claim_case,
    )
    from reconciliation.models import OrderSystemProfile
    from reconciliation.restore_detection import SOURCE_MARKER

    orders = _orders(live_orders, account, 6)
    fresh, expired, cancelling, mismatched, supervised, revoked = (
        approved_case(order_id=o) for o in orders
    )
    with maintenance():  # a decided approval never changes: the owner's repair moves its clock
        Approval.objects.filter(proposal__case=expired).update(expires_at=timezone.now())
    case_cancel_request(case=cancelling, actor=Worker("customer-api"), reason="no", via="api")
    Case.objects.filter(pk=mismatched.pk).update(
        last_checked_order_version=F("last_checked_order_version") + 1
    )
    Case.objects.filter(pk=revoked.pk).update(revoked_at=timezone.now())

    def decided(case) -> tuple[bool, bool]:
        """(the Python guards let it, the statement wrote)."""
        with transaction.atomic():
            row = _claim_read_sql(timezone.now(), case_id=case.pk, skip=set())
            allowed = (
                row is not None and _claim_refusal(row, now=timezone.now(), version=None) is None
            )
        with contextlib.suppress(ClaimRefused):
            claim_case(case_id=case.pk, worker=WORKER, source_checked=True)
        return allowed, Attempt.objects.filter(case=case).exists()

    results = {"fresh": decided(fresh), "expired": decided(expired)}
    results["cancelling"] = decided(cancelling)
    results["mismatched"] = decided(mismatched)
    results["revoked"] = decided(revoked)
    profile = OrderSystemProfile.objects.order_by("-probed_at", "-id").first()
    autonomy = profile.kind_autonomy
    profile.kind_autonomy = {**autonomy, supervised.kind: "supervised"}
    profile.save(update_fields=["kind_autonomy"])
    results["supervised"] = decided(supervised)
    profile.kind_autonomy = autonomy
    profile.save(update_fields=["kind_autonomy"])

    assert results["fresh"] == (True, True), results
    assert all(allowed == wrote for allowed, wrote in results.values()), results
    assert [name for name, (_, wrote) in results.items() if not wrote] == [
        "expired",
        "cancelling",
        "mismatched",
        "revoked",
        "supervised",
    ]

    # Without a recent comparison with the order system, nothing is written and the claim
    # says so (the worker asks the order system, then claims again).
    later = approved_case(order_id=_orders(live_orders, account, 7)[-1])
    SystemMarker.objects.filter(name=SOURCE_MARKER).update(
        updated_at=timezone.now() - dt.timedelta(hours=1)
    )
    with pytest.raises(SourceCheckDue):
        claim_case(case_id=later.pk, worker=WORKER)
    assert not Attempt.objects.filter(case=later).exists()
    claim_case(case_id=later.pk, worker=WORKER, source_checked=True)
    assert Attempt.objects.filter(case=later).exists()


@postgres_only
def test_the_claim_numbered_and_the_claim_the_query_log_sees_write_the_same(
    approved_case, live_orders, account
):
    """The one-statement claim goes with numbered placeholders (``cases.rows.fetchone_named``),
    and as written when Django's query log is on. Claimed once each way, two cases hold the
    same case fields, attempt and event, and both audit chains verify."""
    from django.forms.models import model_to_dict
    from django.test.utils import CaptureQueriesContext

    from cases.audit import verify_chains

    one, other = (approved_case(order_id=o) for o in _orders(live_orders, account, 2))
    source_verified()
    numbered = case_claim(case_id=one.pk, worker=WORKER)
    with CaptureQueriesContext(connection) as logged:
        as_logged = case_claim(case_id=other.pk, worker=WORKER)
    assert len(logged.captured_queries) == 1

    def written(attempt) -> tuple[dict, dict, dict]:
        case = model_to_dict(attempt.case.__class__.objects.get(pk=attempt.case_id))
        row = model_to_dict(Attempt.objects.get(pk=attempt.pk))
        event = model_to_dict(CaseEvent.objects.filter(case_id=attempt.case_id).last())
        for name in ("id", "reference", "order_id", "request_key", "number", "note"):
            case.pop(name, None)
        for name in ("id", "case", "operation", "reference", "fencing_token"):
            row.pop(name)
        for name in ("id", "case", "reason", "hash", "prev_hash"):
            event.pop(name, None)
        for name in ("attempt", "operation_key", "fencing_token", "approval"):
            event["detail"].pop(name)
        lease = row.pop("lease_expires_at")
        assert case.pop("next_check_at") == lease
        assert row.pop("heartbeat_at") == row.pop("claimed_at") == event.pop("created_at")
        assert event["detail"].pop("lease_expires_at") == lease.isoformat()
        case.pop("updated_at", None)
        return case, row, event

    assert written(numbered) == written(as_logged)
    assert numbered.case.status == as_logged.case.status == Status.APPLYING
    for case in (one, other):
        assert verify_chains(case_reference=case.reference).ok


@postgres_only
def test_the_writes_nothing_reads_go_with_the_next_statement(approved_case, live_orders):
    """Issue 27 (round trips per apply): inside the answer's and the close's transactions, a
    write whose answer nothing reads (the operation's confirmation and its evidence, the
    notification's mark, the attempt's finish, the case's save and its events) waits for the
    next statement and goes with it in one round trip (``cases.rows.writes_held``); the answer
    locks the case and its operation in one statement. The answer's and the close's locks
    also say whether a cancellation is pending; with none, the close sends no update of the
    cancellations. The server runs 13 statements (15, then 14 before) in 4 transactions; the
    client waits 11 times, where it waited 19, then 12 (each transaction's BEGIN and COMMIT
    are a wait of their own)."""
    case = approved_case()
    source_verified()
    with round_trips() as trips, database_cost() as cost:
        assert apply_case(case_id=case.pk) == "done"
    assert cost.queries == 13, cost.statements
    assert cost.transactions == 4, cost.statements
    assert trips.count == 11, trips.waits
    updates = [s for s in cost.statements if s.startswith('UPDATE "cases_cancellationrequest"')]
    assert updates == [], cost.statements
    assert trips.waits.count('"COMMIT"') == 2, trips.waits
    case.refresh_from_db()
    assert case.status == Status.DONE
    assert _actions_from_the_claim(case)[-3:] == [
        "cases.notification.sending",
        "cases.step.notified",
        "cases.case.transitioned",
    ]
    assert len(_applied(live_orders, "ORD-7731")) == 1


def _synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


@postgres_only
def test_a_claim_of_its_own_commits_without_waiting_and_leaves_a_callers_commit_alone(
    approved_case, live_orders, account
):
    """Issue 27: a claim that is its own transaction commits with ``synchronous_commit`` off,
    for that transaction alone (the session's stays on); inside a caller's transaction the
    claim leaves the caller's commit as it is (fails if the claim set it for the session, or
    for a caller's transaction: what the caller writes after the claim would not wait)."""
    from django.db import transaction

    from reconciliation.claims import claim_case

    one, other = (approved_case(order_id=o) for o in _orders(live_orders, account, 2))
    source_verified()
    assert _synchronous_commit() == "on"
    claimed = claim_case(case_id=one.pk, worker=WORKER)
    assert claimed.synchronous_commit == "off"
    assert _synchronous_commit() == "on"
    with transaction.atomic():
        inside = claim_case(case_id=other.pk, worker=WORKER)
        assert inside.synchronous_commit == "on"
        assert _synchronous_commit() == "on"
    assert Attempt.objects.filter(case__in=[one, other]).count() == 2


@postgres_only
def test_the_order_systems_write_leaves_after_a_commit_that_waited_for_the_claim(
    approved_case, live_orders, monkeypatch
):
    """Issue 27: the claim's own commit does not wait for the disk, so what makes the claim
    durable before anything leaves is the worker's next commit: the send's mark, committed
    (another connection sees it) and waited for (``synchronous_commit`` on, outside any
    transaction) before the order system's write, with the log flushed past the claim's
    records (fails if the write could leave on the claim's commit alone)."""
    from reconciliation import apply as apply_module
    from reconciliation.client import OrderSystemClient
    from tests.support.db_roles import role_connection

    seen: dict = {}
    claim, send = apply_module.claim_case, OrderSystemClient.apply_operation

    def claimed_then_located(**kwargs):
        claimed = claim(**kwargs)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_current_wal_insert_lsn()::text")
            seen["after_claim"] = cursor.fetchone()[0]
        seen["claim_commit"] = claimed.synchronous_commit
        return claimed

    def watched(self, *args, **kwargs):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT current_setting('synchronous_commit'), "
                "pg_current_wal_flush_lsn() >= %s::pg_lsn",
                [seen["after_claim"]],
            )
            seen["setting"], seen["flushed"] = cursor.fetchone()
        seen["in_transaction"] = connection.in_atomic_block
        user = connection.settings_dict["USER"] or "postgres"
        with role_connection(user, autocommit=True) as other:
            seen["mark_committed"] = other.execute(
                "SELECT submitted_at IS NOT NULL FROM cases_attempt WHERE case_id = %s",
                [case.pk],
            ).fetchone()[0]
        return send(self, *args, **kwargs)

    monkeypatch.setattr(apply_module, "claim_case", claimed_then_located)
    monkeypatch.setattr(OrderSystemClient, "apply_operation", watched)
    case = approved_case()
    source_verified()
    assert apply_case(case_id=case.pk) == "done"
    assert seen == {
        "after_claim": seen["after_claim"],
        "claim_commit": "off",
        "setting": "on",
        "flushed": True,
        "in_transaction": False,
        "mark_committed": True,
    }
