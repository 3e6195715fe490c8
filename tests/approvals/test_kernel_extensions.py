"""What approvals and reconciliation plug into the kernel's extension points (``cases.extensions``),
and the promise the evidence hook keeps: it runs in the transition's own transaction."""

from __future__ import annotations

import pytest
from django.core import checks
from django.db import connection

from approvals.extensions import withdraw_before_new_evidence
from approvals.models import Proposal
from approvals.selectors import eligible_approvers
from cases import extensions
from cases.live import QUEUES
from cases.models import Case, CaseEvent, Status
from cases.services import case_transition

from .conftest import reload


def test_the_upper_apps_register_their_contributions_after_the_kernels():
    assert list(QUEUES) == ["held", "needs_attention", "review"]
    assert QUEUES["review"].case_lookup == "case__"
    assert [tile.label for tile in extensions.dashboard_tiles()] == [
        "Proposals awaiting review",
        "Order events that failed",
    ]
    assert [panel.title for panel in extensions.dashboard_panels()] == ["Order system autonomy"]
    assert withdraw_before_new_evidence in extensions.BEFORE_EVIDENCE_REPLACED


def test_the_dispatched_task_check_is_reconciliations_and_registered():
    from reconciliation.checks import every_dispatched_task_resolves

    assert every_dispatched_task_resolves in checks.registry.registry.get_checks()
    assert every_dispatched_task_resolves(None) == []


def test_the_deciders_are_the_proposals_eligible_approvers(proposal, checked_case):
    assert extensions.case_deciders(proposal.case) == eligible_approvers(proposal)


def test_a_case_awaiting_no_review_has_no_deciders(case):
    assert extensions.case_deciders(case) is None


def _escalated(proposal: Proposal, agent) -> Case:
    case = reload(proposal.case)
    return case_transition(
        case=case,
        transition="escalate",
        expected_version=case.version,
        reason="The customer called about another order",
        actor=agent,
    )


def test_a_source_recheck_withdraws_the_open_proposal(proposal, agent):
    case = _escalated(proposal, agent)
    assert case.status == Status.NEEDS_ATTENTION

    case_transition(
        case=case,
        transition="request_source_check",
        expected_version=case.version,
        reason="Read it again",
        actor=agent,
    )

    assert reload(case).status == Status.WAITING_SOURCE
    assert Proposal.objects.get(pk=proposal.pk).status == Proposal.Status.WITHDRAWN


def test_the_evidence_hooks_run_in_the_transitions_transaction(proposal, agent, monkeypatch):
    """A hook that fails after approvals' withdrawal undoes the withdrawal with the transition:
    both were one transaction, on the locked case."""
    case = _escalated(proposal, agent)
    seen: list[tuple[bool, int]] = []

    def probe(locked: Case, reason: str) -> None:
        seen.append((connection.in_atomic_block, locked.version))
        assert Proposal.objects.get(pk=proposal.pk).status == Proposal.Status.WITHDRAWN
        raise RuntimeError("refused by the probe")

    monkeypatch.setattr(
        extensions, "BEFORE_EVIDENCE_REPLACED", [*extensions.BEFORE_EVIDENCE_REPLACED, probe]
    )
    events = CaseEvent.objects.filter(case=case).count()

    with pytest.raises(RuntimeError):
        case_transition(
            case=case,
            transition="request_source_check",
            expected_version=case.version,
            reason="Read it again",
            actor=agent,
        )

    assert seen == [(True, case.version)]
    assert reload(case).status == Status.NEEDS_ATTENTION
    assert Proposal.objects.get(pk=proposal.pk).status == Proposal.Status.AWAITING_REVIEW
    assert CaseEvent.objects.filter(case=case).count() == events
