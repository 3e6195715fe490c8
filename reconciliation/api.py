"""``GET /api/kinds/`` (CONTRACT §2): the change kinds this desk offers and what the probe
proved for each. Read only; it calls the registry and one selector."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.response import Response

from cases import kinds
from cases.api_errors import error_responses
from cases.throttling import ThrottleRefusalsMixin
from reconciliation.models import Autonomy
from reconciliation.selectors import kinds_autonomy


class ChangeKindSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="The change's kind: its ``kind``.")
    # The response member ``label``: DRF's metaclass takes declared fields out of the class, so
    # this never replaces ``Field.label`` (the stubs see only the class attribute).
    label = serializers.CharField()  # type: ignore[assignment]
    key_prefix = serializers.CharField(help_text="Its operation keys: {key_prefix}-41-1.")
    irreversible = serializers.BooleanField(
        help_text="No reversal exists: once applied it cannot be undone."
    )
    change_schema = serializers.DictField(help_text="The JSON schema of its change.")
    autonomy = serializers.ChoiceField(
        choices=Autonomy.choices,
        help_text="What the capability probe proved for this kind against the configured order "
        "system: a kind it does not list, or whose probe failed, is review_only.",
    )
    autonomy_reason = serializers.CharField()


class ChangeKindViewSet(ThrottleRefusalsMixin, viewsets.ViewSet):
    """The change kinds (one list, no pages: a handful)."""

    @extend_schema(
        responses={200: ChangeKindSerializer(many=True), **error_responses()},
        summary="List the change kinds",
        description="The change kinds this deployment offers (one list, no pages): each one's "
        "code, label, operation key prefix, the JSON schema of its change, and the autonomy "
        "the order system's capability probe proved for it.",
    )
    def list(self, request):
        statuses = {status.kind: status for status in kinds_autonomy()}
        rows = [
            {
                "code": kind.code,
                "label": kind.label,
                "key_prefix": kind.key_prefix,
                "irreversible": kind.irreversible,
                "change_schema": kind.json_schema(),
                "autonomy": statuses[kind.code].autonomy.value,
                "autonomy_reason": statuses[kind.code].reason,
            }
            for kind in kinds.kinds()
        ]
        return Response(ChangeKindSerializer(rows, many=True).data)
