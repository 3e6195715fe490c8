"""An approval wakes an idle worker: the apply starts on the approval's commit, not at the
broker's next poll nor the sweep's next pass (``cases.broker``: PostgreSQL LISTEN/NOTIFY).

A real ``qcluster`` polls an empty queue only every 10 s and sweeps every 30 s here, so a case
done within 3 s of its approval was woken by the approval itself.
"""

from __future__ import annotations

import time

import pytest

from approvals.models import Proposal
from approvals.services import proposal_approve
from cases.models import Case, Status
from reconciliation.sources import source_check
from reconciliation.tasks import prepare_proposal
from tests.support.order_system import DEFAULT_GRANT_KEY
from tests.support.proc_worker import Proc, wait_for

pytestmark = [
    pytest.mark.order_system,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]

POLL_SECONDS = 10.0
SWEEP_SECONDS = 30.0
WOKEN_WITHIN = 3.0


def _awaiting_review(make_case) -> Proposal:
    case = make_case()
    assert source_check(case_id=case.pk) == "checked"
    assert prepare_proposal(case.pk) == "submitted"
    return Proposal.objects.get(case=case, status=Proposal.Status.AWAITING_REVIEW)


def _idle() -> None:
    """The cluster is up, has taken a task, and waits on an empty queue."""
    from django_q.models import OrmQ
    from django_q.tasks import async_task

    before = OrmQ.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    async_task("lab.bench.tasks.noop")
    [row] = OrmQ.objects.filter(pk__gt=before).values_list("pk", flat=True)
    wait_for(lambda: not OrmQ.objects.filter(pk=row).exists(), timeout=60, what="the no-op")
    time.sleep(1.0)  # its pusher has looked at the empty queue again: it waits now


def test_an_approval_wakes_an_idle_worker_well_before_a_poll_or_a_sweep(
    make_case, approver, live_orders, autonomous, tmp_path
):
    proposals = [_awaiting_review(make_case) for _ in range(3)]
    env = {
        "ORDER_SYSTEM_URL": live_orders.base_url,
        "APPROVAL_GRANT_KEY": DEFAULT_GRANT_KEY,
        "HOLDFAST_STATE_DIR": str(tmp_path / "worker-state"),
        "Q_POLL": str(POLL_SECONDS),
        "SWEEP_INTERVAL_SECONDS": str(SWEEP_SECONDS),
    }
    waits = []
    with Proc("qcluster", env=env) as cluster:
        _idle()
        for proposal in proposals:
            proposal_approve(proposal=proposal, actor=approver)  # commits: the wake
            approved = time.monotonic()
            wait_for(
                lambda p=proposal: Case.objects.get(pk=p.case_id).status == Status.DONE,
                timeout=SWEEP_SECONDS,
                what=f"case {proposal.case_id} done",
            )
            waits.append(time.monotonic() - approved)
            time.sleep(0.5)  # idle again before the next approval
        output = cluster.output()
    print("\napprove → done:", ", ".join(f"{w * 1000:.0f} ms" for w in waits))
    assert max(waits) < WOKEN_WITHIN, (waits, output[-3000:])
