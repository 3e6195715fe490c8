"""The kernel's step (``cases.kernel``): lock, check, change, bump, audit, as one transaction."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.utils import timezone

from cases.exceptions import ActionNotPermitted, TransitionRejected, VersionConflict
from cases.kernel import (
    KEEP,
    SYSTEM,
    allowed_now,
    apply_transition,
    case_step,
    record_fact,
    writes_batched,
)
from cases.models import Case, CaseEvent, Status
from cases.services import case_update_followup

pytestmark = pytest.mark.django_db


def test_a_step_yields_the_locked_case_and_commits_one_event_per_bump(case, lead):
    with case_step(
        case.pk,
        actor=lead,
        permission="cases.work_case",
        what="note a fact",
        expected_version=case.version,
    ) as locked:
        assert isinstance(locked, Case)
        assert locked.pk == case.pk
        record_fact(case=locked, action="cases.case.followup_updated", actor=lead, reason="x")

    fresh = Case.objects.get(pk=case.pk)
    assert fresh.version == case.version + 1
    assert CaseEvent.objects.filter(case=case).latest("id").version == fresh.version


def test_a_stale_version_is_refused_before_the_body_runs(case, lead):
    ran = []
    with (
        pytest.raises(VersionConflict),
        case_step(case, actor=lead, expected_version=case.version - 1),
    ):
        ran.append(True)
    assert ran == []


def test_a_missing_permission_is_refused_and_names_the_action(case, auditor):
    with (
        pytest.raises(ActionNotPermitted, match=f"may not reassign the case on {case.reference}"),
        case_step(case, actor=auditor, permission="cases.lead_case", what="reassign the case"),
    ):
        pass


def test_an_error_in_the_body_rolls_the_whole_step_back(case, lead):
    events = CaseEvent.objects.filter(case=case).count()

    def step_that_fails() -> None:
        with case_step(case, actor=lead, permission="cases.work_case") as locked:
            record_fact(case=locked, action="cases.case.followup_updated", actor=lead)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        step_that_fails()
    assert Case.objects.get(pk=case.pk).version == case.version
    assert CaseEvent.objects.filter(case=case).count() == events


def test_keep_leaves_the_follow_up_time_and_none_clears_it(case, lead):
    when = timezone.now() + dt.timedelta(days=2)
    case = case_update_followup(
        case=case, expected_version=case.version, actor=lead, next_check_at=when
    )
    case = case_update_followup(
        case=case,
        expected_version=case.version,
        actor=lead,
        outstanding_question="Which slot?",
        next_check_at=KEEP,
    )
    assert Case.objects.get(pk=case.pk).next_check_at == when
    case = case_update_followup(
        case=case, expected_version=case.version, actor=lead, next_check_at=None
    )
    assert Case.objects.get(pk=case.pk).next_check_at is None


def test_a_refused_transition_lists_what_the_installed_hook_allows(case, lead):
    assert case.status == Status.WAITING_SOURCE
    with case_step(case, actor=SYSTEM) as locked, pytest.raises(TransitionRejected) as refused:
        apply_transition(locked, "complete", actor=lead, reason="not now")
    assert refused.value.allowed == allowed_now(case, lead)
    assert "cancel" in refused.value.allowed


def test_batched_writes_save_the_case_once_and_insert_its_events_together_in_chain_order(
    case, lead, django_assert_num_queries
):
    from cases.audit import verify_chains

    start = case.version
    # The chain's head, this test's own look at the row, then one save and one insert.
    with (
        case_step(case.pk, actor=lead) as locked,
        django_assert_num_queries(4),
        writes_batched(locked),
    ):
        for n in range(3):
            record_fact(
                case=locked, action="cases.case.followup_updated", actor=lead, reason=f"fact {n}"
            )
        with writes_batched(locked):  # an inner block leaves the writing to the outer one
            record_fact(case=locked, action="cases.case.followup_updated", actor=lead, reason="4")
        assert Case.objects.get(pk=case.pk).version == start  # nothing written yet
    events = list(CaseEvent.objects.filter(case=case).order_by("id"))
    assert [e.version for e in events[-4:]] == [start + 1, start + 2, start + 3, start + 4]
    assert [e.reason for e in events[-4:]] == ["fact 0", "fact 1", "fact 2", "4"]
    assert Case.objects.get(pk=case.pk).version == start + 4
    assert verify_chains(case_reference=case.reference).ok


def _fail_after_a_batched_fact(case: Case, lead) -> None:
    with case_step(case.pk, actor=lead) as locked, writes_batched(locked):
        record_fact(case=locked, action="cases.case.followup_updated", actor=lead)
        raise RuntimeError("stop")


def test_an_error_inside_batched_writes_writes_none_of_them(case, lead):
    start = case.version
    events = CaseEvent.objects.filter(case=case).count()
    with pytest.raises(RuntimeError):
        _fail_after_a_batched_fact(case, lead)
    assert Case.objects.get(pk=case.pk).version == start
    assert CaseEvent.objects.filter(case=case).count() == events


def test_a_person_acts_only_on_their_own_teams_cases(case, lead, outsider):
    """The permission alone is not enough: a lead of another team may not step on the case,
    and the refusal comes before anything is written."""
    from cases.kernel import actor_may, require

    assert actor_may(lead, "cases.lead_case", case)
    assert outsider.has_perm("cases.lead_case")
    assert not actor_may(outsider, "cases.lead_case", case)
    with pytest.raises(ActionNotPermitted):
        require(outsider, "cases.lead_case", case, "lead the case")
    version = case.version
    with (
        pytest.raises(ActionNotPermitted),
        case_step(
            case, actor=outsider, permission="cases.lead_case", what="lead the case"
        ) as locked,
    ):
        record_fact(case=locked, action="cases.case.followup_updated", actor=outsider)
    assert Case.objects.get(pk=case.pk).version == version


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="the one-statement claim: PostgreSQL",
)
def test_the_claim_s_values_kept_per_worker_are_those_worked_out_each_time(monkeypatch):
    """``pg_claim_params`` keeps what does not depend on the time per worker and kind; at any
    time it gives what working everything out through the models gives. A value that takes the
    time and is not named as one fails loudly, before a claim is written with a stale value."""
    from django.db import connection

    from cases import kernel

    worker = kernel.Worker("constants-test")
    for now in (timezone.now(), timezone.now() + dt.timedelta(days=3, microseconds=7)):
        lease = now + dt.timedelta(seconds=30)
        kept = kernel.pg_claim_params(worker=worker, kind="apply", now=now, lease=lease)
        whole = kernel.claim_params_at(
            connection, worker=worker, kind="apply", now=now, lease=lease
        )
        assert kept == whole
        assert kept["a_heartbeat_at"] == now
        assert kept["c_next_check_at"] == lease

    kernel._claim_constants.cache_clear()
    times = {k: v for k, v in kernel._CLAIM_TIMES.items() if k != "a_heartbeat_at"}
    monkeypatch.setattr(kernel, "_CLAIM_TIMES", times)
    with pytest.raises(AssertionError, match="a_heartbeat_at"):
        kernel.pg_claim_params(
            worker=kernel.Worker("constants-test-2"), kind="apply", now=timezone.now(), lease=lease
        )
    kernel._claim_constants.cache_clear()
