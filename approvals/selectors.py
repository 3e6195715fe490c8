"""Read-side queries for proposals and approvals, scoped to the caller's teams."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from django.contrib.auth.models import Permission, User
from django.db.models import Q, QuerySet

from approvals.models import Approval, Operation, Proposal, ProposalAuthor
from cases.kernel import actor_may, actor_team_ids
from cases.models import EvidenceReference, Team
from cases.models import Status as CaseStatus
from cases.selectors import scoped_to_teams


def proposals_for(user) -> QuerySet[Proposal]:
    """Proposals of the user's teams' cases (``cases.selectors.scoped_to_teams``: the teams
    named, so a queue page counts with no subquery over cases), with what each row shows."""
    return scoped_to_teams(Proposal.objects.all(), user, case="case").select_related(
        "case__team", "operation", "prepared_by"
    )


def queue_rows(proposals: QuerySet[Proposal]) -> QuerySet[Proposal]:
    """``proposals`` read as a page of the queue shows them: each proposal whole, and only what
    its row says of the rest: its case's reference, status and team (the decision rules read
    them: :func:`not_up_for_decision`, :func:`decision_answers`) and its operation's key. A case
    row is 37 columns, its JSON included: loading them whole was 10 of the 24 ms that reading
    the API queue's page of 50 took at 1M cases. Nothing else of a row is read after this: a
    page of proposals runs as many queries as before (``tests/approvals/test_queue_queries``).
    """
    own = [field.name for field in Proposal._meta.concrete_fields]
    return (
        proposals.select_related(None)
        .select_related("case", "operation")
        .only(*own, "case__reference", "case__status", "case__team", "operation__key")
    )


def awaits_decision(proposal: Proposal, case_status: str | None = None) -> bool:
    """Whether ``proposal`` is up for a decision now: awaiting review, on a case that awaits
    review (``case_status``, the locked case's, or the proposal's case as read). The one rule of
    the queue (:func:`awaiting_review`), the decision page and the service (``_decidable``)."""
    status = proposal.case.status if case_status is None else case_status
    return (
        proposal.status == Proposal.Status.AWAITING_REVIEW and status == CaseStatus.AWAITING_REVIEW
    )


def not_up_for_decision(proposal: Proposal, case_status: str | None = None) -> str:
    """Why ``proposal`` is not up for a decision now, in plain words; '' when it is."""
    if proposal.status != Proposal.Status.AWAITING_REVIEW:
        return f"This proposal is {proposal.get_status_display().lower()}; nothing to decide."
    if awaits_decision(proposal, case_status):
        return ""
    case = proposal.case
    label = CaseStatus(case.status if case_status is None else case_status).label
    return (
        f"Its case {case.reference} is at “{label}”, not awaiting review: nothing to "
        "decide until the case awaits review again."
    )


def awaiting_review(proposals: QuerySet[Proposal]) -> QuerySet[Proposal]:
    """The ``proposals`` that await a decision: awaiting review, on a case that awaits review.
    A case cancelled or stopped withdraws its proposal with it; rows written before that rule
    may hold one still "awaiting review" on a closed case, which is nobody's decision. The
    approvers' queue (the admin's, the API's, the home tile's count) is this, one rule."""
    return proposals.filter(
        status=Proposal.Status.AWAITING_REVIEW, case__status=CaseStatus.AWAITING_REVIEW
    )


def review_queue_for(user) -> QuerySet[Proposal]:
    """Proposals awaiting a decision in the user's teams, oldest first."""
    return awaiting_review(proposals_for(user)).order_by("submitted_at", "pk")


def proposals_decidable_by(user) -> QuerySet[Proposal]:
    """The proposals awaiting review that ``user`` may decide now: the service's own rule
    (``services._decidable``: an active person with the approve permission in the case's team,
    a superuser anywhere, never an author of the intent nor the preparer), as one query. The
    same people :func:`eligible_approvers` lists for each proposal (a test checks both ways)."""
    if user is None or not user.is_authenticated or not user.is_active:
        return Proposal.objects.none()
    if not (user.is_superuser or user.has_perm("approvals.approve_proposal")):
        return Proposal.objects.none()
    return review_queue_for(user).exclude(authors__user=user).exclude(prepared_by=user)


def approvals_for(user) -> QuerySet[Approval]:
    return scoped_to_teams(Approval.objects.all(), user, case="proposal__case")


def operations_for(user) -> QuerySet[Operation]:
    return scoped_to_teams(Operation.objects.all(), user, case="case")


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
    ProposalAuthor.Role.JOINED_REQUEST: "sent the request of {case} again (you asked for it too)",
    ProposalAuthor.Role.CHANGED_INTENT: "changed the change {case} asks for",
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


def why_cannot_decide(proposal: Proposal, user, *, team_ids: Collection[int] | None = None) -> str:
    """Plain words for why ``user`` gets no Approve/Reject buttons, or '' if they may decide.

    ``team_ids`` (``cases.kernel.actor_team_ids``) spares a page of rows one membership query
    per row; the answer is the same (``cases.kernel.actor_may``).
    """
    not_up = not_up_for_decision(proposal)
    if not_up:
        return not_up
    # The role first: someone who may decide nothing is told so, not that they authored it.
    if not actor_may(user, "approvals.approve_proposal", proposal.case, team_ids=team_ids):
        return "Only the team's approvers decide proposals."
    roles = author_roles_of(proposal, user)
    if roles:
        reason = own_proposal_reason(roles, case_label="this case", proposal_label="this proposal")
        return f"{reason}; another approver of the team must decide it."
    return ""


def _approvers() -> QuerySet[User]:
    """Active people who hold the approve permission (directly, through a group, or as a
    superuser); which team's, and which proposal's authors, the callers narrow."""
    approve = Permission.objects.filter(
        content_type__app_label="approvals", codename="approve_proposal"
    )
    return User.objects.filter(is_active=True).filter(
        Q(is_superuser=True) | Q(user_permissions__in=approve) | Q(groups__permissions__in=approve)
    )


def _not_an_author(person: User, proposal: Proposal) -> bool:
    """Four eyes: nobody who authored the proposal's intent or prepared it (prefetched
    ``authors`` are used when present)."""
    if person.pk == proposal.prepared_by_id:
        return False
    return all(author.user_id != person.pk for author in proposal.authors.all())


def eligible_approvers(proposal: Proposal) -> list:
    """The people who may decide ``proposal``: active members of its case's team who hold the
    approve permission (directly, through a group, or as a superuser member), never one of its
    authors (``ProposalAuthor``) or its preparer. The same rule as ``cases.kernel.actor_may``
    and ``approvals.services._decidable``, in one query.
    """
    people = (
        _approvers()
        .filter(holdfast_teams__cases=proposal.case_id)
        .distinct()
        .select_related("staff_profile")  # who is away, said beside each name
        .order_by("username")
    )
    people = people.exclude(
        pk__in=ProposalAuthor.objects.filter(proposal=proposal.pk).values("user_id")
    )
    if proposal.prepared_by_id is not None:
        people = people.exclude(pk=proposal.prepared_by_id)
    return list(people)


@dataclass(frozen=True)
class DecisionAnswer:
    """What a queue row says about deciding a proposal, for one caller: ``why_not`` (''
    when they may decide, :func:`why_cannot_decide`) and ``deciders``' usernames (who may
    decide it while it awaits review, :func:`eligible_approvers`; empty otherwise)."""

    why_not: str
    deciders: list[str]

    @property
    def can_decide(self) -> bool:
        return not self.why_not


def decision_answers(proposals: Iterable[Proposal], user) -> dict[int, DecisionAnswer]:
    """:class:`DecisionAnswer` per proposal pk, for a page of proposals, in a constant number
    of queries: the caller's teams once, the approvers of the page's teams once, and the
    proposals' ``authors`` (prefetch them, with ``case`` selected, to read nothing per row).

    The rules are :func:`why_cannot_decide` and :func:`eligible_approvers`' own: the same
    approvers (``_approvers``: active, approve permission, member of the case's team), never
    an author or the preparer.
    """
    rows = list(proposals)
    team_ids = actor_team_ids(user) if getattr(user, "is_authenticated", False) else None
    awaiting = [p for p in rows if awaits_decision(p)]
    by_team: dict[int, list[User]] = {}
    if awaiting:
        members = (
            Team.members.through.objects.filter(
                team_id__in={p.case.team_id for p in awaiting},
                user__in=_approvers().values("pk"),
            )
            .select_related("user")
            .order_by("user__username")
        )
        for membership in members:
            by_team.setdefault(membership.team_id, []).append(membership.user)
    return {
        proposal.pk: DecisionAnswer(
            why_not=why_cannot_decide(proposal, user, team_ids=team_ids),
            deciders=[
                person.get_username()
                for person in by_team.get(proposal.case.team_id, [])
                if _not_an_author(person, proposal)
            ]
            if awaits_decision(proposal)
            else [],
        )
        for proposal in rows
    }


def authors_of(proposal: Proposal) -> list[ProposalAuthor]:
    """Who authored the proposal's intent, in the order they became authors."""
    return sorted(proposal.authors.all(), key=lambda author: author.pk)


def evidence_of(proposal: Proposal) -> list[EvidenceReference]:
    """The evidence references the proposal rests on, newest first."""
    return list(
        EvidenceReference.objects.filter(case=proposal.case_id, pk__in=proposal.evidence_ids)
    )
