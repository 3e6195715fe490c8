"""Review: after a restore is detected, no worker may resume a case before recovery held it and
checked its operation against the source. `restore_guard()` exists but nothing calls it: only
the dispatcher and `run_worker` check, while tasks already in the (ORM, hence restored) queue,
the apply queued on approval and `run_worker --apply` go straight to claim and send."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from pathlib import Path

import pytest
from django.conf import settings

from cases.models import Attempt, CaseEvent
from reconciliation import tasks
from reconciliation.restore_detection import RecoveryRequired, marker_advance, restore_detected

pytestmark = pytest.mark.order_system


def _simulate_restore() -> None:
    marker_advance()
    for path in Path(settings.HOLDFAST_STATE_DIR).glob("database-*.json"):
        seen = json.loads(path.read_text())
        path.write_text(json.dumps({**seen, "epoch": seen["epoch"] + 5}))
    assert restore_detected()


def test_a_queued_apply_task_does_not_resume_a_restored_database_before_recovery(
    approved_case, live_orders
):
    case = approved_case()
    _simulate_restore()

    with contextlib.suppress(RecoveryRequired):
        tasks.apply_case(case.pk)  # a task re-delivered from the restored ORM queue

    claimed = CaseEvent.objects.filter(case=case, action="cases.case.claimed").first()
    recovered = CaseEvent.objects.filter(case=case, detail__transition="hold_for_recovery").first()
    if claimed is not None:
        assert recovered is not None, "claimed before any hold_for_recovery"
        assert recovered.pk < claimed.pk, (
            "an attempt claimed and sent the operation of a restored case before recovery "
            f"checked it against the source ({Attempt.objects.filter(case=case).count()} "
            f"attempt(s), {len(live_orders.state('ORD-7731')['operations'])} applied)"
        )


@pytest.mark.django_db
def test_an_epoch_read_just_before_this_host_s_dispatcher_advanced_it_is_no_restore(
    settings, tmp_path
):
    """A claim reads the database's epoch with the case, then this host's file. When the
    host's dispatcher advances both in between, the file is ahead of what the claim read: the
    database did not go back in time, it moved on."""
    from cases.models import SystemMarker
    from reconciliation.restore_detection import MARKER, restore_detected_from

    settings.HOLDFAST_STATE_DIR = str(tmp_path / "host")
    marker_advance()
    read = SystemMarker.objects.get(name=MARKER)  # what the claim's statement saw

    marker_advance()  # the sweeper's pass on this host, before the claim reads the file

    assert restore_detected_from(read.identity, read.epoch) == ""
    # A database really behind the file is still a restore.
    SystemMarker.objects.filter(name=MARKER).update(epoch=read.epoch - 1)
    assert "restored from an older backup" in restore_detected_from(read.identity, read.epoch)


def test_a_worker_does_not_settle_a_held_case_on_a_restored_database(
    approved_case, live_orders, settings, tmp_path
):
    """A held case's finding would be recorded in records older than the order system: a
    worker leaves it to recovery (nothing fenced, nothing looked up, nothing written); the
    recovery itself settles it."""
    from django.utils import timezone

    from cases.kernel import Worker
    from cases.models import Case, Status
    from reconciliation.claims import attempts_expire_leases, case_claim
    from reconciliation.restore_recovery import recover_after_restore
    from reconciliation.settle import case_reconcile

    settings.HOLDFAST_STATE_DIR = str(tmp_path / "host")
    case = approved_case()
    case_claim(case_id=case.pk, worker=Worker("worker:test:restored"))
    assert attempts_expire_leases(now=timezone.now() + dt.timedelta(hours=1)) == 1
    version = Case.objects.get(pk=case.pk).version
    fence = live_orders.state("ORD-7731")["fence_token"]
    _simulate_restore()

    assert case_reconcile(case_id=case.pk) == "skipped: recovery after restore required"

    assert Case.objects.get(pk=case.pk).version == version
    assert live_orders.state("ORD-7731")["fence_token"] == fence
    assert recover_after_restore(progress=lambda line: None)["outcomes"] == {"absent": 1}
    assert Case.objects.get(pk=case.pk).status == Status.READY
