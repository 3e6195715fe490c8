"""A recovery after a restore that stops half way (its process killed after it held the cases,
while it asks the order system about the first one) leaves no case held for nobody: each held
case has a next check, the dispatcher hands it to reconciliation like any held case, and the
order still changes exactly once."""

from __future__ import annotations

import signal

import pytest
from django.utils import timezone

from cases.models import Case, CaseEvent, Status
from reconciliation.apply import apply_case
from reconciliation.dispatch import dispatch_due
from reconciliation.settle import case_reconcile
from tests.support.order_system import DEFAULT_GRANT_KEY
from tests.support.proc_worker import Proc, wait_for

pytestmark = [
    pytest.mark.order_system,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]

ORDER = "ORD-7731"


def test_a_recovery_killed_after_its_holds_leaves_every_case_to_the_dispatcher(
    approved_case, live_orders, tmp_path
):
    case = approved_case()
    # Ready and waiting on a person (a supervised apply nobody started yet): nothing is due.
    Case.objects.filter(pk=case.pk).update(next_check_at=None)
    version_before = live_orders.state(ORDER)["order"]["version"]
    # The recovery's first question about the case (its fence) waits: it is killed there.
    live_orders.set_fault("latency", seconds=30, path_prefix=f"/orders/{ORDER}/fence")
    env = {
        "ORDER_SYSTEM_URL": live_orders.base_url,
        "APPROVAL_GRANT_KEY": DEFAULT_GRANT_KEY,
        "HOLDFAST_STATE_DIR": str(tmp_path / "recovery-host"),
        "HOLD_FIRST_CHECK_SECONDS": "0",
    }
    with Proc("recover_after_restore", env=env) as recovery:
        wait_for(
            lambda: CaseEvent.objects.filter(
                case=case, detail__transition="hold_for_recovery"
            ).exists(),
            timeout=30,
            what=lambda: f"the recovery to hold the case\n{recovery.output()}",
        )
        recovery.process.send_signal(signal.SIGKILL)
        recovery.process.wait(timeout=10)
    live_orders.clear_faults()

    case.refresh_from_db()
    assert case.status == Status.HELD
    assert case.next_check_at is not None, "held with no next check: nobody would look again"
    assert case.next_check_at <= timezone.now()
    dispatched = []
    dispatch_due(run=lambda func, pk: dispatched.append((func, pk)))
    assert ("reconciliation.tasks.reconcile_case", case.pk) in dispatched

    assert case_reconcile(case_id=case.pk) == "absent"  # never sent: proven absent
    assert apply_case(case_id=case.pk) == "done"
    state = live_orders.state(ORDER)
    assert state["order"]["version"] == version_before + 1
    assert [op["status"] for op in state["operations"]] == ["applied"]
