"""The audit log is a hash chain per case, and the application's database role cannot rewrite it.

``manage.py audit_verify`` walks every chain and reports the first broken link; on PostgreSQL
only a session acting as the table's owner, with the maintenance switch set, gets past the
append-only trigger.
"""

from __future__ import annotations

import datetime as dt
import importlib
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.utils import ProgrammingError
from django.utils import timezone

from cases.audit import HASHED_FIELDS, event_hash, stored_hash, verify_chains
from cases.codes import Action
from cases.kernel import Worker, record_event
from cases.models import CaseEvent
from cases.retention import case_purge
from cases.services import case_transition, case_update_followup
from tests.support.db_roles import refused, role_connection, roles

RETENTION_DAYS = 30


def _chain(case) -> list[CaseEvent]:
    return list(CaseEvent.objects.filter(case=case).order_by("id"))


def _escalate(case, actor):
    case.refresh_from_db()
    return case_transition(
        case=case,
        transition="escalate",
        expected_version=case.version,
        reason="The customer wrote again",
        actor=actor,
    )


def _verify(*args: str) -> tuple[str, str | None]:
    """audit_verify's output and, when it exits 1, its error."""
    out = StringIO()
    try:
        call_command("audit_verify", *args, stdout=out)
    except CommandError as error:
        failed = error
    else:
        return out.getvalue(), None
    assert failed.returncode == 1
    return out.getvalue(), str(failed)


def _raw(sql: str, params: list) -> None:
    """Rewrite history behind the ORM: plain SQL on SQLite; on PostgreSQL the owner's
    deliberate bypass (the test sessions connect as the table's owner)."""
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT set_config('holdfast.maintenance', 'on', true)")
        cursor.execute(sql, params)


# --- the chain -------------------------------------------------------------------------------


def test_each_event_links_to_the_previous_event_of_its_case(make_case, lead):
    case, other = make_case(), make_case()
    _escalate(case, lead)

    events = _chain(case)

    assert len(events) == 3
    assert events[0].prev_hash == ""
    assert [e.prev_hash for e in events[1:]] == [e.hash for e in events[:-1]]
    assert all(len(e.hash) == 64 and e.hash == stored_hash(e) for e in events)
    assert _chain(other)[0].prev_hash == ""  # each case has its own chain


def test_the_hash_covers_every_immutable_field_and_the_previous_hash(case):
    event = _chain(case)[0]
    fields = {name: getattr(event, name) for name in HASHED_FIELDS}
    base = event_hash(**fields, prev_hash="")

    changed = {
        "case_id": event.case_id + 1,
        "action": "cases.case.rewritten",
        "from_status": "done",
        "to_status": "done",
        "reason": event.reason + ".",
        "actor_id": 999,
        "actor_label": "someone else",
        "version": event.version + 1,
        "detail": {"forged": True},
        "created_at": event.created_at + dt.timedelta(microseconds=1),
    }
    assert set(changed) == set(HASHED_FIELDS)
    for name, value in changed.items():
        assert event_hash(**{**fields, name: value}, prev_hash="") != base, name
    assert event_hash(**fields, prev_hash="0" * 64) != base


def test_a_stored_detail_hashes_as_it_reads_back(case, lead):
    """jsonb keeps numbers as decimals and the column stores tuples as lists: the hash is
    computed over what the database gives back."""
    case.refresh_from_db()
    record_event(
        case=case,
        action=Action.EVIDENCE_RECORDED,
        actor=lead,
        detail={
            "big": 1e20,
            "ratio": 0.1,
            "pair": (1, 2),
            3: "int key",
            "nested": {"b": 1, "a": 2},
        },
    )

    assert verify_chains(case_reference=case.reference).ok


def test_a_clean_chain_verifies_in_batches_with_progress(make_case, lead):
    cases = [make_case() for _ in range(3)]
    for case in cases:
        _escalate(case, lead)

    out, error = _verify("--batch-size", "2")

    assert error is None
    assert out.count("checked") >= 4  # 9 events, read two at a time
    assert out.splitlines()[-1] == "Audit chain intact: 9 event(s) of 3 case(s)."


def test_a_rewritten_event_is_reported_at_the_first_broken_link(make_case, lead):
    intact, case = make_case(), make_case()
    _escalate(case, lead)
    _escalate(intact, lead)
    first, second, third = _chain(case)

    _raw("UPDATE cases_caseevent SET reason = %s WHERE id = %s", ["rewritten", second.pk])

    out, error = _verify("--batch-size", "2")
    assert error is not None
    assert "broken in 1 case(s)" in error
    rewritten = CaseEvent.objects.get(pk=second.pk)
    assert (
        f"{case.reference}: broken link at event {second.pk} (hash): "
        f"expected {stored_hash(rewritten)}, stored {second.hash}"
    ) in out.splitlines()
    assert intact.reference not in out
    assert len([line for line in out.splitlines() if "broken link" in line]) == 1
    assert f"event {third.pk} " not in out  # only the first broken link of the chain

    out, error = _verify("--case", intact.reference)
    assert error is None
    assert out.splitlines()[-1] == f"Audit chain intact: 3 event(s) of case {intact.reference}."
    _, error = _verify("--case", case.reference)
    assert error is not None


def test_a_rewritten_event_with_a_recomputed_hash_breaks_the_next_link(case, lead):
    _escalate(case, lead)
    first, second, third = _chain(case)
    second.reason = "rewritten"
    forged = stored_hash(second)

    _raw(
        "UPDATE cases_caseevent SET reason = %s, hash = %s WHERE id = %s",
        ["rewritten", forged, second.pk],
    )

    out, error = _verify()
    assert error is not None
    assert (
        f"{case.reference}: broken link at event {third.pk} (prev_hash): "
        f"expected {forged}, stored {second.hash}"
    ) in out.splitlines()


def test_a_deleted_event_breaks_the_link_of_the_event_after_it(case, lead):
    _escalate(case, lead)
    case.refresh_from_db()
    case_update_followup(
        case=case, expected_version=case.version, actor=lead, outstanding_question="Which slot?"
    )
    events = _chain(case)
    assert len(events) == 4
    victim, after = events[1], events[2]

    _raw("DELETE FROM cases_caseevent WHERE id = %s", [victim.pk])

    result = verify_chains()
    assert [(b.event_id, b.kind, b.expected, b.stored) for b in result.broken] == [
        (after.pk, "link", events[0].hash, victim.hash)
    ]


def test_audit_verify_refuses_an_unknown_case(db):
    with pytest.raises(CommandError, match="No case 'D-999'"):
        call_command("audit_verify", "--case", "D-999", stdout=StringIO())


def test_the_chain_continues_across_a_retention_purge(make_case, lead, settings):
    settings.CASE_RETENTION_DAYS = RETENTION_DAYS
    case = make_case(note="Call after 5pm")
    case = case_transition(
        case=case,
        transition="cancel",
        expected_version=case.version,
        reason="Customer withdrew",
        actor=lead,
    )
    before = _chain(case)

    case_purge(
        case=case, actor=lead, today=timezone.localdate() + dt.timedelta(days=RETENTION_DAYS + 1)
    )

    after = _chain(case)
    assert [(e.pk, e.hash) for e in after[: len(before)]] == [(e.pk, e.hash) for e in before]
    assert after[-1].action == "cases.case.purged"
    assert after[-1].prev_hash == before[-1].hash
    assert verify_chains(case_reference=case.reference).ok


def test_the_migration_links_existing_events_with_the_hashes_record_event_writes(make_case, lead):
    migration = importlib.import_module("cases.migrations.0010_caseevent_hash_chain")
    cases = [make_case(), make_case()]
    _escalate(cases[0], lead)
    written = {e.pk: (e.prev_hash, e.hash) for e in CaseEvent.objects.all()}
    _raw("UPDATE cases_caseevent SET prev_hash = '', hash = ''", [])
    assert not verify_chains().ok

    state = MigrationExecutor(connection).loader.project_state(
        ("cases", "0010_caseevent_hash_chain")
    )

    class SchemaEditor:  # the two things the migration uses of a schema editor
        def __init__(self, cursor):
            self.connection, self._cursor = connection, cursor

        def execute(self, sql, params=()):
            self._cursor.execute(sql, params)

    with transaction.atomic(), connection.cursor() as cursor:
        migration.link_existing_events(state.apps, SchemaEditor(cursor))

    assert {e.pk: (e.prev_hash, e.hash) for e in CaseEvent.objects.all()} == written
    assert verify_chains().ok


# --- the cost of the chain -------------------------------------------------------------------


def test_a_transition_pays_one_query_for_the_chain(case, lead, django_assert_num_queries):
    """Eleven queries before the chain (savepoint, lock, two permission reads, team, two
    attempt checks, the follow-up policy of the wait on a person it enters, update, insert,
    release); the chain's head is one indexed read more."""
    case.refresh_from_db()
    with django_assert_num_queries(12) as captured:
        _escalate_without_refresh(case, lead)

    head_reads = [
        q["sql"]
        for q in captured.captured_queries
        if q["sql"].startswith("SELECT") and 'FROM "cases_caseevent"' in q["sql"]
    ]
    assert len(head_reads) == 1
    assert "ORDER BY" in head_reads[0]
    assert "LIMIT 1" in head_reads[0]


def _escalate_without_refresh(case, actor):
    return case_transition(
        case=case,
        transition="escalate",
        expected_version=case.version,
        reason="The customer wrote again",
        actor=actor,
    )


# --- PostgreSQL: the application's role cannot rewrite events ----------------------------------


@pytest.fixture
def db_roles(transactional_db):
    """Two login roles in the test database: ``app`` as the README grants it (INSERT and
    SELECT on the event table), and ``writer`` granted every privilege on it, as the finding
    assumed. Dropped afterwards."""
    # The writer also holds every table whose rows point at events, so that TRUNCATE …
    # CASCADE reaches the event table's own guard.
    writer_tables = ("cases_caseevent", "approvals_proposalauthor", "cases_notification")
    with roles(writer_tables=writer_tables) as names:
        yield names


REWRITES = [
    ("UPDATE cases_caseevent SET reason = 'rewritten'",),
    ("DELETE FROM cases_caseevent",),
    ("TRUNCATE cases_caseevent CASCADE",),
    ("SET holdfast.maintenance = 'on'", "UPDATE cases_caseevent SET reason = 'rewritten'"),
    ("SET LOCAL holdfast.maintenance = 'on'", "DELETE FROM cases_caseevent"),
    ("SET holdfast.maintenance = 'on'", "TRUNCATE cases_caseevent CASCADE"),
]


def _insert_event(conn, case) -> None:
    with conn.transaction(), conn.cursor() as cursor:
        cursor.execute(
            "INSERT INTO cases_caseevent (case_id, action, from_status, to_status, reason, "
            "actor_label, version, detail, created_at, prev_hash, hash) VALUES "
            "(%s, 'cases.test.inserted', '', '', 'by the app role', 'app', %s, '{}', now(), "
            "'', '')",
            [case.pk, case.version],
        )


@pytest.mark.postgres_only
def test_the_app_role_can_insert_and_select_events_but_never_rewrite_them(db_roles, make_case):
    case = make_case()
    before = list(CaseEvent.objects.order_by("id").values_list("id", "reason", "hash"))

    with role_connection(db_roles["app"]) as app:
        for statements in REWRITES:
            message = refused(app, statements)
            assert "permission denied for table cases_caseevent" in message, statements
        _insert_event(app, case)
        with app.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM cases_caseevent WHERE case_id = %s", [case.pk])
            assert cursor.fetchone() == (len(before) + 1,)

    assert list(CaseEvent.objects.order_by("id").values_list("id", "reason", "hash"))[:-1] == before


@pytest.mark.postgres_only
def test_a_role_granted_update_still_cannot_flip_the_trigger_switch(db_roles, make_case):
    """The finding: a non-owner role with UPDATE, DELETE and TRUNCATE sets the maintenance
    switch and is still refused by the trigger."""
    make_case()
    before = list(CaseEvent.objects.order_by("id").values_list("id", "reason", "hash"))

    with role_connection(db_roles["writer"]) as writer:
        for statements in REWRITES:
            message = refused(writer, statements)
            assert "append-only" in message, statements
            assert db_roles["writer"] in message, statements

    assert list(CaseEvent.objects.order_by("id").values_list("id", "reason", "hash")) == before


@pytest.mark.postgres_only
def test_the_owner_is_refused_too_unless_it_sets_the_switch(case):
    event = _chain(case)[0]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL holdfast.maintenance = 'off'")
    with (
        pytest.raises(ProgrammingError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("UPDATE cases_caseevent SET reason = 'x' WHERE id = %s", [event.pk])

    _raw("UPDATE cases_caseevent SET reason = 'x' WHERE id = %s", [event.pk])
    assert CaseEvent.objects.get(pk=event.pk).reason == "x"


@pytest.mark.order_system
def test_the_chain_holds_through_a_claim_and_an_apply_written_in_one_batch(
    approved_case, live_orders, account
):
    """The claim writes its event in the same statement as the attempt (its head read with the
    case), and an apply with nothing to send writes the answer's, the notification's and the
    close's events in one insert: each still links to the event before it."""
    from reconciliation.apply import apply_case
    from reconciliation.claims import case_claim

    account.email = ""  # no address: the notification step is confirmed without a send
    account.save(update_fields=["email"])
    claimed, batched = approved_case(), approved_case()
    case_claim(case_id=claimed.pk, worker=Worker("worker:test:chain"))
    assert apply_case(case_id=batched.pk) == "done"

    for case in (claimed, batched):
        events = list(CaseEvent.objects.filter(case=case).order_by("id"))
        assert [e.prev_hash for e in events[1:]] == [e.hash for e in events[:-1]]
        assert verify_chains(case_reference=case.reference).ok
