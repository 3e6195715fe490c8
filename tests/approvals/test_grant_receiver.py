"""The grant Holdfast signs on approval verifies at the reference order system, and nothing else
does: any altered field, another key or another request is refused as ``approval_invalid``."""

from __future__ import annotations

import base64
import datetime as dt
import json

import pytest

from approvals import services
from approvals.grants import grant_issue
from reconciliation.exceptions import ApprovalRefused
from reconciliation.sources import source_check
from tests.support.fixtures import date_change

from .conftest import ORDER, in_days, reload

pytestmark = pytest.mark.order_system


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _payload(grant: str) -> dict:
    body = grant.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))


def _tampered(grant: str, **changes) -> str:
    """The grant with payload fields changed and the original signature kept."""
    head, _, signature = grant.split(".")
    payload = {**_payload(grant), **changes}
    body = _b64(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode())
    return f"{head}.{body}.{signature}"


@pytest.fixture
def approved(live_orders, case, agent, approver):
    assert source_check(case_id=case.pk) == "checked"
    proposal = services.proposal_prepare(case=reload(case), actor=agent)
    return services.proposal_approve(proposal=proposal, actor=approver)


def test_issued_grant_verifies_at_the_receiver_and_every_altered_one_is_refused(
    approved, receiver, live_orders
):
    operation = approved.operation
    change = approved.proposal.change
    date = dt.date.fromisoformat(change["delivery_date"])
    later = date_change(date + dt.timedelta(days=1))
    payload = _payload(approved.grant)
    expiry = dt.datetime.fromisoformat(payload["expires_at"].replace("Z", "+00:00"))
    assert payload == {
        "approval_id": approved.reference,
        "operation_key": operation.key,
        "order_id": ORDER,
        "change": {"kind": "delivery_date", "delivery_date": date.isoformat()},
        "expires_at": payload["expires_at"],
    }
    resigned = {  # correctly signed with the shared key, but for something else
        "operation_key": grant_issue(
            operation_key=f"{operation.key}9",
            order_id=ORDER,
            change=change,
            approval_id=approved.reference,
            expires_at=expiry,
        ),
        "order_id": grant_issue(
            operation_key=operation.key,
            order_id="ORD-0001",
            change=change,
            approval_id=approved.reference,
            expires_at=expiry,
        ),
        "change": grant_issue(
            operation_key=operation.key,
            order_id=ORDER,
            change=later,
            approval_id=approved.reference,
            expires_at=expiry,
        ),
    }
    forged = {
        **{
            f"tampered {field}": _tampered(approved.grant, **{field: value})
            for field, value in {
                "approval_id": "AP-99999",
                "operation_key": f"{operation.key}9",
                "order_id": "ORD-0001",
                "change": later,
                "expires_at": "2099-01-01T00:00:00Z",
            }.items()
        },
        **{f"resigned {field}": grant for field, grant in resigned.items()},
        "another key": grant_issue(
            operation_key=operation.key,
            order_id=ORDER,
            change=change,
            approval_id=approved.reference,
            expires_at=expiry,
            key="not-the-shared-key",
        ),
        "signature flipped": approved.grant[:-2]
        + ("A" if approved.grant[-2] != "A" else "B")
        + approved.grant[-1],
    }
    for label, grant in forged.items():
        with pytest.raises(ApprovalRefused) as refused:
            receiver.apply_operation(
                ORDER,
                operation_key=operation.key,
                change=change,
                expected_version=1,
                fencing_token=1,
                approval_grant=grant,
            )
        assert refused.value.kind == "approval_invalid", label

    # The genuine grant sent for another change or operation than it names is refused too.
    for key, other in ((operation.key, date_change(in_days(12))), (f"{operation.key}9", change)):
        with pytest.raises(ApprovalRefused) as refused:
            receiver.apply_operation(
                ORDER,
                operation_key=key,
                change=other,
                expected_version=1,
                fencing_token=1,
                approval_grant=approved.grant,
            )
        assert refused.value.kind == "approval_invalid"
    assert live_orders.state(ORDER)["order"]["version"] == 1

    result = receiver.apply_operation(
        ORDER,
        operation_key=operation.key,
        change=change,
        expected_version=1,
        fencing_token=1,
        approval_grant=approved.grant,
    )
    assert (result.operation_key, result.order_version, result.replayed) == (
        operation.key,
        2,
        False,
    )
    state = live_orders.state(ORDER)
    assert state["order"]["delivery_date"] == date.isoformat()
    assert [op["operation_key"] for op in state["operations"]] == [operation.key]
