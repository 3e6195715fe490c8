from __future__ import annotations

from rest_framework import serializers

from approvals.models import Approval, Proposal
from approvals.selectors import why_cannot_decide
from approvals.services import approval_expiry_bounds


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


class ProposalSerializer(serializers.ModelSerializer):
    case = serializers.CharField(source="case.reference")
    change = serializers.DictField(read_only=True)
    operation_key = serializers.CharField(source="operation.key", default=None)
    prepared_by = serializers.CharField(source="prepared_by_label")
    approvals = ApprovalSerializer(many=True, read_only=True)
    would_expire_at = serializers.SerializerMethodField()
    can_decide = serializers.SerializerMethodField()
    why_not = serializers.SerializerMethodField()

    class Meta:
        model = Proposal
        fields = [
            "id",
            "case",
            "order_id",
            "change",
            "evidence_order_version",
            "evidence_ids",
            "slot_note",
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
            "why_not",
            "approvals",
        ]

    def get_would_expire_at(self, proposal) -> str:
        return approval_expiry_bounds()[0].replace(microsecond=0).isoformat()

    def get_can_decide(self, proposal) -> bool:
        return not why_cannot_decide(proposal, self.context["request"].user)

    def get_why_not(self, proposal) -> str:
        return why_cannot_decide(proposal, self.context["request"].user)


class ApproveSerializer(serializers.Serializer):
    expires_at = serializers.DateTimeField(required=False)
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class RejectSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000)
