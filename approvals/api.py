"""Approver API (CONTRACT §2): the queue, approve and reject. Views only call services."""

from __future__ import annotations

from django.db.models import Prefetch
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.status import HTTP_201_CREATED

from approvals import selectors, services
from approvals.models import Proposal, ProposalAuthor
from approvals.serializers import ApproveSerializer, ProposalSerializer, RejectSerializer
from cases.api import CaseViewSet
from cases.api_errors import error_responses
from cases.exceptions import CaseNotFound
from cases.paging import BoundedPageNumberPagination
from cases.serializers import PrepareProposalSerializer, case_response_schema
from cases.throttling import ThrottleRefusalsMixin


class ProposalViewSet(
    ThrottleRefusalsMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    serializer_class = ProposalSerializer
    # A page counts at most 1,000 proposals past it (``count_capped`` says when there are more).
    pagination_class = BoundedPageNumberPagination

    def get_queryset(self):
        # The authors in the order they became authors (``pk``), without the model's ordering
        # by proposal, which joins every proposal and case to sort a page's few authors.
        authors = ProposalAuthor.objects.select_related("user").order_by("pk")
        qs = selectors.proposals_for(self.request.user).prefetch_related(
            "approvals__decided_by", Prefetch("authors", queryset=authors)
        )
        status = self.request.query_params.get("status")
        if status is not None:
            if status not in Proposal.Status.values:
                raise ValidationError({"status": [f"Unknown status {status!r}."]})
            if status == Proposal.Status.AWAITING_REVIEW:
                qs = selectors.awaiting_review(qs)  # the approvers' queue
            else:
                qs = qs.filter(status=status)
        if self.action == "list":
            # A page of rows (the approve and reject actions read their proposal whole).
            qs = selectors.queue_rows(qs)
        case = self.request.query_params.get("case")
        if case is not None:
            # A case's proposals, by its reference (another team's reads as an unknown one: none).
            qs = qs.filter(case__reference=case.strip())
        return qs.order_by("submitted_at", "pk")

    def get_serializer(self, *args, **kwargs):
        """A proposal serializer for an instance or a page of them, with the selectors'
        answers for those rows (``decisions``) read once for the whole page: the caller's teams
        and the page's approvers in a constant number of queries, however many rows."""
        if args and "context" not in kwargs:
            rows = list(args[0]) if kwargs.get("many") else [args[0]]
            kwargs["context"] = {
                **self.get_serializer_context(),
                "decisions": selectors.decision_answers(rows, self.request.user),
            }
        return super().get_serializer(*args, **kwargs)

    def get_object(self):
        try:
            return self.get_queryset().get(pk=self.kwargs["pk"])
        except (Proposal.DoesNotExist, ValueError):
            raise CaseNotFound("No such proposal among your teams' cases.") from None

    @extend_schema(
        parameters=[
            OpenApiParameter("status", enum=Proposal.Status.values),
            OpenApiParameter(
                "case", description="A case's reference (e.g. D-41): that case's proposals only."
            ),
        ],
        responses={200: ProposalSerializer(many=True), **error_responses(400, 404)},
        summary="List proposals (the approver's queue)",
        description="The proposals of the caller's teams' cases, oldest submission first; "
        "`?status=awaiting_review` is the approver's queue, `?case=D-41` one case's proposals. "
        "Each says whether the caller may "
        "decide it (`may_decide`, `why_not`).",
    )
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(
        responses={200: ProposalSerializer, **error_responses(404)},
        summary="Read one proposal",
        description="One exact proposal: the whole change, its content hash, the evidence it "
        "rests on, its authors (who may not approve it) and its approvals.",
    )
    def retrieve(self, request, *args, **kwargs):
        return super().retrieve(request, *args, **kwargs)

    @extend_schema(
        request=ApproveSerializer,
        responses={200: ProposalSerializer, **error_responses(400, 403, 404, 409, 415)},
        summary="Approve a proposal",
        description="Approve this exact proposal (until expires_at, bounded by the deployment). "
        "Its authors are refused with 403 own_proposal (with roles); a proposal no longer "
        "awaiting review is 409 proposal_not_current (with proposal_status).",
    )
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        proposal = self.get_object()
        serializer = ApproveSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.proposal_approve(
            proposal=proposal, actor=request.user, **serializer.validated_data
        )
        return Response(self.get_serializer(self.get_object()).data)

    @extend_schema(
        request=RejectSerializer,
        responses={200: ProposalSerializer, **error_responses(400, 403, 404, 409, 415)},
        summary="Reject a proposal",
        description="Reject this exact proposal, with a reason; the case then waits for a "
        "person to prepare another. The same refusals as approving.",
    )
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        proposal = self.get_object()
        serializer = RejectSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.proposal_reject(
            proposal=proposal, actor=request.user, reason=serializer.validated_data["reason"]
        )
        return Response(self.get_serializer(self.get_object()).data)


# The kernel's case API with approvals' action on a case added:
# ``POST /api/cases/{reference}/proposals/`` (``config.urls`` routes ``cases`` to this class).
# The case is found the kernel's way (team-scoped, 404 otherwise) and answered with the kernel's
# case detail; the rule is ``approvals.services.proposal_prepare_by_hand``'s. (A comment, not a
# docstring: drf-spectacular would publish a docstring as every case operation's description.)
class CaseWithProposalsViewSet(CaseViewSet):
    @extend_schema(
        request=PrepareProposalSerializer,
        responses={201: case_response_schema(), **error_responses(400, 403, 404, 409, 415)},
        summary="Prepare a proposal by hand",
        description="Prepare and submit a proposal by hand (e.g. a change the customer "
        "confirmed): the whole change, of the case's kind. A different change supersedes the "
        "current proposal and approval.",
    )
    @action(detail=True, methods=["post"])
    def proposals(self, request, reference=None):
        case = self.get_object()
        serializer = PrepareProposalSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        proposal = services.proposal_prepare_by_hand(
            case=case,
            actor=request.user,
            change=data["change"],
            reason=data["reason"],
            expected_version=data["expected_version"],
        )
        return self._detail(proposal.case, HTTP_201_CREATED)
