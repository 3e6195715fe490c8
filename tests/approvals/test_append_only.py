"""Approvals, proposal authors and attempts are append-only for the application, like the events.

Proposal authors never change; a decision never changes, only its revocation is written, once;
an attempt's identity never changes. None is deleted. The models refuse it (the guard SQLite
has); on PostgreSQL the README's grants refuse it to the application's role and triggers to
any role but the owner in maintenance.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection, transaction
from django.db.utils import ProgrammingError
from django.utils import timezone

from approvals.models import Approval, ProposalAuthor
from cases.append_only import maintenance
from cases.models import Attempt
from tests.support.db_roles import refused, role_connection, roles


@pytest.fixture
def attempt(approval):
    now = timezone.now()
    return Attempt.objects.create(
        case=approval.proposal.case,
        operation=approval.operation,
        reference=f"{approval.proposal.case.reference}-a1",
        sequence=1,
        worker="host:1",
        fencing_token=7,
        claimed_at=now,
        lease_expires_at=now + dt.timedelta(minutes=1),
    )


@pytest.fixture
def author(approval):
    return ProposalAuthor.objects.filter(proposal=approval.proposal).first()


def _snapshot(approval, attempt):
    approval.refresh_from_db()
    attempt.refresh_from_db()
    return (
        list(ProposalAuthor.objects.order_by("pk").values()),
        list(Approval.objects.order_by("pk").values()),
        list(Attempt.objects.order_by("pk").values()),
    )


# --- the models' guards (both databases) ----------------------------------------------------


def test_proposal_authors_are_never_updated_or_deleted_through_the_orm(author, approver):
    assert author is not None
    with pytest.raises(PermissionError, match="append-only"):
        ProposalAuthor.objects.filter(pk=author.pk).update(user=approver)
    with pytest.raises(PermissionError, match="append-only"):
        ProposalAuthor.objects.filter(pk=author.pk).delete()
    with pytest.raises(PermissionError, match="append-only"):
        author.proposal.authors.all().delete()
    author.user = approver
    with pytest.raises(PermissionError, match="append-only"):
        author.save()
    with pytest.raises(PermissionError, match="append-only"):
        author.delete()
    assert ProposalAuthor.objects.get(pk=author.pk).user_id != approver.pk


@pytest.mark.parametrize(
    "change",
    [
        {"decision": "rejected"},
        {"expires_at": "later"},
        {"grant": "forged"},
        {"proposal_hash": "0" * 64},
        {"reason": "rewritten"},
    ],
)
def test_a_decision_is_never_rewritten_through_the_orm(approval, change):
    if change.get("expires_at") == "later":
        change = {"expires_at": approval.expires_at + dt.timedelta(days=30)}
    with pytest.raises(PermissionError, match="append-only"):
        Approval.objects.filter(pk=approval.pk).update(**change)
    for field, value in change.items():
        setattr(approval, field, value)
    with pytest.raises(PermissionError, match="append-only"):
        approval.save(update_fields=list(change))
    with pytest.raises(PermissionError, match="append-only"):
        approval.save()


def test_an_approval_is_revoked_once_and_never_deleted_through_the_orm(approval):
    first = timezone.now()
    assert Approval.objects.filter(pk=approval.pk).update(revoked_at=first, revoked_reason="a")
    # A second revocation changes nothing: the first one stands.
    assert not Approval.objects.filter(pk=approval.pk).update(
        revoked_at=first + dt.timedelta(hours=1), revoked_reason="b"
    )
    approval.refresh_from_db()
    assert (approval.revoked_at, approval.revoked_reason) == (first, "a")
    with pytest.raises(PermissionError, match="append-only"):
        Approval.objects.filter(pk=approval.pk).delete()
    with pytest.raises(PermissionError, match="append-only"):
        approval.delete()


@pytest.mark.parametrize(
    "change",
    [
        {"fencing_token": 8},
        {"worker": "other:2"},
        {"reference": "D-1-a9"},
        {"sequence": 2},
        {"claimed_at": dt.datetime(2020, 1, 1, tzinfo=dt.UTC)},
        {"started_by": None, "kind": "other"},
    ],
)
def test_an_attempts_identity_never_changes_through_the_orm(attempt, change):
    with pytest.raises(PermissionError, match="append-only"):
        Attempt.objects.filter(pk=attempt.pk).update(**change)
    with pytest.raises(PermissionError, match="append-only"):
        attempt.save(update_fields=list(change))
    with pytest.raises(PermissionError, match="append-only"):
        attempt.save()


def test_an_attempts_state_lease_and_steps_change_and_it_is_never_deleted(attempt):
    now = timezone.now()
    moved = Attempt.objects.filter(pk=attempt.pk).update(
        state=Attempt.State.SUCCEEDED,
        lease_expires_at=now,
        heartbeat_at=now,
        last_confirmed_step=Attempt.Step.APPLIED,
        submitted_at=now,
        last_error="",
        cancel_requested_at=now,
        finished_at=now,
    )
    assert moved == 1
    attempt.last_error = "timeout"
    attempt.save(update_fields=["last_error"])
    with pytest.raises(PermissionError, match="append-only"):
        Attempt.objects.filter(pk=attempt.pk).delete()
    with pytest.raises(PermissionError, match="append-only"):
        attempt.delete()
    with pytest.raises(PermissionError, match="append-only"):
        attempt.case.attempts.all().delete()


def test_the_owners_repair_passes_the_orm_guards(attempt, approval):
    with maintenance():
        Attempt.objects.filter(pk=attempt.pk).update(fencing_token=9)
        Approval.objects.filter(pk=approval.pk).update(reason="repaired")
    attempt.refresh_from_db()
    approval.refresh_from_db()
    assert (attempt.fencing_token, approval.reason) == (9, "repaired")
    with pytest.raises(PermissionError):
        Attempt.objects.filter(pk=attempt.pk).update(fencing_token=10)


# --- the database (PostgreSQL): the app role's grants and the triggers ----------------------

GUARDED = "approvals_proposalauthor, approvals_approval, cases_attempt"

# Each is refused by the app role's grants and, for a role granted every privilege, by a trigger.
FORBIDDEN = [
    "UPDATE approvals_proposalauthor SET recorded_at = recorded_at - interval '1 day'",
    "DELETE FROM approvals_proposalauthor",
    "TRUNCATE approvals_proposalauthor CASCADE",
    "UPDATE approvals_approval SET decision = 'rejected'",
    "UPDATE approvals_approval SET expires_at = expires_at + interval '30 days'",
    "UPDATE approvals_approval SET decided_by_id = prepared_by_id",
    "DELETE FROM approvals_approval",
    "TRUNCATE approvals_approval CASCADE",
    "UPDATE cases_attempt SET fencing_token = fencing_token + 1000",
    "UPDATE cases_attempt SET worker = 'forged:1', state = 'running'",
    "UPDATE cases_attempt SET case_id = case_id, claimed_at = now() - interval '1 day'",
    "DELETE FROM cases_attempt",
    "TRUNCATE cases_attempt CASCADE",
]

ALLOWED = [
    "UPDATE cases_attempt SET state = 'succeeded', lease_expires_at = now(), "
    "heartbeat_at = now(), last_confirmed_step = 'applied', submitted_at = now(), "
    "last_error = 'x', cancel_requested_at = now(), finished_at = now()",
    "UPDATE approvals_approval SET revoked_at = now(), revoked_reason = 'source changed'",
]


def _run(conn, statements: list[str]) -> None:
    with conn.transaction(), conn.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


@pytest.fixture
def db_roles(transactional_db):
    with roles(writer_tables=tuple(GUARDED.split(", "))) as names:
        yield names


@pytest.mark.postgres_only
def test_the_app_role_of_the_readme_is_refused_every_rewrite(db_roles, attempt, author):
    approval = Approval.objects.get()
    before = _snapshot(approval, attempt)

    with role_connection(db_roles["app"]) as app:
        for statement in FORBIDDEN:
            message = refused(app, [statement])
            assert "permission denied for table" in message, (statement, message)
        # What the application writes: an attempt's state and lease, a revocation, authors.
        _run(app, ALLOWED)
        _run(
            app,
            [
                "INSERT INTO approvals_proposalauthor (proposal_id, user_id, role, recorded_at) "
                f"SELECT proposal_id, decided_by_id, 'prepared', now() FROM approvals_approval "
                f"WHERE id = {approval.pk}"
            ],
        )

    authors, approvals, attempts = _snapshot(approval, attempt)
    assert authors[: len(before[0])] == before[0]
    assert len(authors) == len(before[0]) + 1
    assert approval.revoked_reason == "source changed"
    assert attempt.state == Attempt.State.SUCCEEDED
    assert (attempt.fencing_token, attempt.worker) == (7, "host:1")


@pytest.mark.postgres_only
def test_a_role_granted_every_privilege_is_refused_by_the_triggers(db_roles, attempt, author):
    approval = Approval.objects.get()
    before = _snapshot(approval, attempt)

    with role_connection(db_roles["writer"]) as writer:
        for statement in FORBIDDEN:
            for switch in ([], ["SET LOCAL holdfast.maintenance = 'on'"]):
                message = refused(writer, [*switch, statement])
                assert "is append-only" in message, (statement, message)
                assert db_roles["writer"] in message, message
        message = refused(writer, ["UPDATE cases_attempt SET fencing_token = 1"])
        assert "UPDATE of fencing_token refused" in message, message
        _run(writer, ALLOWED)
        # A revocation is written once: the second is refused, and so is un-revoking.
        for statement in (
            "UPDATE approvals_approval SET revoked_at = now(), revoked_reason = 'again'",
            "UPDATE approvals_approval SET revoked_reason = 'reworded'",
            "UPDATE approvals_approval SET revoked_at = NULL, revoked_reason = ''",
        ):
            assert "already revoked" in refused(writer, [statement]), statement

    authors, approvals, attempts = _snapshot(approval, attempt)
    assert authors == before[0]
    assert approval.revoked_reason == "source changed"
    assert [a["fencing_token"] for a in attempts] == [7]


@pytest.mark.postgres_only
def test_a_revocation_must_set_revoked_at(db_roles, approval):
    with role_connection(db_roles["writer"]) as writer:
        message = refused(writer, ["UPDATE approvals_approval SET revoked_reason = 'why'"])
    assert "a revocation sets revoked_at" in message


@pytest.mark.postgres_only
def test_the_owner_is_refused_too_unless_it_sets_the_switch(attempt):
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL holdfast.maintenance = 'off'")
    for statement in FORBIDDEN[:1] + FORBIDDEN[3:4] + FORBIDDEN[8:9]:
        with (
            pytest.raises(ProgrammingError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(statement)
    with maintenance(), connection.cursor() as cursor:
        cursor.execute("UPDATE cases_attempt SET fencing_token = 99")
    attempt.refresh_from_db()
    assert attempt.fencing_token == 99


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_an_update_that_keeps_the_identity_runs_no_guard_function(attempt):
    """``cases`` 0037: the trigger's own condition lets a renewal or a state change pass
    without calling the function (each apply updates its attempt three times); an update of
    the identity still runs it, and is refused (its words). Counted by PostgreSQL itself
    (``pg_stat_xact_user_functions``, with ``track_functions`` on for the transaction)."""

    def guard_calls() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions "
                "WHERE funcname = 'holdfast_attempt_identity_fixed'"
            )
            return int(cursor.fetchone()[0])

    now = timezone.now()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL track_functions = 'pl'")
            cursor.execute("SET LOCAL holdfast.maintenance = 'off'")  # the tests' own is on
        Attempt.objects.filter(pk=attempt.pk).update(
            heartbeat_at=now, lease_expires_at=now + dt.timedelta(minutes=2)
        )
        Attempt.objects.filter(pk=attempt.pk).update(
            state=Attempt.State.SUCCEEDED, finished_at=now, last_confirmed_step="closed"
        )
        assert guard_calls() == 0
        with (
            pytest.raises(ProgrammingError, match="UPDATE of fencing_token refused"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute("UPDATE cases_attempt SET fencing_token = 8 WHERE id = %s", [attempt.pk])
    attempt.refresh_from_db()
    assert (attempt.state, attempt.fencing_token) == (Attempt.State.SUCCEEDED, 7)


def test_every_attempt_column_is_either_identity_or_mutable_in_both_guards():
    """The model's guard (``Attempt.MUTABLE``) and the trigger (``cases`` 0021's identity
    columns) split the attempt's columns the same way, and miss none."""
    import importlib

    migration = importlib.import_module("cases.migrations.0021_append_only_attempts")
    columns = {field.column for field in Attempt._meta.concrete_fields}
    assert set(migration.IDENTITY) | set(Attempt.MUTABLE) == columns
    assert not set(migration.IDENTITY) & set(Attempt.MUTABLE)
    assert set(migration.MUTABLE) == Attempt.MUTABLE
