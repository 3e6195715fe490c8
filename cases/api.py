"""The cases REST API (CONTRACT §2): validation and orchestration only, then a service."""

from __future__ import annotations

import re

from django.db.models import Prefetch
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from cases import held, kinds, search, selectors, services
from cases.api_errors import error_responses
from cases.exceptions import CaseNotFound, InvalidCaseInput
from cases.models import CaseEvent, Status, WaitingOn
from cases.paging import SearchedPageNumberPagination
from cases.serializers import (
    CancelRequestSerializer,
    CaseDetailSerializer,
    CaseIntakeSerializer,
    CaseListSerializer,
    TransitionRequestSerializer,
    case_response_schema,
    intake_request_schema,
    legacy_intake_serializer_for,
)
from cases.throttling import ThrottleRefusalsMixin
from cases.validation import USERNAME_MAX_LENGTH

# A re-sent intake's answer (``create``): the key had opened the case already; and in which
# fields the request differs from the first.
REPLAYED_HEADER = "Holdfast-Replayed"
DIFFERS_HEADER = "Holdfast-Request-Differs"
# A username as Django's own validator allows it; the schema publishes the same rule.
_USERNAME_PATTERN = rf"^[\w.@+-]{{1,{USERNAME_MAX_LENGTH}}}$"
_USERNAME = re.compile(_USERNAME_PATTERN.replace("$", r"\Z"))
_USERNAME_SCHEMA = {
    "type": "string",
    "pattern": _USERNAME_PATTERN,
    "maxLength": USERNAME_MAX_LENGTH,
}
_TRUE = {"1", "true", "yes"}
_FALSE = {"0", "false", "no"}


class CaseViewSet(
    ThrottleRefusalsMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    lookup_field = "reference"
    lookup_value_regex = r"[A-Za-z]+-\d+"
    # A page counts at most 1,000 cases past it (``count_capped`` says when there are more).
    pagination_class = SearchedPageNumberPagination
    search_cut = False  # set by ``filter_queryset`` when ``q`` was cut (``cases.search``)

    def get_serializer_class(self):
        if self.action == "list":
            return CaseListSerializer
        if self.action == "create":
            return CaseIntakeSerializer
        return CaseDetailSerializer

    def get_queryset(self):
        qs = held.with_waiting_on(selectors.cases_for(self.request.user))
        if self.action == "retrieve":
            qs = qs.prefetch_related(
                Prefetch("events", queryset=CaseEvent.objects.order_by("id")),
                "evidence",
                "operations",
                "attempts__operation",
                "cancellations",
            )
        return qs

    def get_object(self):
        reference = self.kwargs[self.lookup_field]
        try:
            return self.get_queryset().get(reference=reference)
        except self.get_queryset().model.DoesNotExist:
            raise CaseNotFound(f"No case {reference} among your teams' cases.") from None

    def filter_queryset(self, queryset):
        params = self.request.query_params
        errors = {}
        if (value := params.get("status")) is not None:
            if value not in Status.values:
                errors["status"] = [f"Unknown status {value!r}; one of {', '.join(Status.values)}."]
            queryset = queryset.filter(status=value)
        if (value := params.get("waiting_on")) is not None:
            if value not in WaitingOn.values:
                errors["waiting_on"] = [
                    f"Unknown value {value!r}; one of {', '.join(WaitingOn.values)}."
                ]
            queryset = queryset.filter(held.waiting_on_is(value))
        for name in ("owner", "responsible"):
            value = params.get(name)
            if value is not None and not _USERNAME.match(value):
                errors[name] = [
                    f"A username: 1 to {USERNAME_MAX_LENGTH} letters, digits and @ . + - _."
                ]
        if errors:
            raise ValidationError(errors)
        if value := params.get("owner"):
            queryset = queryset.filter(owner__username=value)
        if value := params.get("responsible"):
            user = selectors.User.objects.filter(username=value).first()
            queryset = queryset.responsible(user) if user else queryset.none()
        if (value := params.get("overdue")) is not None:
            if value.lower() in _TRUE:
                queryset = queryset.overdue()
            elif value.lower() in _FALSE:
                queryset = queryset.exclude(pk__in=queryset.overdue().values("pk"))
            else:
                errors["overdue"] = ["Use true or false."]
        if message := search.too_many_words(params.get("q", "")):
            errors["q"] = [message]
        if errors:
            raise ValidationError(errors)
        if value := params.get("q", "").strip():
            # Each word through the indexes, a capped set of keys (``cases.search``).
            # ``search_cut`` on the page says when every word was in too many rows.
            queryset, self.search_cut = search.indexed_search(queryset, search.CASE_FIELDS, value)
        return queryset.order_by("-number")

    @extend_schema(
        parameters=[
            OpenApiParameter("status", enum=Status.values),
            OpenApiParameter("waiting_on", enum=WaitingOn.values),
            OpenApiParameter("owner", _USERNAME_SCHEMA, description="username of the owner"),
            OpenApiParameter(
                "responsible", _USERNAME_SCHEMA, description="username responsible now"
            ),
            OpenApiParameter("overdue", bool, description="next check time has passed"),
            OpenApiParameter(
                "q",
                str,
                description="words that must each be in the case's reference, order id, "
                f"account reference or name, or request key; at most {search.MAX_WORDS}",
            ),
        ],
        responses={200: CaseListSerializer(many=True), **error_responses(400, 404)},
        summary="List your teams' cases",
        description="The cases of the caller's teams, newest first, a page at a time "
        "(`count_capped` says when more than 1,000 follow the page). Filter by status, by what "
        "the case waits on, by owner or by who is responsible now, or by an overdue next check; "
        "search by reference, order id or account with `q` (`search_cut` says when every word "
        "was in too many cases to check them all).",
    )
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(
        responses={200: case_response_schema(), **error_responses(404)},
        summary="Read one case",
        description="One case by its reference (e.g. D-41): its version (send it back as "
        "expected_version), status, next action in plain words, who is responsible now, its "
        "operations and attempts, evidence and events. Another team's case answers 404.",
    )
    def retrieve(self, request, *args, **kwargs):
        return super().retrieve(request, *args, **kwargs)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                REPLAYED_HEADER,
                str,
                OpenApiParameter.HEADER,
                response=[200],
                enum=["true"],
                description="The request key had opened this case already: nothing was created.",
            ),
            OpenApiParameter(
                DIFFERS_HEADER,
                str,
                OpenApiParameter.HEADER,
                response=[200],
                description="The fields in which this request differs from the one that "
                "opened the case (order_id, kind, change, note), comma separated: the case "
                "keeps the first. A different change needs a request key of its own.",
            ),
        ],
        request=intake_request_schema(),
        responses={
            201: case_response_schema(),
            200: case_response_schema(),
            **error_responses(400, 403, 409, 415),
        },
        summary="Open a case (intake)",
        description="Open a case asking for one change of one kind (GET /api/kinds/) to one "
        "order. The same account and request_key again returns the same case with 200 and "
        f"creates nothing ({REPLAYED_HEADER}: true; {DIFFERS_HEADER} names the fields in "
        "which the request differs from the first, which the case keeps; a person re-sending "
        "another person's request becomes one of its authors, who may not approve it). An "
        "open case for the same order and kind: 409 open_case_exists with its reference. "
        "An older body from before change kinds (its shape is in the schema, deprecated) "
        "still works as its kind.",
    )
    def create(self, request, *args, **kwargs):
        context = {"accounts": selectors.accounts_for(request.user)}
        body = request.data if isinstance(request.data, dict) else {}
        legacy = kinds.legacy_kind_of(body)
        if legacy is not None:
            if "kind" in body or "change" in body:
                raise ValidationError(
                    {
                        legacy.legacy_intake: [
                            f"Send kind and change, or the deprecated {legacy.legacy_intake}, "
                            "not both."
                        ]
                    }
                )
            serializer = legacy_intake_serializer_for(legacy)(data=body, context=context)
            serializer.is_valid(raise_exception=True)
            kind = legacy.code
            change = legacy.from_legacy(serializer.validated_data[legacy.legacy_intake])
        else:
            serializer = CaseIntakeSerializer(data=request.data, context=context)
            serializer.is_valid(raise_exception=True)
            kind, change = serializer.validated_data["kind"], serializer.validated_data["change"]
        data = serializer.validated_data
        try:
            case, created = services.case_open(
                actor=request.user,
                account=data["account"],
                request_key=data["request_key"],
                order_id=data["order_id"],
                kind=kind,
                change=change,
                note=data.get("note", ""),
            )
        except InvalidCaseInput as exc:
            if legacy is None:
                raise
            # The older body's callers read its errors under its own field's name.
            fields = {
                legacy.legacy_intake if name.startswith("change.") else name: messages
                for name, messages in exc.fields.items()
            }
            raise InvalidCaseInput(exc.detail, fields=fields) from None
        if created:
            return self._detail(case, status.HTTP_201_CREATED)
        response = self._detail(case, status.HTTP_200_OK)
        response[REPLAYED_HEADER] = "true"
        differs = services.resent_differences(
            case,
            order_id=data["order_id"],
            kind=kind,
            change=change,
            note=data.get("note", ""),
        )
        if differs:
            response[DIFFERS_HEADER] = ", ".join(differs)
        return response

    @extend_schema(
        request=TransitionRequestSerializer,
        responses={200: case_response_schema(), **error_responses(400, 403, 404, 409, 415)},
        summary="Move a case by hand",
        description="Apply one manual transition (escalate, stop, resume, …) to the case the "
        "caller last read: expected_version must be its version now, else 409 version_conflict; "
        "a transition not allowed now is 409 transition_not_allowed with the allowed ones.",
    )
    @action(detail=True, methods=["post"])
    def transitions(self, request, reference=None):
        case = self.get_object()
        serializer = TransitionRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.case_transition(case=case, actor=request.user, **serializer.validated_data)
        return self._detail(case, status.HTTP_200_OK)

    @extend_schema(
        request=CancelRequestSerializer,
        responses={200: case_response_schema(), **error_responses(400, 403, 404, 409, 415)},
        summary="Cancel a case",
        description="Ask to cancel the case, with a reason. When nothing can have been "
        "applied the case is cancelled at once (status cancelled); when an apply may be under "
        "way the request is recorded and the case is held until the outcome is known.",
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, reference=None):
        case = self.get_object()
        serializer = CancelRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.case_cancel_request(
            case=case,
            actor=request.user,
            reason=serializer.validated_data["reason"],
            via="api",
        )
        return self._detail(case, status.HTTP_200_OK)

    def _detail(self, case, http_status):
        fresh = (
            self.get_queryset()
            .prefetch_related(
                Prefetch("events", queryset=CaseEvent.objects.order_by("id")),
                "evidence",
                "operations",
                "attempts__operation",
                "cancellations",
            )
            .get(pk=case.pk)
        )
        serializer = CaseDetailSerializer(fresh, context=self.get_serializer_context())
        return Response(serializer.data, status=http_status)
