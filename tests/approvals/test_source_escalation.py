"""A source that stays unavailable escalates after a bounded number of consecutive failed checks."""

from __future__ import annotations

import pytest
from django.utils import timezone

from cases.actions import allowed_transitions
from cases.models import CaseEvent, Status, WaitingOn
from cases.services import case_transition, transition_meta
from reconciliation.dispatch import dispatch_due
from reconciliation.sources import source_check

from .conftest import ORDER, in_days, reload

pytestmark = pytest.mark.order_system


@pytest.fixture
def limit_three(settings):
    settings.SOURCE_CHECK_ATTEMPT_LIMIT = 3
    settings.RETRY_BASE_SECONDS = 5.0
    settings.RETRY_MAX_SECONDS = 60.0
    settings.RETRY_JITTER = 0.0


def _unavailable(live_orders):
    live_orders.set_fault("unavailable", path_prefix="/orders/", times=None)


def test_source_unavailable_on_limit_checks_goes_to_needs_attention_and_a_person_restarts_it(
    case, live_orders, limit_three, lead
):
    _unavailable(live_orders)

    for failures in (1, 2):
        before = timezone.now()
        assert source_check(case_id=case.pk) == "retry_scheduled"
        fresh = reload(case)
        assert fresh.status == Status.WAITING_SOURCE
        assert fresh.waiting_on == WaitingOn.ORDER_SYSTEM
        assert fresh.retry_count == failures
        assert fresh.next_check_at > before
    assert "said it was unavailable on 2 checks in a row" in fresh.last_error

    assert source_check(case_id=case.pk) == "needs_attention"
    case = reload(case)
    assert case.status == Status.NEEDS_ATTENTION
    assert case.waiting_on == WaitingOn.OWNER
    assert case.retry_count == 3
    assert case.next_check_at is None
    assert case.last_error.startswith(
        "The order system said it was unavailable on 3 checks in a row; last at "
    )
    assert case.last_error.endswith(" UTC (unavailable: Injected fault: unavailable.)")
    event = CaseEvent.objects.filter(case=case).latest("id")
    assert (event.from_status, event.to_status, event.version) == (
        Status.WAITING_SOURCE,
        Status.NEEDS_ATTENTION,
        case.version,
    )
    assert event.detail["transition"] == "escalate"
    assert event.detail["failed_checks"] == 3
    assert event.detail["last_error"] == case.last_error
    assert "request_source_check" in allowed_transitions(case, lead)
    assert transition_meta("request_source_check")["custom"]["label"] == "Check the source now"

    # Nothing retries from needs attention: no task is dispatched, no check moves the case.
    assert dispatch_due(run=lambda *_: pytest.fail("needs attention was dispatched")) == 0
    assert source_check(case_id=case.pk) == "skipped"
    assert reload(case).version == case.version

    case = case_transition(
        case=case,
        transition="request_source_check",
        expected_version=case.version,
        reason="The order system is back",
        actor=lead,
    )
    case = reload(case)
    assert case.status == Status.WAITING_SOURCE
    assert case.retry_count == 0
    assert case.next_check_at <= timezone.now()

    live_orders.clear_faults()
    assert source_check(case_id=case.pk) == "checked"
    case = reload(case)
    assert case.status == Status.PREPARING_PROPOSAL
    assert case.retry_count == 0
    assert case.last_error == ""


def test_after_a_person_restarts_the_checks_the_full_limit_applies_again(
    case, live_orders, limit_three, lead
):
    _unavailable(live_orders)
    for _ in range(3):
        source_check(case_id=case.pk)
    case = reload(case)
    assert case.status == Status.NEEDS_ATTENTION
    case_transition(
        case=case,
        transition="request_source_check",
        expected_version=case.version,
        reason="Try again",
        actor=lead,
    )

    assert source_check(case_id=case.pk) == "retry_scheduled"
    assert source_check(case_id=case.pk) == "retry_scheduled"
    assert reload(case).status == Status.WAITING_SOURCE
    assert source_check(case_id=case.pk) == "needs_attention"


def test_a_successful_check_resets_the_count_of_failed_checks(case, live_orders, limit_three):
    _unavailable(live_orders)
    assert source_check(case_id=case.pk) == "retry_scheduled"
    assert source_check(case_id=case.pk) == "retry_scheduled"
    assert reload(case).retry_count == 2

    live_orders.clear_faults()
    assert source_check(case_id=case.pk) == "checked"
    assert reload(case).retry_count == 0

    # The order moves: the case waits for the source again and the source fails again.
    live_orders.seed(
        orders=[
            {
                "order_id": ORDER,
                "account_id": "ACC-100",
                "delivery_date": str(in_days(4)),
                "version": 2,
            }
        ]
    )
    assert source_check(case_id=case.pk) == "invalidated"
    assert reload(case).status == Status.WAITING_SOURCE
    _unavailable(live_orders)
    assert source_check(case_id=case.pk) == "retry_scheduled"
    assert source_check(case_id=case.pk) == "retry_scheduled"
    fresh = reload(case)
    assert (fresh.status, fresh.retry_count) == (Status.WAITING_SOURCE, 2)

    assert source_check(case_id=case.pk) == "needs_attention"
    event = CaseEvent.objects.filter(case=case).latest("id")
    assert event.detail["failed_checks"] == 3


def test_source_check_of_a_case_needing_attention_for_another_cause_changes_nothing(
    case, live_orders, limit_three
):
    live_orders.seed(
        accounts=[{"account_id": "ACC-999", "name": "Someone else"}],
        orders=[{"order_id": ORDER, "account_id": "ACC-999", "delivery_date": str(in_days(3))}],
    )
    assert source_check(case_id=case.pk) == "needs_attention"
    case = reload(case)
    error, version = case.last_error, case.version
    assert f"has no order {ORDER} of account ACC-100" in error

    _unavailable(live_orders)
    for _ in range(4):
        assert source_check(case_id=case.pk) == "skipped"
    case = reload(case)
    assert case.status == Status.NEEDS_ATTENTION
    assert (case.version, case.last_error, case.retry_count) == (version, error, 0)
    assert case.next_check_at is None
    assert not CaseEvent.objects.filter(
        case=case, action="reconciliation.source_check.failed"
    ).exists()
