"""Read-side queries for proposals and approvals, scoped to the caller's teams."""

from __future__ import annotations

from django.db.models import QuerySet

from approvals.models import Approval, Operation, Proposal
from cases.selectors import cases_for


def proposals_for(user) -> QuerySet[Proposal]:
    return Proposal.objects.filter(case__in=cases_for(user).values("pk")).select_related(
        "case", "operation", "prepared_by"
    )


def review_queue_for(user) -> QuerySet[Proposal]:
    """Proposals awaiting a decision in the user's teams, oldest first."""
    return (
        proposals_for(user)
        .filter(status=Proposal.Status.AWAITING_REVIEW)
        .order_by("submitted_at", "pk")
    )


def approvals_for(user) -> QuerySet[Approval]:
    return Approval.objects.filter(proposal__case__in=cases_for(user).values("pk"))


def operations_for(user) -> QuerySet[Operation]:
    return Operation.objects.filter(case__in=cases_for(user).values("pk"))


def why_cannot_decide(proposal: Proposal, user) -> str:
    """Plain words for why ``user`` gets no Approve/Reject buttons, or '' if they may decide."""
    from cases.services import actor_may

    if proposal.status != Proposal.Status.AWAITING_REVIEW:
        return f"This proposal is {proposal.get_status_display().lower()}; nothing to decide."
    if proposal.prepared_by_id is not None and proposal.prepared_by_id == user.pk:
        return "You prepared this proposal; another approver of the team must decide it."
    if not actor_may(user, "approvals.approve_proposal", proposal.case):
        return "Only the team's approvers decide proposals."
    return ""
