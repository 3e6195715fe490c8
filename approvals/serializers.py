from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from approvals.models import Approval, Proposal, ProposalAuthor
from approvals.selectors import DecisionAnswer, decision_answers
from approvals.services import approval_expiry_bounds
from cases import kinds
from cases.serializers import ClosedBodySerializer, text_field
from cases.validation import REASON_MAX_LENGTH


class ApprovalSerializer(serializers.ModelSerializer):
    decided_by = serializers.CharField(source="decided_by.username")
    proposal = serializers.IntegerField(source="proposal_id")

    class Meta:
        model = Approval
        fields = [
            "reference",
            "proposal",
            "proposal_hash",
            "decision",
            "decided_by",
            "reason",
            "decided_at",
            "expires_at",
            "revoked_at",
            "revoked_reason",
        ]


class ProposalAuthorSerializer(serializers.ModelSerializer):
    """A person who authored the proposal's intent: they may not approve it."""

    username = serializers.CharField(source="user.username")

    class Meta:
        model = ProposalAuthor
        fields = ["username", "role"]


class ProposalSerializer(serializers.ModelSerializer):
    case = serializers.CharField(source="case.reference")
    change = serializers.DictField(read_only=True, help_text="The exact change, whole.")
    description = serializers.CharField(
        read_only=True, help_text="The exact change in plain words."
    )
    irreversible = serializers.SerializerMethodField()
    operation_key = serializers.CharField(source="operation.key", default=None)
    prepared_by = serializers.CharField(source="prepared_by_label")
    approvals = ApprovalSerializer(many=True, read_only=True)
    would_expire_at = serializers.SerializerMethodField()
    can_decide = serializers.SerializerMethodField()
    may_decide = serializers.SerializerMethodField()
    why_not = serializers.SerializerMethodField()
    authors = ProposalAuthorSerializer(many=True, read_only=True)
    deciders = serializers.SerializerMethodField()

    class Meta:
        model = Proposal
        fields = [
            "id",
            "case",
            "order_id",
            "change",
            "description",
            "irreversible",
            "evidence_order_version",
            "evidence_ids",
            "advisory_note",
            "content_hash",
            "operation_key",
            "prepared_by",
            "status",
            "status_reason",
            "created_at",
            "submitted_at",
            "closed_at",
            "would_expire_at",
            "can_decide",
            "may_decide",
            "why_not",
            "authors",
            "deciders",
            "approvals",
        ]

    def get_irreversible(self, proposal) -> bool:
        """Whether the change cannot be undone once applied (its kind has no reversal)."""
        kind = kinds.find(proposal.change.get("kind"))
        return kind is not None and kind.irreversible

    def get_would_expire_at(self, proposal) -> str:
        # Written as DRF writes every other time of the answer ("…Z", not "…+00:00").
        expiry = approval_expiry_bounds()[0].replace(microsecond=0)
        return serializers.DateTimeField().to_representation(expiry)

    def _answer(self, proposal: Proposal) -> DecisionAnswer:
        """The selectors' answer for this row: the view passes a page's answers in the context
        (``decisions``, from ``approvals.selectors.decision_answers``); a serializer used
        without them asks the selector for this one proposal. Nothing is decided here."""
        answers = self.context.get("decisions") or {}
        if proposal.pk not in answers:
            answers = decision_answers([proposal], self.context["request"].user)
        return answers[proposal.pk]

    def get_can_decide(self, proposal) -> bool:
        return self._answer(proposal).can_decide

    def get_may_decide(self, proposal) -> bool:
        """Whether the caller may approve or reject this proposal now (``can_decide``)."""
        return self._answer(proposal).can_decide

    def get_why_not(self, proposal) -> str:
        return self._answer(proposal).why_not

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_deciders(self, proposal) -> list[str]:
        """Usernames of the people who may decide it while it awaits review (never an author)."""
        return self._answer(proposal).deciders


class ApproveSerializer(ClosedBodySerializer):
    expires_at = serializers.DateTimeField(required=False)
    reason = text_field(REASON_MAX_LENGTH, required=False, allow_blank=True, default="")


class RejectSerializer(ClosedBodySerializer):
    reason = text_field(REASON_MAX_LENGTH)
