"""A lock that waited reads what the step it waited for left (PostgreSQL, real threads).

In READ COMMITTED, ``SELECT … FOR UPDATE`` that waits for another transaction's row lock reads
the row as that transaction left it, but everything else in the statement (a subquery over
other tables) as it was when the statement began. The case's lock with the audit chain's head
and with whether a cancellation is pending (``cases.kernel.lock_case_at_head``) reads both by
subquery: after a wait they could be from before the step it waited for, and the next event
would then link to a link that is no longer the last (a fork in the chain), or a pending
cancellation would go unmarked. The rows read with the case by join are from before it too: the
account a worker checks, and the owner and the backup a handoff changed (a joined row whose key
changed is not joined at all, and the case was not found). Each step writes the case's row, so
a locked row that is not the one the statement's snapshot sees says that the read is older
than the lock, and the lock reads it all again (``cases.rows._read_locked``)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction
from django.utils import timezone

from cases.audit import verify_chains
from cases.codes import Action
from cases.exceptions import VersionConflict
from cases.kernel import Worker, lock_case, lock_case_at_head, record_fact, writes_batched
from cases.models import CancellationRequest, CaseEvent
from cases.services import CANCELLATION_PENDING, case_assign
from tests.support.lock_waits import Waiter

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]

WORKER = Worker("lock-test")


def _waiting_for(case, step, body) -> tuple[bool, dict[str, object]]:
    """``body(found)`` on a connection of its own, started while this thread holds the case's
    lock; once it waits for that lock, ``step(held)`` runs here and commits. Whether it waited,
    and what ``body`` put in ``found`` (``error``: what it raised)."""
    with transaction.atomic():
        held = lock_case(case.pk)
        other = Waiter(body)
        waited = other.waits()
        step(held)
    return waited, other.join()


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


def test_a_lock_that_waited_for_a_handoff_reads_the_new_owner_and_backup(
    make_case, make_user, team, lead, backup
):
    """The case page's lock reads the owner and the backup by join (the ORM's
    ``select_related``): before, a handoff committed during the wait left the owner's join
    empty, and the case was "not found" (``Case.DoesNotExist``); the backup read as nobody."""
    case = make_case()
    newcomer = make_user("newcomer", "agent", teams=[team])
    assert (case.owner_id, case.backup_id) == (lead.pk, backup.pk)

    def read(found: dict[str, object]) -> None:
        with transaction.atomic():
            locked = lock_case(case.pk)
            found["owner"] = locked.owner.pk
            found["backup"] = None if locked.backup is None else locked.backup.pk
            found["profile"] = hasattr(locked.owner, "staff_profile")

    def handoff(held) -> None:
        case_assign(
            case=held,
            expected_version=held.version,
            owner=newcomer,
            backup=lead,
            reason="Lena is away",
            actor=lead,
        )

    waited, found = _waiting_for(case, handoff, read)

    assert waited, "the read never waited for the handoff's lock"
    assert "error" not in found, found
    assert (found["owner"], found["backup"]) == (newcomer.pk, lead.pk)


def test_a_second_handoff_that_waited_for_the_first_is_told_the_case_changed(
    make_case, make_user, team, lead, backup
):
    """Two leads hand the same case over at once: the second, which waited, is refused as
    changed meanwhile (HTTP 409, the page says to reload), not as a case that does not exist."""
    case = make_case()
    first, second = (make_user(name, "agent", teams=[team]) for name in ("first", "second"))
    seen = case.version

    def assign(found: dict[str, object]) -> None:
        try:
            case_assign(
                case=case, expected_version=seen, owner=second, backup=lead, reason="", actor=backup
            )
        except VersionConflict as exc:
            found["conflict"] = (exc.extra["expected_version"], exc.extra["current_version"])

    def handoff(held) -> None:
        case_assign(
            case=held, expected_version=seen, owner=first, backup=backup, reason="", actor=lead
        )

    waited, found = _waiting_for(case, handoff, assign)

    assert waited, "the second handoff never waited for the first one's lock"
    assert found == {"conflict": (seen, seen + 1)}
    case.refresh_from_db()
    assert case.owner_id == first.pk


def test_a_workers_lock_that_waited_for_a_revocation_reads_the_account_without_access(
    make_case, lead
):
    """A worker's step locks the case with its account in one written-out statement
    (``cases.rows._locked_sql``). Before, a step that waited for the customer's loss of
    access read the account as it was before it: access still active."""
    from reconciliation.revocation import account_revoke_access

    case = make_case()

    def read(found: dict[str, object]) -> None:
        with transaction.atomic():
            locked, head = lock_case_at_head(case.pk, ("account",), exists=CANCELLATION_PENDING)
            found["access"] = locked.account.access_active
            found["head"] = head

    def revoke(held) -> None:
        account_revoke_access(account=held.account, actor=lead, reason="Contract ended")

    waited, found = _waiting_for(case, revoke, read)

    assert waited, "the worker's step never waited for the revocation's lock"
    assert "error" not in found, found
    assert found["access"] is False
    last = CaseEvent.objects.filter(case=case).order_by("-id").first()
    assert found["head"] == last.hash


def _away_while(case, lead, step) -> tuple[bool, dict[str, object], list[str]]:
    """``lead`` marks themselves away (``staff_set_away``, which lists their cases with a
    backup, then locks each) while ``step`` changes ``case`` under its lock; whether the
    absence waited, what it raised, and the actions on the case since."""
    from cases.services import staff_set_away

    until = timezone.localdate() + dt.timedelta(days=3)
    before = CaseEvent.objects.filter(case=case).count()

    def away(found: dict[str, object]) -> None:
        staff_set_away(user=lead, away_until=until, actor=lead)

    waited, found = _waiting_for(case, step, away)
    actions = list(
        CaseEvent.objects.filter(case=case).order_by("id").values_list("action", flat=True)
    )
    return waited, found, actions[before:]


def test_an_absence_that_waited_for_the_backup_to_be_removed_records_no_hand_over(
    make_case, lead, backup
):
    """Before, the absence named the backup the case no longer had: AttributeError, a 500,
    and nothing of the absence saved."""
    from cases.models import StaffProfile

    case = make_case()

    def no_backup(held) -> None:
        case_assign(
            case=held,
            expected_version=held.version,
            owner=lead,
            backup=None,
            reason="No backup",
            actor=lead,
        )

    waited, found, actions = _away_while(case, lead, no_backup)

    assert waited, "the absence never waited for the case's lock"
    assert "error" not in found, found
    assert StaffProfile.objects.get(user=lead).is_away()
    assert actions == [Action.CASE_REASSIGNED]


def test_an_absence_that_waited_for_a_handoff_says_nothing_on_a_case_no_longer_theirs(
    make_case, make_user, team, lead, backup
):
    """Before, the case handed to someone else recorded that responsibility passed to its
    backup while Lena (no longer its owner) was away: a false line on its audit trail."""
    case = make_case()
    newcomer = make_user("newcomer", "agent", teams=[team])

    def handoff(held) -> None:
        case_assign(
            case=held,
            expected_version=held.version,
            owner=newcomer,
            backup=backup,
            reason="Over to the newcomer",
            actor=lead,
        )

    waited, found, actions = _away_while(case, lead, handoff)

    assert waited, "the absence never waited for the case's lock"
    assert "error" not in found, found
    assert actions == [Action.CASE_REASSIGNED]
