"""Read-side queries for proposals and approvals, scoped to the caller's teams."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db.models import Q, QuerySet

from approvals.models import Approval, Operation, Proposal, ProposalAuthor
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


def author_roles_of(proposal: Proposal, user) -> list[str]:
    """The roles in which ``user`` authored ``proposal``'s intent (``ProposalAuthor.Role``
    order); empty if they did not. Uses prefetched ``authors`` when present."""
    if getattr(user, "pk", None) is None:
        return []
    roles = {author.role for author in proposal.authors.all() if author.user_id == user.pk}
    if proposal.prepared_by_id == user.pk:
        roles.add(ProposalAuthor.Role.PREPARED)
    return [role for role in ProposalAuthor.Role.values if role in roles]


# Keyed by the role's stored value (a ``Role`` member equals its string).
_AUTHOR_PHRASES: dict[str, str] = {
    ProposalAuthor.Role.OPENED_CASE: "opened {case}",
    ProposalAuthor.Role.CHANGED_INTENT: "changed the requested date of {case}",
    ProposalAuthor.Role.PREPARED: "prepared {proposal}",
    ProposalAuthor.Role.ASKED_REPREPARE: "asked for {case} to be checked and prepared again",
}


def own_proposal_reason(roles: list[str], *, case_label: str, proposal_label: str) -> str:
    """'You opened this case and prepared this proposal': why an author may not decide."""
    phrases = [
        _AUTHOR_PHRASES[role].format(case=case_label, proposal=proposal_label) for role in roles
    ]
    if len(phrases) > 1:
        phrases = [", ".join(phrases[:-1]), phrases[-1]]
    return "You " + " and ".join(phrases)


def why_cannot_decide(proposal: Proposal, user) -> str:
    """Plain words for why ``user`` gets no Approve/Reject buttons, or '' if they may decide."""
    from cases.kernel import actor_may

    if proposal.status != Proposal.Status.AWAITING_REVIEW:
        return f"This proposal is {proposal.get_status_display().lower()}; nothing to decide."
    roles = author_roles_of(proposal, user)
    if roles:
        reason = own_proposal_reason(roles, case_label="this case", proposal_label="this proposal")
        return f"{reason}; another approver of the team must decide it."
    if not actor_may(user, "approvals.approve_proposal", proposal.case):
        return "Only the team's approvers decide proposals."
    return ""


def eligible_approvers(proposal: Proposal) -> list:
    """The people who may decide ``proposal``: active members of its case's team who hold the
    approve permission (directly, through a group, or as a superuser member), never one of its
    authors (``ProposalAuthor``) or its preparer. The same rule as ``cases.kernel.actor_may``
    and ``approvals.services._decidable``, in one query.
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
    people = people.exclude(
        pk__in=ProposalAuthor.objects.filter(proposal=proposal.pk).values("user_id")
    )
    if proposal.prepared_by_id is not None:
        people = people.exclude(pk=proposal.prepared_by_id)
    return list(people)


def authors_of(proposal: Proposal) -> list[ProposalAuthor]:
    """Who authored the proposal's intent, in the order they became authors."""
    return sorted(proposal.authors.all(), key=lambda author: author.pk)


def evidence_of(proposal: Proposal) -> list[EvidenceReference]:
    """The evidence references the proposal rests on, newest first."""
    return list(
        EvidenceReference.objects.filter(case=proposal.case_id, pk__in=proposal.evidence_ids)
    )
