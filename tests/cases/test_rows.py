"""The hot path's written-out statements (``cases/rows.py``) read and write what the ORM does.

On PostgreSQL a worker's steps lock, insert, save and update through statements written out
once and kept prepared; the other databases use the ORM. Each test runs one operation both
ways on the same rows, rolling back in between, and compares what the database then holds:
anything the written-out statement converts differently (an enum, a JSON field, a time zone,
``None`` in a condition, a foreign key given as an instance) shows up as a difference here.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from cases import rows
from cases.models import Case, CaseEvent, EvidenceReference, Status, WaitingOn

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="the written-out statements: PostgreSQL"
    ),
]


def _row(instance) -> dict:
    """Every column of ``instance`` as loaded (``model_to_dict`` leaves out those not editable,
    ``updated_at`` among them)."""
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def _state() -> dict[int, dict]:
    return {case.pk: _row(case) for case in Case.objects.order_by("pk")}


def _both(operation) -> tuple[object, dict, object, dict]:
    """``operation(written_out)`` run once written out and once through the ORM, each in a
    savepoint rolled back after: what each returned and the cases as each left them."""
    seen = []
    for written_out in (True, False):
        with transaction.atomic():
            sid = transaction.savepoint()
            result = operation(written_out)
            seen.append((result, _state()))
            transaction.savepoint_rollback(sid)
    (sql_result, sql_state), (orm_result, orm_state) = seen
    return sql_result, sql_state, orm_result, orm_state


@pytest.fixture
def cases(make_case, agent):
    made = [make_case(order_id=f"ORD-R{i}") for i in range(4)]
    Case.objects.filter(pk=made[1].pk).update(next_check_at=timezone.now(), owner=agent)
    Case.objects.filter(pk=made[2].pk).update(
        next_check_at=timezone.now() + dt.timedelta(hours=1), status=Status.READY
    )
    Case.objects.filter(pk=made[3].pk).update(next_check_at=None)
    return [Case.objects.get(pk=c.pk) for c in made]


@pytest.mark.parametrize(
    "where",
    [
        lambda c: {"pk": c[0].pk},
        lambda c: {"pk__in": [c[0].pk, c[2].pk]},
        lambda c: {"pk__in": []},
        lambda c: {"status": Status.READY},
        lambda c: {"status__in": [Status.READY, Status.NEW]},
        lambda c: {"next_check_at__isnull": True},
        lambda c: {"next_check_at__isnull": False},
        lambda c: {"next_check_at": None},
        lambda c: {"next_check_at__lte": timezone.now()},
        lambda c: {"next_check_at__gt": timezone.now()},
        lambda c: {"owner": c[0].owner},
        lambda c: {"owner_id": c[0].owner_id, "version__gte": 1},
        lambda c: {"account_id": c[0].account_id, "pk__lt": c[3].pk},
    ],
)
def test_an_update_written_out_matches_the_rows_and_the_count_of_the_orm(cases, agent, where):
    values = {
        "waiting_on": WaitingOn.OWNER,
        "waiting_reason": "Written out, or not",
        "next_check_at": timezone.now() + dt.timedelta(days=1),
        "owner": agent,
        "retry_counts": {"apply": 2},
    }

    def operation(written_out: bool) -> int:
        if written_out:
            return rows.update(Case, where(cases), values)
        return Case.objects.filter(**where(cases)).update(**values)

    sql_count, sql_state, orm_count, orm_state = _both(operation)
    assert sql_count == orm_count
    assert sql_state == orm_state


def test_an_update_the_module_cannot_write_out_goes_through_the_orm(cases):
    """A lookup through a relation, or an expression: the ORM's own update, the same result."""
    from django.db.models import F

    with transaction.atomic():
        moved = rows.update(
            Case, {"account__team": cases[0].account.team}, {"version": F("version")}
        )
    assert moved == len(cases)
    updated = rows.update(Case, {"order_id__startswith": "ORD-R"}, {"waiting_reason": "x"})
    assert updated == len(cases)


def test_a_save_of_some_fields_written_out_matches_the_orm(cases):
    def operation(written_out: bool) -> None:
        case = Case.objects.get(pk=cases[0].pk)
        case.version += 1
        case.waiting_on, case.outstanding_question = WaitingOn.APPROVERS, "Which date?"
        case.retry_counts = {"source_check": 1}
        names = ["version", "waiting_on", "outstanding_question", "retry_counts", "updated_at"]
        if written_out:
            rows.save_fields(case, names)
        else:
            case.save(update_fields=names)

    _, sql_state, _, orm_state = _both(operation)
    sql_case, orm_case = sql_state.pop(cases[0].pk), orm_state.pop(cases[0].pk)
    # ``updated_at`` is auto_now: each save sets its own time.
    assert sql_case.pop("updated_at") > cases[0].updated_at
    orm_case.pop("updated_at")
    assert sql_case == orm_case
    assert sql_state == orm_state


def test_a_save_of_a_row_that_is_gone_fails_as_the_orm_does(cases):
    case = cases[0]
    case.pk = 10**9
    with pytest.raises(DatabaseError, match="did not affect any rows"):
        rows.save_fields(case, ["waiting_reason"])


def test_inserts_written_out_store_what_the_orm_stores_and_get_their_ids(cases):
    def made(written_out: bool) -> list[dict]:
        evidence = [
            EvidenceReference(
                case=cases[i],
                source_system=EvidenceReference.Source.ORDER_SYSTEM,
                external_reference=f"operation:DATE-{i}",
                kind="operation_applied",
                permitted_basis=EvidenceReference.Basis.CONTRACT,
                summary="Ünïcode and a long enough summary",
                captured_at=timezone.now().replace(microsecond=123456),
                order_version=i,
                recorded_by="worker:test",
            )
            for i in (0, 1, 2)
        ]
        with transaction.atomic():
            sid = transaction.savepoint()
            if written_out:
                rows.insert(evidence)
            else:
                EvidenceReference.objects.bulk_create(evidence)
            assert all(e.pk is not None and not e._state.adding for e in evidence)
            stored = [_row(EvidenceReference.objects.get(pk=e.pk)) for e in evidence]
            transaction.savepoint_rollback(sid)
        for row, e in zip(stored, evidence, strict=True):
            assert row.pop("id") == e.pk
            row["captured_at"] = row["captured_at"] == e.captured_at
        return stored

    assert made(written_out=True) == made(written_out=False)


def test_the_locked_read_written_out_loads_the_case_and_its_account_as_the_orm(cases):
    with transaction.atomic():
        by_sql = rows.locked(Case, cases[1].pk, ("account", "owner", "backup", "team"))
        by_orm = (
            Case.objects.select_for_update(of=("self",))
            .select_related("account", "owner", "backup", "team")
            .get(pk=cases[1].pk)
        )
    assert _row(by_sql) == _row(by_orm)
    for name in ("account", "owner", "backup", "team"):
        assert _row(getattr(by_sql, name)) == _row(getattr(by_orm, name))
    assert not by_sql._state.adding
    with transaction.atomic(), pytest.raises(Case.DoesNotExist):
        rows.locked(Case, 10**9, ("account",))
    assert not rows._lockable(Case, ("owner__staff_profile",))  # the ORM's read, then
    assert rows._lockable(Case, ("account", "backup"))


def test_the_locked_read_leaves_a_nullable_relation_without_a_row_empty(cases):
    Case.objects.filter(pk=cases[0].pk).update(backup=None)
    with transaction.atomic():
        case = rows.locked(Case, cases[0].pk, ("backup", "account"))
    assert case.backup is None
    assert case.account.pk == cases[0].account_id


def test_the_chain_head_written_out_is_the_orm_s(cases):
    for case in cases:
        assert (
            rows.chain_head(case.pk)
            == (
                CaseEvent.objects.filter(case=case)
                .order_by("-id")
                .values_list("hash", flat=True)[0]
            )
        )
    assert rows.chain_head(10**9) is None


def test_the_kept_cursor_serves_each_block_and_a_block_inside_another_gets_its_own(cases):
    """One cursor of the connection's serves block after block (and the query log sees each
    statement); a block opened inside another's gets a cursor of its own, so the outer block's
    result is still there to read."""
    from django.test.utils import CaptureQueriesContext

    def raw(wrapped):
        return wrapped.cursor  # Django's wrapper around the psycopg cursor

    with CaptureQueriesContext(connection) as captured:
        with rows.prepared_cursor() as first:
            first.execute("SELECT 1")
            assert first.fetchone() == (1,)
        with rows.prepared_cursor() as second:
            second.execute("SELECT 2")
            assert second.fetchone() == (2,)
    assert raw(first) is raw(second)
    assert [q["sql"] for q in captured.captured_queries] == ["SELECT 1", "SELECT 2"]

    with rows.prepared_cursor() as outer:
        outer.execute("SELECT generate_series(1, 3)")
        assert outer.fetchone() == (1,)
        with rows.prepared_cursor() as inner:
            inner.execute("SELECT 42")
            assert inner.fetchone() == (42,)
        assert raw(inner) is not raw(outer)
        assert raw(inner).closed
        assert outer.fetchall() == [(2,), (3,)]
    assert not raw(outer).closed


@pytest.mark.django_db(transaction=True)
def test_a_connection_opened_again_gets_a_kept_cursor_of_its_own():
    with rows.prepared_cursor() as before:
        before.execute("SELECT 1")
    kept = before.cursor
    connection.close()
    with rows.prepared_cursor() as after:
        after.execute("SELECT 3")
        assert after.fetchone() == (3,)
    assert after.cursor is not kept


def test_a_statement_numbered_once_takes_each_name_by_one_number():
    """``numbered`` writes a named statement with PostgreSQL's own placeholders, one number per
    name however often it is used, and ``%%`` as the percent sign it stands for."""
    text, names = rows.numbered(
        "SELECT %(b)s, %(a)s || '%%', %(b)s FROM t WHERE x LIKE 'a%%' AND y = %(c)s"
    )

    assert text == "SELECT $1, $2 || '%', $1 FROM t WHERE x LIKE 'a%' AND y = $3"
    assert names == ("b", "a", "c")
    with pytest.raises(ValueError, match="A lone %"):
        rows.numbered("SELECT %(a)s, 5 % 2")


@pytest.mark.django_db(transaction=True)
def test_a_named_statement_reads_the_same_numbered_or_as_the_query_log_sees_it():
    """``fetchone_named`` numbers the statement when Django's query log is off, and runs it as
    written when it is on (the log writes statements out by ``%s``): the same row either way,
    with a value used twice, a percent sign and a list."""
    from django.test.utils import CaptureQueriesContext

    statement = (
        "SELECT %(a)s::int + %(a)s::int, 'x%%' || %(s)s::text, cardinality(%(l)s::int[]), "
        "%(missing)s::text IS NULL"
    )
    params = {"a": 20, "s": "y", "l": [1, 2, 3], "missing": None, "unused": object()}

    quiet = rows.fetchone_named(statement, params)
    with CaptureQueriesContext(connection) as logged:
        seen = rows.fetchone_named(statement, params)

    assert quiet == seen == (40, "x%y", 3, True)
    assert len(logged.captured_queries) == 1
    assert "%(" not in logged.captured_queries[0]["sql"]
