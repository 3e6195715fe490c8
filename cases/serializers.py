"""Input validation and output shapes for the cases API. No business rules live here."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from drf_spectacular.utils import (
    PolymorphicProxySerializer,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import serializers

from cases import held, kinds, validation
from cases.models import Attempt, Case, CaseEvent, EvidenceReference, WaitingOn
from cases.next_action import describe_next_action
from cases.services import MANUAL_TRANSITIONS


def _username(user: AbstractBaseUser | None) -> str | None:
    return user.get_username() if user is not None else None


class StrictCharField(serializers.CharField):
    """A string field that takes strings only: DRF's ``CharField`` would turn a number into
    text, accepting a body the schema (``type: string``) says is wrong. When one of
    ``cases.validation``'s validators bounds the length in its own words, DRF's bound stays
    only for the schema (``maxLength``): a long value gets one message, not two."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.validators = validation.one_length_message(self.validators)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A whole number sent as a JSON number: DRF's ``IntegerField`` also takes ``"3"`` and
    ``3.0``, which the schema (``type: integer``) refuses."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


def _key(max_length: int, **kwargs) -> serializers.CharField:
    """A key field: printable characters only (``cases.validation``)."""
    return StrictCharField(
        max_length=max_length, validators=[validation.KeyValidator(max_length)], **kwargs
    )


def identifier_field(**kwargs) -> serializers.CharField:
    """An order id or a request key: ``validation.IDENTIFIER_PATTERN``, stated in the schema."""
    return StrictCharField(
        max_length=validation.IDENTIFIER_MAX_LENGTH,
        validators=[validation.IdentifierValidator()],
        help_text=f"{kwargs.pop('help_text', '')} {validation.IDENTIFIER_RULE}.".strip(),
        **kwargs,
    )


def text_field(max_length: int, **kwargs) -> serializers.CharField:
    """A free-text field with its length bound and no control characters; the schema states
    the same rule as a pattern (a required one must hold more than white space)."""
    required = not kwargs.get("allow_blank", False)
    return StrictCharField(
        max_length=max_length,
        validators=[validation.TextValidator(max_length, required=required)],
        **kwargs,
    )


_text = text_field


class ClosedBodySerializer(serializers.Serializer):
    """A request body that takes its own fields and no other: a field it does not take is
    refused by name with the other errors (a misspelt ``expires_at`` or ``note``, or a
    ``status``, would otherwise be dropped without a word, and the request done as if it had
    not been sent). The published schema says ``additionalProperties: false`` for each
    (``config.schema_bodies``)."""

    unknown_field_message = "Unknown field: this request does not take it."

    def to_internal_value(self, data: Any) -> Any:
        unknown = sorted(set(data) - set(self.fields)) if isinstance(data, Mapping) else []
        refused = {name: [self.unknown_field_message] for name in unknown}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if refused and isinstance(exc.detail, dict):
                exc.detail.update(refused)
            raise
        if refused:
            raise serializers.ValidationError(refused)
        return value


class CaseIntakeBaseSerializer(ClosedBodySerializer):
    """What every intake names besides its change."""

    unknown_field_message = "Unknown field: this intake does not take it."

    account = _key(
        validation.ACCOUNT_REFERENCE_MAX_LENGTH, help_text="The account reference, e.g. ACC-100"
    )
    request_key = identifier_field(
        help_text="Your key for this request: the same account and key again is the same case."
    )
    order_id = identifier_field(help_text="The order to change, e.g. ORD-7731.")
    note = _text(validation.NOTE_MAX_LENGTH, required=False, allow_blank=True, default="")

    def validate_account(self, value: str):
        accounts = self.context["accounts"]
        try:
            return accounts.get(reference=value)
        except accounts.model.DoesNotExist:
            raise serializers.ValidationError(f"Unknown account {value!r}.") from None


class CaseIntakeSerializer(CaseIntakeBaseSerializer):
    """An intake of any kind: the change's own fields are its kind's to check
    (``cases.kinds.validate``, in ``services.case_open``)."""

    kind = serializers.ChoiceField(choices=[], help_text="The change kind (GET /api/kinds/).")
    change = serializers.JSONField(help_text="The change, in its kind's shape.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        kind_field = self.fields["kind"]
        assert isinstance(kind_field, serializers.ChoiceField)  # noqa: S101 - declared above
        kind_field.choices = kinds.choices()

    def validate_change(self, value: object) -> dict:
        if not isinstance(value, dict):
            raise serializers.ValidationError("Must be an object.")
        return value


def _lazy(build: Callable[[], Any]) -> Any:
    """A proxy's serializers, built when the schema is generated (the registry is filled by
    then); typed loosely: drf-spectacular's stubs want one exact container type."""
    return build


def _kind_field(kind: kinds.ChangeKind, **kwargs) -> serializers.Field:
    """``kind`` naming this one kind in an answer's schema (the discriminator's value), as a
    pattern: the request's one-value enum is the kind's named enum, and an enum in a second
    component would give it a second name."""
    field_class = type(f"{_camel(kind.code)}KindField", (serializers.CharField,), {})
    schema = {"type": "string", "pattern": f"^{re.escape(kind.code)}$", "description": kind.label}
    return extend_schema_field(schema)(field_class)(**kwargs)


def _camel(code: str) -> str:
    return "".join(part.title() for part in code.split("_"))


@functools.cache
def intake_serializer_for(kind: kinds.ChangeKind) -> type[serializers.Serializer]:
    """The intake of one kind, as published in the schema (``POST /api/cases/``)."""
    return type(
        f"{_camel(kind.code)}CaseIntakeSerializer",
        (CaseIntakeBaseSerializer,),
        {
            "__doc__": f"An intake of the {kind.code} kind ({kind.label}).",
            "kind": serializers.ChoiceField(choices=[(kind.code, kind.label)]),
            "change": kind.serializer(help_text=f"The change ({kind.label})."),
        },
    )


@functools.cache
def legacy_intake_serializer_for(kind: kinds.ChangeKind) -> type[serializers.Serializer]:
    """The older intake body of ``kind`` (its ``legacy_intake`` field instead of ``kind`` and
    ``change``): still accepted, deprecated in the schema."""
    serializer = type(
        f"{_camel(kind.code)}LegacyCaseIntakeSerializer",
        (CaseIntakeBaseSerializer,),
        {
            "__doc__": f"Deprecated: the older intake body of the {kind.code} kind. Send kind "
            "and change instead.",
            kind.legacy_intake: kind.legacy_intake_field(),
        },
    )
    return extend_schema_serializer(deprecate_fields=[kind.legacy_intake])(serializer)


def intake_request_schema() -> PolymorphicProxySerializer:
    """``POST /api/cases/``'s body in the schema: one shape per kind, told apart by ``kind``,
    or a deprecated older body."""
    by_kind = PolymorphicProxySerializer(
        component_name="CaseIntakeByKind",
        serializers=_lazy(
            lambda: {kind.code: intake_serializer_for(kind) for kind in kinds.kinds()}
        ),
        resource_type_field_name="kind",
    )
    return PolymorphicProxySerializer(
        component_name="CaseIntake",
        serializers=_lazy(
            lambda: [
                by_kind,
                *(legacy_intake_serializer_for(k) for k in kinds.kinds() if k.legacy_intake),
            ]
        ),
        resource_type_field_name=None,
    )


class TransitionRequestSerializer(ClosedBodySerializer):
    transition = serializers.ChoiceField(choices=[(t, t) for t in MANUAL_TRANSITIONS])
    expected_version = StrictIntegerField(min_value=1)
    reason = _text(validation.REASON_MAX_LENGTH)


class PrepareProposalSerializer(ClosedBodySerializer):
    change = serializers.JSONField(
        help_text="The whole change, of the case's kind (its shape: GET /api/kinds/)."
    )
    expected_version = StrictIntegerField(min_value=1)
    reason = _text(validation.SHORT_REASON_MAX_LENGTH, required=False, default="")


class CancelRequestSerializer(ClosedBodySerializer):
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


class WaitingOnField(serializers.ChoiceField):
    """Whom the case waits on, as ``cases.held`` says: a held case the workers are still
    settling waits on a background worker (``worker``), not yet on the person it becomes."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=WaitingOn.choices, source="*", read_only=True, **kwargs)

    def to_representation(self, value: Any) -> str:
        return held.waiting_on(value)


class CaseListSerializer(serializers.ModelSerializer):
    account = serializers.CharField(source="account.reference")
    change = serializers.DictField(help_text="The change asked for, in its kind's shape.")
    change_description = serializers.CharField(
        help_text="The change in plain words.", read_only=True
    )
    team = serializers.CharField(source="team.name")
    owner = serializers.SerializerMethodField()
    backup = serializers.SerializerMethodField()
    responsible_now = serializers.SerializerMethodField()
    waiting_on = WaitingOnField()
    overdue = serializers.BooleanField(source="is_overdue")
    follow_up_state = serializers.SerializerMethodField()

    class Meta:
        model = Case
        fields = [
            "reference",
            "account",
            "request_key",
            "order_id",
            "kind",
            "change",
            "change_description",
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

    def to_representation(self, instance: Case) -> Any:
        # The next action's words and the allowed transitions ask the same guards and the
        # caller's teams: each is read once for the answer (``Case.guards_read_once``).
        with instance.guards_read_once():
            return super().to_representation(instance)

    def get_next_action(self, case) -> str:
        return describe_next_action(case).text

    def get_allowed_transitions(self, case) -> list[str]:
        from cases.actions import allowed_transitions

        return allowed_transitions(case, self.context["request"].user)


@functools.cache
def case_detail_serializer_for(kind: kinds.ChangeKind) -> type[serializers.Serializer]:
    """A case of one kind, as published in the schema (the answers are ``CaseDetailSerializer``
    for every kind)."""
    return type(
        f"{_camel(kind.code)}CaseSerializer",
        (CaseDetailSerializer,),
        {
            "__doc__": f"A case of the {kind.code} kind ({kind.label}).",
            "kind": _kind_field(kind, read_only=True),
            "change": kind.serializer(read_only=True),
        },
    )


def case_response_schema() -> PolymorphicProxySerializer:
    """A case answer in the schema: one shape per kind, told apart by ``kind``."""
    return PolymorphicProxySerializer(
        component_name="Case",
        serializers=_lazy(
            lambda: {kind.code: case_detail_serializer_for(kind) for kind in kinds.kinds()}
        ),
        resource_type_field_name="kind",
    )
