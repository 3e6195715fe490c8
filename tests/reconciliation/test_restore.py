"""Recovery after a backup of Holdfast's database is restored over newer records.

The restored records may lack a confirmation the order system already holds: recovery finds
every unconfirmed operation, holds its case and reconciles it against the source before any
worker resumes, so nothing is applied twice.
"""

from __future__ import annotations

import json
import os
import subprocess
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection, connections

from approvals.models import Operation
from cases.models import CaseEvent, Status
from reconciliation.apply import apply_case
from reconciliation.client import OrderSystemClient
from reconciliation.dispatch import dispatch_due
from reconciliation.restore_detection import marker_advance, restore_detected
from reconciliation.restore_recovery import suspects

pytestmark = pytest.mark.order_system


@pytest.fixture(autouse=True)
def _own_state_dir(settings, tmp_path):
    """The epochs this "host" saw live in the test's own directory, never in var/."""
    settings.HOLDFAST_STATE_DIR = str(tmp_path / "host-state")


def _pg(*args: str, env: dict | None = None) -> None:
    completed = subprocess.run(  # noqa: S603 - fixed PostgreSQL client tools
        list(args), capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert completed.returncode == 0, completed.stderr


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_restored_backup_older_than_the_change_is_recovered_without_a_second_apply(
    approved_case, live_orders, tmp_path
):
    case = approved_case()
    marker_advance()
    dbname = connection.settings_dict["NAME"]
    dump = str(tmp_path / "holdfast.dump")
    _pg("pg_dump", "-h", "127.0.0.1", "-U", "postgres", "-Fc", "-f", dump, dbname)

    assert apply_case(case_id=case.pk) == "done"
    applied = live_orders.state("ORD-7731")
    assert len(applied["operations"]) == 1
    marker_advance()  # the host has seen a newer database than the backup

    connections.close_all()
    env = {**os.environ, "PGOPTIONS": "-c holdfast.maintenance=on"}
    _pg(
        "pg_restore", "--clean", "--if-exists", "-h", "127.0.0.1", "-U", "postgres",
        "-d", dbname, dump, env=env,
    )  # fmt: skip

    case.refresh_from_db()
    assert case.status == Status.READY  # the restored records lack the confirmation
    assert Operation.objects.get(case=case).confirmed_at is None
    assert "restored from an older backup" in restore_detected()
    assert suspects() == [case.pk]

    out = StringIO()
    call_command("recover_after_restore", stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[0].startswith("Restore detected")
    assert "1 case(s) with unconfirmed operations" in lines[1]
    assert f"[1/1] {case.reference}: applied" in lines
    assert any(line.startswith("Recovery complete") for line in lines)
    assert restore_detected() == ""
    case.refresh_from_db()
    assert case.status == Status.READY  # proven applied: only the steps after it resume
    held = CaseEvent.objects.filter(case=case, detail__transition="hold_for_recovery")
    assert held.count() == 1
    operation = Operation.objects.get(case=case)
    assert operation.result_order_version == applied["order"]["version"]
    after_recovery = live_orders.state("ORD-7731")
    assert after_recovery["order"]["version"] == applied["order"]["version"]
    assert after_recovery["operations"] == applied["operations"]

    assert apply_case(case_id=case.pk) == "done"

    final = live_orders.state("ORD-7731")
    assert len(final["operations"]) == 1
    assert final["order"]["version"] == applied["order"]["version"]
    case.refresh_from_db()
    assert case.status == Status.DONE


def _awaiting_review(make_case):
    from reconciliation.sources import source_check
    from reconciliation.tasks import prepare_proposal

    case = make_case()
    source_check(case_id=case.pk)
    prepare_proposal(case.pk)
    case.refresh_from_db()
    assert case.status == Status.AWAITING_REVIEW
    return case


def test_suspects_include_a_case_awaiting_review_whose_operation_is_unconfirmed(
    live_orders, make_case
):
    reviewing = _awaiting_review(make_case)
    waiting = make_case()  # no proposal, no operation: nothing could have been sent

    found = suspects()

    assert reviewing.pk in found
    assert waiting.pk not in found


def _simulate_restore() -> None:
    """The host remembers a newer epoch than the database holds, as after a restore."""
    marker_advance()
    files = list(Path(settings.HOLDFAST_STATE_DIR).glob("database-*.json"))
    assert files
    for path in files:
        seen = json.loads(path.read_text())
        path.write_text(json.dumps({**seen, "epoch": seen["epoch"] + 5}))
    assert restore_detected()


def test_dispatch_recovers_first_when_a_restore_is_detected(approved_case, live_orders):
    case = approved_case()
    _simulate_restore()
    ran = []

    dispatched = dispatch_due(run=lambda func, pk: ran.append((func, pk)))

    assert restore_detected() == ""
    transitions = list(
        CaseEvent.objects.filter(case=case, action="cases.case.transitioned")
        .order_by("id")
        .values_list("detail__transition", flat=True)
    )
    assert transitions[-2:] == ["hold_for_recovery", "settle_absent"]
    assert dispatched == 1
    assert ran == [("reconciliation.tasks.apply_case", case.pk)]
    assert live_orders.state("ORD-7731")["operations"] == []


@pytest.mark.django_db(
    transaction=True
)  # the worker's tasks are queued on commit, as in production
def test_run_worker_once_recovers_before_any_work_resumes(approved_case, live_orders):
    case = approved_case()
    _simulate_restore()
    out = StringIO()

    call_command("run_worker", "--once", stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[0].startswith("Restore detected")
    recovered = next(i for i, line in enumerate(lines) if case.reference in line)
    applied = next(i for i, line in enumerate(lines) if "apply_case" in line)
    assert recovered < applied
    assert restore_detected() == ""
    case.refresh_from_db()
    assert case.status == Status.DONE
    assert len(live_orders.state("ORD-7731")["operations"]) == 1


def test_recovery_moves_the_fencing_sequence_past_every_token_already_used(
    approved_case, live_orders
):
    """After a restore the sequence may be behind tokens the order system has seen: recovery
    moves it a whole jump past the highest of both, so no token is ever handed out twice."""
    from cases.fencing import fencing_current, next_fencing_token
    from reconciliation.restore_recovery import FENCING_JUMP, advance_counters

    approved_case()
    seen_by_the_order_system = next_fencing_token() + 500
    with OrderSystemClient.from_settings() as client:
        client.fence("ORD-7731", seen_by_the_order_system)

    floors = advance_counters()

    assert floors["fencing_token"] == seen_by_the_order_system + FENCING_JUMP
    assert fencing_current() == floors["fencing_token"]
    assert next_fencing_token() == floors["fencing_token"] + 1


def test_a_proposal_back_in_review_after_a_restore_is_not_announced_twice(
    live_orders, autonomous, make_case, approver
):
    """After a restore, recovery holds a case in review and, proving nothing was sent, returns
    it to review: the approvers were told of its proposal a second time ("6 notifications for
    3 proposals" after `make drill` ran its restore drill against `make run`). The proposal and
    its decision are as they were: whoever was told is not told again; the hold and the return
    are on the case's timeline."""
    from cases.models import Notification

    reviewing = _awaiting_review(make_case)
    told = list(Notification.objects.filter(case=reviewing, kind="awaiting_review"))
    assert [n.recipient for n in told] == [approver]

    _simulate_restore()
    dispatch_due(run=lambda func, pk: None)

    reviewing.refresh_from_db()
    assert reviewing.status == Status.AWAITING_REVIEW
    steps = list(
        CaseEvent.objects.filter(case=reviewing, action="cases.case.transitioned")
        .order_by("id")
        .values_list("from_status", "to_status")
    )
    assert steps[-2:] == [
        (Status.AWAITING_REVIEW, Status.HELD),
        (Status.HELD, Status.AWAITING_REVIEW),
    ]
    again = Notification.objects.filter(case=reviewing, kind="awaiting_review")
    assert list(again) == told
