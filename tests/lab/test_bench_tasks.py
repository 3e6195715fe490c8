"""``make bench``'s bare writes: the same writes an apply sends, with nothing of Holdfast's around
them. What the bench's ceiling line rests on: they really reach the order system, and a refusal
fails the task instead of passing for a write."""

from __future__ import annotations

import pytest

from approvals.models import Approval
from lab.bench.tasks import bare_writes
from reconciliation.exceptions import Conflict

pytestmark = pytest.mark.order_system


def _write(case) -> dict:
    approval = Approval.objects.select_related("operation", "proposal").get(proposal__case=case)
    return {
        "operation_key": approval.operation.key,
        "order_id": approval.operation.order_id,
        "change": approval.operation.change,
        "approval_grant": approval.grant,
        "expected_version": approval.proposal.evidence_order_version,
        "fencing_token": 1,
    }


def test_bare_writes_change_each_order_once_and_record_nothing(approved_case, live_orders):
    case = approved_case()
    attempts_before = case.attempts.count()

    assert bare_writes([_write(case)]) == 1

    state = live_orders.state(case.order_id)
    assert state["order"]["version"] == 2
    assert [op["operation_key"] for op in state["operations"]] == [_write(case)["operation_key"]]
    case.refresh_from_db()
    assert (case.status, case.attempts.count()) == ("ready", attempts_before)


def test_a_refused_bare_write_fails_the_task(approved_case, live_orders):
    case = approved_case()
    stale = {**_write(case), "expected_version": 7}

    with pytest.raises(Conflict):
        bare_writes([stale])
    assert live_orders.state(case.order_id)["operations"] == []
