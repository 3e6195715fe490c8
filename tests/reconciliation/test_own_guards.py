"""Holdfast's own guards, proven without the receiver's help.

The order system here runs with its approval-expiry, access and version checks switched off
(``ORDERS_UNSAFE_SKIP_*``): it would apply whatever reaches it. So each refusal below is
Holdfast's own -- at the claim or just before the send -- and the order system's records show
that nothing reached it. The worker believes the receiver safe (its last probe said
autonomous: the receiver was reconfigured after it), which is the case these guards exist for.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.utils import timezone

import approvals.services as approval_services
from approvals.grants import grant_issue
from approvals.models import Approval, Proposal
from approvals.services import proposal_approve
from cases import kinds
from cases.append_only import maintenance
from cases.models import Attempt, CancellationRequest, Case, CaseEvent, CustomerAccount, Status
from reconciliation import apply as apply_module
from reconciliation.apply import apply_case
from reconciliation.client import OrderSystemClient
from reconciliation.models import CAPABILITIES, Autonomy, OrderSystemProfile
from reconciliation.revocation import account_revoke_access, case_revoke
from reconciliation.sources import source_check
from reconciliation.tasks import prepare_proposal
from tests.support.order_system import OrderSystemProcess

pytestmark = pytest.mark.order_system

ORDER = "ORD-7731"
UNSAFE = {
    "ORDERS_UNSAFE_SKIP_APPROVAL_CHECK": "1",
    "ORDERS_UNSAFE_SKIP_ACCESS_CHECK": "1",
    "ORDERS_UNSAFE_SKIP_VERSION_CHECK": "1",
}


@pytest.fixture(scope="module")
def order_system_process():
    """This module's order system: the receiver's own checks are off."""
    process = OrderSystemProcess(extra_env=UNSAFE).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def believed_safe(live_orders):
    """The latest profile of this order system says autonomous (every capability verified),
    as a probe run before the receiver lost its checks would have recorded."""
    return OrderSystemProfile.objects.create(
        base_url=settings.ORDER_SYSTEM_URL.rstrip("/"),
        sandbox_order_id="ORD-PROBE",
        reachable=True,
        autonomy=Autonomy.AUTONOMOUS,
        autonomy_reason="Every capability was verified by probing.",
        kind_autonomy=dict.fromkeys(kinds.codes(), Autonomy.AUTONOMOUS),
        **dict.fromkeys(CAPABILITIES, True),
    )


@pytest.fixture
def ready_case(believed_safe, make_case, approver):
    def make() -> tuple[Case, Approval]:
        case = make_case()
        assert source_check(case_id=case.pk) == "checked"
        assert prepare_proposal(case.pk) == "submitted"
        proposal = Proposal.objects.get(case=case, status=Proposal.Status.AWAITING_REVIEW)
        approval = proposal_approve(proposal=proposal, actor=approver)
        case.refresh_from_db()
        assert case.status == Status.READY
        return case, approval

    return make


def _expire(approval: Approval) -> None:
    """The approval's time is up (its signed grant still says later: this receiver does not
    look at it anyway). A decided approval never changes: the owner's repair moves its clock."""
    with maintenance():
        Approval.objects.filter(pk=approval.pk).update(
            expires_at=timezone.now() - dt.timedelta(seconds=1)
        )


def _nothing_reached_the_order(system, *, version: int = 1) -> None:
    state = system.state(ORDER)
    assert state["operations"] == []
    assert state["order"]["version"] == version


def test_this_receiver_really_applies_what_a_safe_one_refuses(live_orders):
    """Without this, the tests below would prove nothing: an expired grant, a stale expected
    version and a revoked account all go through here."""
    live_orders.set_access("ACC-100", False)
    change = {"kind": "delivery_date", "delivery_date": str(timezone.localdate() + dt.timedelta(9))}
    grant = grant_issue(
        operation_key="DATE-0-1",
        order_id=ORDER,
        change=change,
        approval_id="AP-0",
        expires_at=timezone.now() - dt.timedelta(hours=1),
    )
    with OrderSystemClient.from_settings() as client:
        result = client.apply_operation(
            ORDER,
            operation_key="DATE-0-1",
            change=change,
            expected_version=7,
            fencing_token=1,
            approval_grant=grant,
        )

    assert result.status == "applied"
    assert len(live_orders.state(ORDER)["operations"]) == 1


def test_an_approval_expired_before_the_claim_is_refused_by_the_claim(ready_case, live_orders):
    case, approval = ready_case()
    _expire(approval)

    assert apply_case(case_id=case.pk) == "refused: approval_expired"

    assert not Attempt.objects.filter(case=case).exists()  # refused at the claim itself
    case.refresh_from_db()
    assert case.status == Status.AWAITING_REVIEW
    _nothing_reached_the_order(live_orders)


def test_an_approval_expiring_between_claim_and_send_is_refused_before_the_send(
    ready_case, live_orders, monkeypatch
):
    case, approval = ready_case()
    # The claim passed with a live approval; it lapses now, before the send is marked.
    _at(monkeypatch, "after_claim", lambda: _expire(approval))

    assert apply_case(case_id=case.pk) == "approval_expired"

    attempt = Attempt.objects.get(case=case)
    assert attempt.state == Attempt.State.FAILED
    assert attempt.submitted_at is None
    case.refresh_from_db()
    assert case.status == Status.AWAITING_REVIEW
    _nothing_reached_the_order(live_orders)


def test_a_changed_source_is_refused_by_the_claim(ready_case, live_orders):
    """The order moved on (version 2) and Holdfast has read it, but the approved proposal
    rests on version 1: no claim."""
    case, _ = ready_case()
    moved = timezone.localdate() + dt.timedelta(days=5)
    live_orders.seed(
        orders=[
            {"order_id": ORDER, "account_id": "ACC-100", "delivery_date": str(moved), "version": 2}
        ]
    )
    # Recorded without the invalidation every service pairs with it (a row restored or
    # written outside the services): the claim's own check is the last line.
    Case.objects.filter(pk=case.pk).update(last_checked_order_version=2)

    assert apply_case(case_id=case.pk) == "refused: source_changed"

    assert not Attempt.objects.filter(case=case).exists()
    case.refresh_from_db()
    assert case.status == Status.WAITING_SOURCE
    assert Proposal.objects.get(case=case).status == Proposal.Status.INVALIDATED
    _nothing_reached_the_order(live_orders, version=2)


def test_a_revoked_account_is_refused_by_the_claim(ready_case, live_orders, account):
    """The account's access is off although its case was not revoked with it (a row restored
    or written outside ``account_revoke_access``): the claim's own check stops the work."""
    case, _ = ready_case()
    live_orders.set_access("ACC-100", False)
    CustomerAccount.objects.filter(pk=account.pk).update(access_active=False)

    assert apply_case(case_id=case.pk) == "refused: access_revoked"

    assert not Attempt.objects.filter(case=case).exists()
    case.refresh_from_db()
    assert case.status == Status.NEEDS_ATTENTION
    _nothing_reached_the_order(live_orders)


def test_an_account_revoked_through_the_service_stops_its_ready_case(
    ready_case, live_orders, account, lead
):
    case, _ = ready_case()
    live_orders.set_access("ACC-100", False)
    account_revoke_access(account=account, actor=lead, reason="The customer closed the account")

    assert apply_case(case_id=case.pk) == "refused: not_ready"

    case.refresh_from_db()
    assert case.status == Status.STOPPED
    assert not Attempt.objects.filter(case=case).exists()
    _nothing_reached_the_order(live_orders)


def test_a_claim_that_loses_a_race_with_a_revocation_says_revoked(
    ready_case, live_orders, lead, monkeypatch
):
    """The claim reads its guards under the case lock, so a revocation cannot slip in there;
    but its refusal is explained by reading the services' guards one by one, outside the lock.
    A revocation that commits during that look is what the refusal reports, not the guard it
    happened to trip (here an approval that had lapsed, found revoked too)."""
    case, approval = ready_case()
    _expire(approval)
    real_live_approval = approval_services.live_approval

    def revoke_then_look(case_, now=None):
        case_revoke(case=Case.objects.get(pk=case.pk), actor=lead, reason="withdrawn", fence=False)
        return real_live_approval(case_, now)

    monkeypatch.setattr(approval_services, "live_approval", revoke_then_look)

    assert apply_case(case_id=case.pk) == "refused: revoked"

    case.refresh_from_db()
    assert case.status == Status.STOPPED
    actions = set(CaseEvent.objects.filter(case=case).values_list("detail__transition", flat=True))
    assert "approval_expired" not in actions
    _nothing_reached_the_order(live_orders)


def _at(monkeypatch, point: str, action) -> None:
    """Run ``action()`` when the apply reaches the named point (``apply.STEP_POINT_OBSERVERS``)."""

    def observer(name: str) -> None:
        if name == point:
            action()

    monkeypatch.setattr(
        apply_module, "STEP_POINT_OBSERVERS", [*apply_module.STEP_POINT_OBSERVERS, observer]
    )


def test_a_revoked_case_is_refused_by_the_claim_even_with_its_approval_live(
    ready_case, live_orders
):
    """The case carries a revocation while its approval is still live (a row restored or
    written outside ``case_revoke``, which would also have closed the approval): the claim's
    own check of ``revoked_at`` is the last line."""
    case, _ = ready_case()
    Case.objects.filter(pk=case.pk).update(revoked_at=timezone.now(), revocation_kind="withdrawn")

    assert apply_case(case_id=case.pk) == "refused: revoked"

    assert not Attempt.objects.filter(case=case).exists()
    _nothing_reached_the_order(live_orders)


def test_a_pending_cancellation_is_refused_by_the_claim(ready_case, live_orders):
    """A customer's cancellation is pending on a ready case (recorded without the move every
    service pairs with it): the claim's own check stops the write."""
    case, _ = ready_case()
    CancellationRequest.objects.create(
        case=case, reason="The customer cancelled", via="system", requested_by_label="test"
    )

    assert apply_case(case_id=case.pk) == "refused: cancel_requested"

    assert not Attempt.objects.filter(case=case).exists()
    _nothing_reached_the_order(live_orders)


def test_a_lease_running_out_between_claim_and_send_stops_the_send(
    ready_case, live_orders, monkeypatch
):
    """The worker was slow between its claim and the send: its lease ran out (the watchdog has
    not looked yet, nobody fenced the order). The mark that the write may leave checks the
    lease, so nothing is sent."""
    case, _ = ready_case()

    def lease_runs_out() -> None:
        Attempt.objects.filter(case=case).update(
            lease_expires_at=timezone.now() - dt.timedelta(seconds=1)
        )

    _at(monkeypatch, "after_claim", lease_runs_out)

    assert apply_case(case_id=case.pk) == "stale: stopped before submitting"

    assert Attempt.objects.get(case=case).submitted_at is None
    _nothing_reached_the_order(live_orders)
