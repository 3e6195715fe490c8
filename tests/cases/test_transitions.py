"""Manual transitions through ``case_transition``: one event per change, versions, refusals."""

from __future__ import annotations

import pytest
from django.utils import timezone

from cases.actions import allowed_transitions
from cases.exceptions import (
    ActionNotPermitted,
    InvalidCaseInput,
    TransitionRejected,
    VersionConflict,
)
from cases.models import CaseEvent, CustomerAccount, Status, WaitingOn
from cases.services import case_assign, case_transition
from tests.cases.helpers import events_after, last_event_id, reload


def _move(case, transition, actor, reason="Because the test says so", version=None):
    return case_transition(
        case=case,
        transition=transition,
        expected_version=case.version if version is None else version,
        reason=reason,
        actor=actor,
    )


def _assert_one_event(
    case, before_id, *, before_version, from_status, to_status, actor, reason, transition
):
    fresh = reload(case)
    new_events = events_after(case, before_id)
    assert len(new_events) == 1
    event = new_events[0]
    assert fresh.version == before_version + 1
    assert (event.action, event.from_status, event.to_status) == (
        "cases.case.transitioned",
        from_status,
        to_status,
    )
    assert event.version == fresh.version
    assert (event.actor, event.actor_label) == (actor, actor.get_username())
    assert event.reason == reason
    assert event.detail["transition"] == transition
    assert fresh.status == to_status
    return fresh, event


@pytest.mark.parametrize(
    ("transition", "target"),
    [("escalate", Status.NEEDS_ATTENTION), ("cancel", Status.CANCELLED), ("stop", Status.STOPPED)],
)
def test_each_manual_transition_writes_one_event_with_the_new_version(
    case, lead, transition, target
):
    before_id, before_version = last_event_id(case), case.version

    _move(case, transition, lead, reason=f"Lead decided to {transition}")

    _assert_one_event(
        case,
        before_id,
        before_version=before_version,
        from_status=Status.WAITING_SOURCE,
        to_status=target,
        actor=lead,
        reason=f"Lead decided to {transition}",
        transition=transition,
    )


def test_source_check_of_new_case_writes_one_event_once_account_is_verified(
    account, make_case, agent
):
    CustomerAccount.objects.filter(pk=account.pk).update(verified=False)
    account.refresh_from_db()
    case = make_case()
    assert case.status == Status.NEW
    CustomerAccount.objects.filter(pk=account.pk).update(verified=True)
    case = reload(case)
    before_id, before_version = last_event_id(case), case.version

    _move(case, "request_source_check", agent, reason="Identity confirmed by phone")

    fresh, _ = _assert_one_event(
        case,
        before_id,
        before_version=before_version,
        from_status=Status.NEW,
        to_status=Status.WAITING_SOURCE,
        actor=agent,
        reason="Identity confirmed by phone",
        transition="request_source_check",
    )
    assert fresh.waiting_on == WaitingOn.ORDER_SYSTEM
    assert fresh.next_check_at is not None


def test_source_check_after_escalation_writes_one_event(case, agent):
    _move(case, "escalate", agent)
    case = reload(case)
    before_id, before_version = last_event_id(case), case.version

    _move(case, "request_source_check", agent, reason="Try the order system again")

    _assert_one_event(
        case,
        before_id,
        before_version=before_version,
        from_status=Status.NEEDS_ATTENTION,
        to_status=Status.WAITING_SOURCE,
        actor=agent,
        reason="Try the order system again",
        transition="request_source_check",
    )


def test_every_event_version_matches_the_version_it_produced(case, lead, agent):
    _move(case, "escalate", agent)
    _move(reload(case), "request_source_check", agent)
    _move(reload(case), "escalate", lead)
    _move(reload(case), "cancel", lead)

    versions = list(
        CaseEvent.objects.filter(case=case).order_by("id").values_list("version", flat=True)
    )
    assert versions == [1, 2, 3, 4, 5, 6]
    assert reload(case).version == 6


def test_closing_transition_sets_closed_at_and_retention_and_clears_follow_up(case, lead, settings):
    settings.CASE_RETENTION_DAYS = 30

    _move(case, "cancel", lead)

    fresh = reload(case)
    assert fresh.closed_at is not None
    assert fresh.retention_until == timezone.localdate() + timezone.timedelta(days=30)
    assert fresh.next_check_at is None
    assert fresh.waiting_on == WaitingOn.NOBODY


def test_stale_expected_version_is_a_conflict_and_writes_nothing(case, lead):
    stale = case.version
    _move(case, "escalate", lead)  # someone else moved it first
    fresh = reload(case)
    before_id = last_event_id(case)

    with pytest.raises(VersionConflict) as conflict:
        _move(fresh, "cancel", lead, version=stale)

    assert conflict.value.extra == {"expected_version": stale, "current_version": stale + 1}
    after = reload(case)
    assert (after.status, after.version) == (Status.NEEDS_ATTENTION, stale + 1)
    assert events_after(case, before_id) == []


def test_transition_not_allowed_from_current_status_is_refused(case, lead):
    before_id, version = last_event_id(case), case.version

    with pytest.raises(TransitionRejected) as rejected:
        _move(case, "request_source_check", lead)  # it is already waiting for the source

    assert rejected.value.code == "transition_not_allowed"
    assert rejected.value.allowed == ["escalate", "cancel", "stop"]
    assert (reload(case).version, reload(case).status) == (version, Status.WAITING_SOURCE)
    assert events_after(case, before_id) == []


def test_closed_case_allows_no_transition(case, lead):
    _move(case, "cancel", lead)
    case = reload(case)
    before_id = last_event_id(case)

    for name in ("request_source_check", "escalate", "cancel", "stop"):
        with pytest.raises(TransitionRejected) as rejected:
            _move(case, name, lead)
        assert rejected.value.allowed == []

    assert events_after(case, before_id) == []
    assert reload(case).status == Status.CANCELLED


@pytest.mark.parametrize("name", ["claim", "complete", "settle_absent", "approve", "no_such"])
def test_workflow_transition_cannot_be_requested_by_hand(case, lead, name):
    before_id, version = last_event_id(case), case.version

    with pytest.raises(TransitionRejected):
        _move(case, name, lead)

    assert reload(case).version == version
    assert events_after(case, before_id) == []


def test_unverified_account_blocks_the_source_check_guard(account, make_case, agent):
    CustomerAccount.objects.filter(pk=account.pk).update(verified=False)
    account.refresh_from_db()
    case = make_case()

    with pytest.raises(TransitionRejected):
        _move(case, "request_source_check", agent)

    assert reload(case).status == Status.NEW


def test_transition_without_reason_is_refused(case, lead):
    before_id = last_event_id(case)

    with pytest.raises(InvalidCaseInput) as refused:
        _move(case, "escalate", lead, reason="   ")

    assert "reason" in refused.value.fields
    assert events_after(case, before_id) == []


def test_agent_cannot_stop_a_case(case, agent):
    before_id = last_event_id(case)

    with pytest.raises(ActionNotPermitted):
        _move(case, "stop", agent)

    assert "stop" not in allowed_transitions(case, agent)
    assert reload(case).status == Status.WAITING_SOURCE
    assert events_after(case, before_id) == []


@pytest.mark.parametrize("name", ["escalate", "cancel", "stop"])
def test_auditor_cannot_move_a_case(case, auditor, name):
    before_id = last_event_id(case)

    with pytest.raises(ActionNotPermitted):
        _move(case, name, auditor)

    assert allowed_transitions(case, auditor) == []
    assert events_after(case, before_id) == []


def test_lead_of_another_team_cannot_move_this_teams_case(case, outsider):
    before_id = last_event_id(case)

    with pytest.raises(ActionNotPermitted):
        _move(case, "stop", outsider)

    assert events_after(case, before_id) == []


def test_status_cannot_be_assigned_directly(case):
    with pytest.raises(AttributeError):
        case.status = Status.DONE


def test_reassignment_writes_one_reassigned_event(case, lead, backup, agent):
    before_id, version = last_event_id(case), case.version

    case_assign(
        case=case,
        expected_version=version,
        owner=backup,
        backup=agent,
        reason="Lena is on leave",
        actor=lead,
    )

    fresh = reload(case)
    (event,) = events_after(case, before_id)
    assert (fresh.owner, fresh.backup, fresh.version) == (backup, agent, version + 1)
    assert (event.action, event.version, event.actor, event.reason) == (
        "cases.case.reassigned",
        fresh.version,
        lead,
        "Lena is on leave",
    )
    assert event.detail == {
        "before": {"owner": "lead", "backup": "backup"},
        "after": {"owner": "backup", "backup": "agent"},
    }


def test_an_auditor_or_an_approver_only_is_never_made_owner_or_backup(
    case, lead, backup, auditor, approver
):
    # Saved before: the auditor's home then said "Mine to answer now 1" for a case they can
    # move nothing of, and its page "Nothing by hand: a worker acts next", which was false.
    from cases import selectors
    from cases.admin.forms import CaseChangeForm

    before_id = last_event_id(case)
    for owner, backup_ in ((auditor, backup), (lead, approver)):
        with pytest.raises(InvalidCaseInput) as refused:
            case_assign(
                case=case,
                expected_version=case.version,
                owner=owner,
                backup=backup_,
                reason="",
                actor=lead,
            )
        (field,) = refused.value.fields
        assert "may not work cases" in refused.value.fields[field][0]
    assert (reload(case).owner, events_after(case, before_id)) == (lead, [])
    offered = CaseChangeForm(instance=case).fields["owner"].queryset  # type: ignore[attr-defined]
    assert set(offered) == {lead, backup}
    # The case list's bulk reassignment offers the same people (every team of the lead's).
    assert set(selectors.case_workers_for(lead)) == {lead, backup}


def test_reassignment_to_someone_outside_the_team_is_refused(case, lead, outsider):
    before_id = last_event_id(case)

    with pytest.raises(InvalidCaseInput) as refused:
        case_assign(
            case=case,
            expected_version=case.version,
            owner=outsider,
            backup=None,
            reason="",
            actor=lead,
        )

    assert "owner" in refused.value.fields
    assert reload(case).owner == lead
    assert events_after(case, before_id) == []
