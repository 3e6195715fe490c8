"""Writes held for the next statement (``cases.rows.writes_held``): what the server runs and what
a transaction holds are the same as without them; only the waits between statements go.

Each test looks from outside the block: the rows PostgreSQL holds, read on the same connection
after the block or on another connection after the commit, and libpq's own trace of the round
trips (``tests/support/txcount.round_trips``).
"""

from __future__ import annotations

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

from cases import rows
from cases.models import Case, EvidenceReference
from tests.support.txcount import round_trips

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="psycopg's pipeline: PostgreSQL"),
]


def _evidence(case: Case, key: str) -> EvidenceReference:
    return EvidenceReference(
        case=case,
        source_system=EvidenceReference.Source.ORDER_SYSTEM,
        external_reference=f"operation:{key}",
        kind="operation_applied",
        permitted_basis=EvidenceReference.Basis.CONTRACT,
        summary=f"{key} applied",
        captured_at=timezone.now(),
        order_version=1,
        recorded_by="worker:test",
    )


def _begun() -> None:
    """The transaction's first statement (psycopg sends its BEGIN as a round trip of its own, as
    before the lock that begins each of a worker's steps)."""
    Case.objects.select_for_update().filter(pk=0).exists()


def test_held_writes_go_with_the_next_statement_in_one_round_trip_and_it_reads_them(make_case):
    case = make_case(order_id="ORD-H1")
    evidence = _evidence(case, "H1")
    with transaction.atomic(), rows.writes_held():
        _begun()
        with round_trips() as trips:
            case.waiting_reason = "held, then read"
            rows.save_fields(case, ["waiting_reason"])
            rows.insert([evidence], hold=True)
            rows.update_unread(Case, {"pk": case.pk}, {"outstanding_question": "held too"})
            assert evidence.pk is None  # not sent yet: its id comes with the next statement
            # The read carries the three writes, in order, and sees them.
            seen = Case.objects.values_list("waiting_reason", "outstanding_question").get(
                pk=case.pk
            )
        assert seen == ("held, then read", "held too")
        assert evidence.pk is not None
        assert trips.count == 1, trips.waits
    stored = EvidenceReference.objects.get(pk=evidence.pk)
    assert stored.external_reference == "operation:H1"


def test_what_is_still_held_at_the_end_of_the_block_goes_then_and_commits(make_case):
    case = make_case(order_id="ORD-H2")
    with transaction.atomic():
        _begun()
        with round_trips() as trips, rows.writes_held():
            case.waiting_reason = "sent at the end"
            rows.save_fields(case, ["waiting_reason"])
            rows.update_unread(Case, {"pk": case.pk}, {"outstanding_question": "and this"})
        assert trips.count == 1, trips.waits
    case.refresh_from_db()
    assert (case.waiting_reason, case.outstanding_question) == ("sent at the end", "and this")


def test_without_a_block_nothing_is_held(make_case):
    case = make_case(order_id="ORD-H3")
    with transaction.atomic():
        _begun()
        with round_trips() as trips:
            case.waiting_reason = "at once"
            rows.save_fields(case, ["waiting_reason"])
            rows.update_unread(Case, {"pk": case.pk}, {"outstanding_question": "at once too"})
    assert trips.count == 2, trips.waits  # each write on its own


def test_a_held_write_that_fails_fails_the_statement_that_carries_it_and_nothing_commits(
    make_case,
):
    case = make_case(order_id="ORD-H4")
    other = make_case(order_id="ORD-H5")
    carried = False

    def step() -> None:
        nonlocal carried
        with transaction.atomic(), rows.writes_held():
            case.waiting_reason = "never stored"
            rows.save_fields(case, ["waiting_reason"])
            # The request key of another case of the account: refused by its unique index.
            rows.update_unread(Case, {"pk": case.pk}, {"request_key": other.request_key})
            carried = True  # nothing refused yet: both writes are held
            Case.objects.filter(pk=other.pk).exists()

    with pytest.raises(IntegrityError):
        step()
    assert carried
    case.refresh_from_db()
    assert case.waiting_reason != "never stored"


def test_a_held_save_of_a_row_that_is_gone_fails_as_the_orm_does(make_case):
    case = make_case(order_id="ORD-H6")
    case.pk = 10**9
    with (
        pytest.raises(DatabaseError, match="did not affect any rows"),
        transaction.atomic(),
        rows.writes_held(),
    ):
        rows.save_fields(case, ["waiting_reason"])


def test_a_block_left_by_an_exception_drops_what_it_holds_and_its_transaction_commits_nothing(
    make_case,
):
    """Caught inside the transaction, the exception would otherwise let it commit without the
    writes the block dropped: the transaction is marked to roll back instead."""
    case = make_case(order_id="ORD-H7")
    before = case.waiting_reason
    with transaction.atomic():
        try:
            with rows.writes_held():
                case.waiting_reason = "dropped"
                rows.save_fields(case, ["waiting_reason"])
                raise RuntimeError("the step gave up")
        except RuntimeError:
            pass
        assert transaction.get_rollback()
    case.refresh_from_db()
    assert case.waiting_reason == before


def test_a_server_side_cursor_gets_the_held_writes_sent_before_it(make_case):
    """The ORM's ``iterator()`` runs on a named cursor, which a pipeline cannot hold: what is
    held goes first, and the iteration sees it."""
    made = [make_case(order_id=f"ORD-H8{i}") for i in range(3)]
    with transaction.atomic(), rows.writes_held():
        for case in made:
            case.waiting_reason = "seen by the iterator"
            rows.save_fields(case, ["waiting_reason"])
        seen = list(
            Case.objects.filter(pk__in=[c.pk for c in made])
            .values_list("waiting_reason", flat=True)
            .iterator(chunk_size=2)
        )
    assert seen == ["seen by the iterator"] * 3
