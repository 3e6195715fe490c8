"""One bounded retry policy per kind of work, with its own counter (``cases.retries``) and one
give-up destination, a person (``reconciliation.failures.transient_failure_record``).

Before: settlement retried a held case forever, and the apply, the source check and the
settlement shared ``Case.retry_count``, so one kind's failures counted against another's bound.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from approvals.models import Operation
from cases.models import Case, CaseEvent, Status, WaitingOn
from cases.retries import POLICIES, retry_failures
from reconciliation.apply import apply_case
from reconciliation.settle import case_reconcile

pytestmark = pytest.mark.order_system


def _operations(live_orders, order_id="ORD-7731") -> list[dict]:
    return live_orders.state(order_id)["operations"]


def _held_after_dropped_response(approved_case, live_orders) -> Case:
    case = approved_case()
    live_orders.set_fault("drop_after_commit", path_prefix="/orders/")
    assert apply_case(case_id=case.pk) == "effect_unknown"
    case.refresh_from_db()
    assert case.status == Status.HELD
    return case


def test_every_kind_of_work_has_a_bounded_policy_from_settings(settings):
    settings.ATTEMPT_LIMIT = 7
    settings.RECONCILE_ATTEMPT_LIMIT = 4
    assert set(POLICIES) == {"apply", "source_check", "reconcile", "inbound"}
    assert POLICIES["apply"].limit == 7
    assert POLICIES["reconcile"].limit == 4
    assert POLICIES["reconcile"].gives_up(4)
    assert not POLICIES["reconcile"].gives_up(3)


def test_a_held_case_whose_settlement_keeps_failing_stays_held_and_goes_to_a_person(
    approved_case, live_orders, settings
):
    settings.RECONCILE_ATTEMPT_LIMIT = 3
    settings.RETRY_JITTER = 0
    case = _held_after_dropped_response(approved_case, live_orders)
    live_orders.set_fault("unavailable", path_prefix="/operations/", times=None)

    assert case_reconcile(case_id=case.pk) == "still held"
    assert case_reconcile(case_id=case.pk) == "still held"
    assert case_reconcile(case_id=case.pk) == "still held: a person settles it"

    case.refresh_from_db()
    # Uncertainty is never turned into a write: still held, with nothing settled or resent.
    assert case.status == Status.HELD
    assert case.waiting_on == WaitingOn.OWNER
    assert case.next_check_at is None  # nothing looks again on its own
    assert "Still unknown after 3 checks" in case.waiting_reason
    assert "consistent lookup failed" in case.last_error
    assert retry_failures(case, "reconcile") == 3
    event = CaseEvent.objects.filter(case=case).latest("id")
    assert event.action == "reconciliation.retries_exhausted"
    assert (event.detail["failures"], event.detail["attempt_limit"]) == (3, 3)
    assert Operation.objects.get(case=case).confirmed_at is None
    assert len(_operations(live_orders)) == 1


def test_apply_failures_do_not_count_against_the_settlement(approved_case, live_orders, settings):
    settings.ATTEMPT_LIMIT = 5
    settings.RETRY_JITTER = 0
    case = approved_case()
    live_orders.set_fault("fail_before_commit", path_prefix="/orders/", times=2)
    assert apply_case(case_id=case.pk) == "transient"
    assert apply_case(case_id=case.pk) == "transient"
    case.refresh_from_db()
    assert retry_failures(case, "apply") == 2

    live_orders.set_fault("drop_after_commit", path_prefix="/orders/")
    assert apply_case(case_id=case.pk) == "effect_unknown"
    live_orders.set_fault("unavailable", path_prefix="/operations/", times=None)
    before = timezone.now()
    assert case_reconcile(case_id=case.pk) == "still held"

    case.refresh_from_db()
    assert retry_failures(case, "reconcile") == 1
    assert retry_failures(case, "apply") == 2
    event = CaseEvent.objects.filter(case=case, action="reconciliation.still_unknown").latest("id")
    assert event.detail["failures"] == 1
    # The first settlement failure backs off as a first failure (5 s), not as the third.
    assert (case.next_check_at - before).total_seconds() < 8


def test_failed_source_checks_left_on_a_case_do_not_count_against_its_apply(
    approved_case, live_orders, settings
):
    settings.ATTEMPT_LIMIT = 3
    case = approved_case()
    # Two failed source checks on record: with one shared counter the first transient apply
    # failure would be the third and give up.
    Case.objects.filter(pk=case.pk).update(retry_count=2, retry_counts={"source_check": 2})
    live_orders.set_fault("fail_before_commit", path_prefix="/orders/")

    assert apply_case(case_id=case.pk) == "transient"

    case.refresh_from_db()
    assert case.status == Status.READY
    assert (retry_failures(case, "apply"), retry_failures(case, "source_check")) == (1, 2)
    assert case.retry_count == 1  # the step in progress: the apply


def test_a_successful_apply_resets_only_the_apply_counter(approved_case, live_orders, settings):
    case = approved_case()
    Case.objects.filter(pk=case.pk).update(retry_counts={"apply": 1, "source_check": 2})
    assert apply_case(case_id=case.pk) == "done"
    case.refresh_from_db()
    assert case.retry_counts == {"source_check": 2}
    assert case.retry_count == 0
