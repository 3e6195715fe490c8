"""What approvals plugs into the kernel's extension points (``cases.extensions``).

Registered once from ``ApprovalsConfig.ready``: the review queue (its admin list polls it), its
line on the admin home, who may decide a case awaiting review, the decision page a notification
to decide leads to, the decisions a person may take ("Mine to answer now"), and the withdrawal
of the open proposal when a person asks for the order to be read again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import QuerySet
from django.urls import reverse

from approvals.models import Proposal
from approvals.selectors import eligible_approvers, proposals_decidable_by, review_queue_for
from approvals.services import (
    proposal_record_authors,
    proposals_purge_changes,
    proposals_withdraw_open,
)
from cases import extensions
from cases.extensions import Viewer
from cases.models import Case


def deciders_of(case: Case) -> Sequence[AbstractBaseUser] | None:
    """The people who may decide the case's proposal awaiting review (never its preparer nor
    an author of its intent), or None when no proposal awaits review."""
    proposal = case.proposals.filter(status=Proposal.Status.AWAITING_REVIEW).first()
    if proposal is None:
        return None
    return eligible_approvers(proposal)


def decision_path(case: Case) -> str | None:
    """The decision page of the case's proposal awaiting review, or None."""
    proposal = case.proposals.filter(status=Proposal.Status.AWAITING_REVIEW).first()
    if proposal is None:
        return None
    return reverse("admin:approvals_proposal_change", args=[proposal.pk])


def decisions_of(user: Viewer) -> QuerySet[Any]:
    """The ids of the cases whose proposal ``user`` may decide now (four eyes)."""
    return proposals_decidable_by(user).values("case_id")


def _review_count(user: Viewer) -> int:
    return review_queue_for(user).count()


def _may_see_proposals(user: Viewer) -> bool:
    """The tile for who may open the queue it links to (an operator may not)."""
    has_perm = getattr(user, "has_perm", None)  # a person (AnonymousUser has one too)
    return bool(has_perm and has_perm("approvals.view_proposal"))


def _review_url() -> str:
    return reverse("admin:approvals_proposal_changelist") + "?status=awaiting_review"


def withdraw_before_new_evidence(case: Case, reason: str) -> None:
    """The open proposal rests on the evidence about to be replaced: withdraw it and revoke
    its approvals, in the caller's transaction (the case locked by the caller)."""
    proposals_withdraw_open(case, reason)


def withdraw_when_closed(case: Case, reason: str) -> None:
    """The case was cancelled or stopped: its open proposal is withdrawn and its approvals
    revoked, in the closing transaction (the case locked by the caller)."""
    proposals_withdraw_open(case, reason)


def record_joined_author(case: Case) -> None:
    """A person re-sent the case's request: they author its open proposal's intent from now on
    (recorded in the joining transaction, the case locked by the caller)."""
    proposal = case.proposals.filter(status__in=Proposal.OPEN).first()
    if proposal is not None:
        proposal_record_authors(case=case, proposal=proposal)


def register() -> None:
    extensions.register_queue(
        extensions.QueueSource("review", review_queue_for, case_lookup="case__")
    )
    extensions.register_tile(
        extensions.DashboardTile(
            "Proposals awaiting review",
            _review_count,
            _review_url,
            order=50,
            shown=_may_see_proposals,
        )
    )
    extensions.register_deciders(deciders_of)
    extensions.register_decision_path(decision_path)
    extensions.register_decisions(decisions_of)
    extensions.register_before_evidence_replaced(withdraw_before_new_evidence)
    extensions.register_on_closed_unapplied(withdraw_when_closed)
    extensions.register_on_request_joined(record_joined_author)
    extensions.register_on_payload_purged(proposals_purge_changes)
