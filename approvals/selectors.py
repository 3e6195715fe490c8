"""Read-side queries for proposals and approvals, scoped to the caller's teams."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db.models import Q, QuerySet

from approvals.models import Approval, Operation, Proposal
from cases.models import EvidenceReference
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


def eligible_approvers(proposal: Proposal) -> list:
    """The people who may decide ``proposal``: active members of its case's team who hold the
    approve permission (directly, through a group, or as a superuser member), never its
    preparer. The same rule as ``cases.services.actor_may``, in one query.
    """
    approve = Permission.objects.filter(
        content_type__app_label="approvals", codename="approve_proposal"
    )
    people = (
        get_user_model()
        .objects.filter(holdfast_teams__cases=proposal.case_id, is_active=True)
        .filter(
            Q(is_superuser=True)
            | Q(user_permissions__in=approve)
            | Q(groups__permissions__in=approve)
        )
        .distinct()
        .order_by("username")
    )
    if proposal.prepared_by_id is not None:
        people = people.exclude(pk=proposal.prepared_by_id)
    return list(people)


def evidence_of(proposal: Proposal) -> list[EvidenceReference]:
    """The evidence references the proposal rests on, newest first."""
    return list(
        EvidenceReference.objects.filter(case=proposal.case_id, pk__in=proposal.evidence_ids)
    )
