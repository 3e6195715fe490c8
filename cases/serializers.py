"""Input validation and output shapes for the cases API. No business rules live here."""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from rest_framework import serializers

from cases import validation
from cases.models import Attempt, Case, CaseEvent, EvidenceReference
from cases.next_action import describe_next_action
from cases.services import MANUAL_TRANSITIONS


def _username(user: AbstractBaseUser | None) -> str | None:
    return user.get_username() if user is not None else None


def _key(max_length: int, **kwargs) -> serializers.CharField:
    """A key field: printable characters only (``cases.validation``)."""
    return serializers.CharField(
        max_length=max_length, validators=[validation.KeyValidator(max_length)], **kwargs
    )


def _text(max_length: int, **kwargs) -> serializers.CharField:
    """A free-text field with its length bound and no control characters."""
    return serializers.CharField(
        max_length=max_length, validators=[validation.TextValidator(max_length)], **kwargs
    )


def _delivery_date(**kwargs) -> serializers.DateField:
    return serializers.DateField(validators=[validation.validate_delivery_date], **kwargs)


class CaseIntakeSerializer(serializers.Serializer):
    account = _key(
        validation.ACCOUNT_REFERENCE_MAX_LENGTH, help_text="The account reference, e.g. ACC-100"
    )
    request_key = _key(validation.REQUEST_KEY_MAX_LENGTH)
    order_id = _key(validation.ORDER_ID_MAX_LENGTH)
    requested_date = _delivery_date(
        help_text="Today or later, within the delivery horizon (DELIVERY_DATE_HORIZON_DAYS)."
    )
    note = _text(validation.NOTE_MAX_LENGTH, required=False, allow_blank=True, default="")

    def validate_account(self, value: str):
        accounts = self.context["accounts"]
        try:
            return accounts.get(reference=value)
        except accounts.model.DoesNotExist:
            raise serializers.ValidationError(f"Unknown account {value!r}.") from None


class TransitionRequestSerializer(serializers.Serializer):
    transition = serializers.ChoiceField(choices=[(t, t) for t in MANUAL_TRANSITIONS])
    expected_version = serializers.IntegerField(min_value=1)
    reason = _text(validation.REASON_MAX_LENGTH)


class PrepareProposalSerializer(serializers.Serializer):
    delivery_date = _delivery_date()
    expected_version = serializers.IntegerField(min_value=1)
    reason = _text(validation.SHORT_REASON_MAX_LENGTH, required=False, default="")


class CancelRequestSerializer(serializers.Serializer):
    reason = _text(validation.REASON_MAX_LENGTH)


class CaseEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_label")

    class Meta:
        model = CaseEvent
        fields = [
            "id",
            "action",
            "from_status",
            "to_status",
            "reason",
            "actor",
            "version",
            "detail",
            "created_at",
        ]


class EvidenceReferenceSerializer(serializers.ModelSerializer):
    class Meta:
        model = EvidenceReference
        fields = [
            "id",
            "source_system",
            "external_reference",
            "kind",
            "permitted_basis",
            "captured_at",
            "summary",
            "order_version",
            "recorded_by",
        ]


class AttemptSerializer(serializers.ModelSerializer):
    operation_key = serializers.CharField(source="operation.key")

    class Meta:
        model = Attempt
        fields = [
            "reference",
            "operation_key",
            "worker",
            "fencing_token",
            "claimed_at",
            "lease_expires_at",
            "heartbeat_at",
            "state",
            "last_confirmed_step",
            "submitted_at",
            "last_error",
            "cancel_requested_at",
            "finished_at",
        ]


class OperationSerializer(serializers.Serializer):
    key = serializers.CharField()
    order_id = serializers.CharField()
    change = serializers.DictField()
    created_at = serializers.DateTimeField()
    confirmed_at = serializers.DateTimeField(allow_null=True)
    result_order_version = serializers.IntegerField(allow_null=True)
    notified_at = serializers.DateTimeField(allow_null=True)
    retired_at = serializers.DateTimeField(allow_null=True)


class CancellationSerializer(serializers.Serializer):
    requested_at = serializers.DateTimeField()
    requested_by = serializers.CharField(source="requested_by_label")
    via = serializers.CharField()
    reason = serializers.CharField()
    outcome = serializers.CharField()
    settled_at = serializers.DateTimeField(allow_null=True)


class CaseListSerializer(serializers.ModelSerializer):
    account = serializers.CharField(source="account.reference")
    team = serializers.CharField(source="team.name")
    owner = serializers.SerializerMethodField()
    backup = serializers.SerializerMethodField()
    responsible_now = serializers.SerializerMethodField()
    overdue = serializers.BooleanField(source="is_overdue")
    follow_up_state = serializers.SerializerMethodField()

    class Meta:
        model = Case
        fields = [
            "reference",
            "account",
            "request_key",
            "order_id",
            "requested_date",
            "status",
            "version",
            "team",
            "owner",
            "backup",
            "responsible_now",
            "waiting_on",
            "waiting_reason",
            "next_check_at",
            "follow_up_reason",
            "follow_up_at",
            "follow_up_state",
            "overdue",
            "created_at",
            "updated_at",
        ]

    def get_owner(self, case: Case) -> str:
        return case.owner.get_username()

    def get_follow_up_state(self, case: Case) -> str:
        """``on_time``, ``at_risk`` or ``overdue`` while the case waits on a person; ''
        otherwise."""
        return str(case.follow_up_state().value)

    def get_backup(self, case: Case) -> str | None:
        return _username(case.backup)

    def get_responsible_now(self, case: Case) -> str:
        return case.responsible_now.get_username()


class CaseDetailSerializer(CaseListSerializer):
    next_action = serializers.SerializerMethodField()
    allowed_transitions = serializers.SerializerMethodField()
    events = CaseEventSerializer(many=True, read_only=True)
    evidence = EvidenceReferenceSerializer(many=True, read_only=True)
    operations = OperationSerializer(many=True, read_only=True)
    attempts = AttemptSerializer(many=True, read_only=True)
    cancellations = CancellationSerializer(many=True, read_only=True)

    class Meta(CaseListSerializer.Meta):
        fields = [
            *CaseListSerializer.Meta.fields,
            "note",
            "outstanding_question",
            "last_checked_order_version",
            "last_error",
            "closed_at",
            "retention_until",
            "next_action",
            "allowed_transitions",
            "revoked_at",
            "revocation_kind",
            "operations",
            "attempts",
            "cancellations",
            "evidence",
            "events",
        ]

    def get_next_action(self, case) -> str:
        return describe_next_action(case).text

    def get_allowed_transitions(self, case) -> list[str]:
        from cases.actions import allowed_transitions

        return allowed_transitions(case, self.context["request"].user)
