"""One error shape for the whole API: ``{"error": code, "detail": text, ...}``.

``error_responses`` documents that shape in the OpenAPI schema, one reusable component for
every view, so the schema and the answers cannot drift apart per endpoint.
"""

from __future__ import annotations

import math

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, serializers
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from cases.exceptions import CaseError

_DRF_CODES = {
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.ParseError: "malformed_request",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.Throttled: "throttled",
}


def error_response(exc: CaseError) -> Response:
    return Response({"error": exc.code, "detail": exc.detail, **exc.extra}, status=exc.http_status)


def exception_handler(exc, context):
    if isinstance(exc, CaseError):
        return error_response(exc)
    if isinstance(exc, RequestDataTooBig):
        # Django refuses to read a body past DATA_UPLOAD_MAX_MEMORY_SIZE; left to it, the
        # answer is its HTML "Bad Request" page, not the API's shape.
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return Response(
            {
                "error": "request_too_large",
                "detail": f"The request body is larger than {limit:,} bytes; nothing was read "
                "or written.",
            },
            status=413,
        )
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        fields = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        request = (context or {}).get("request")
        reading = request is not None and request.method in ("GET", "HEAD", "OPTIONS")
        response.data = {
            "error": "invalid",
            # A read writes nothing anyway: "nothing was written" is said of a write only.
            "detail": "The request has invalid fields"
            + ("." if reading else "; nothing was written."),
            "fields": fields,
        }
    else:
        code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
        response.data = {"error": code, "detail": str(getattr(exc, "detail", exc))}
        if isinstance(exc, exceptions.Throttled):
            # DRF already set the Retry-After header from the same wait (``Throttled.wait``,
            # which the stubs do not declare).
            response.data["retry_after"] = math.ceil(getattr(exc, "wait", None) or 0)
    return response


class ErrorSerializer(serializers.Serializer):
    """Every refusal the API gives; the optional members appear with the codes named."""

    error = serializers.CharField(
        help_text="Machine-readable code: invalid, malformed_request, not_authenticated, "
        "authentication_failed, "
        "permission_denied, not_permitted, own_proposal, not_found, version_conflict, "
        "transition_not_allowed, proposal_not_current, open_case_exists, throttled, …"
    )
    detail = serializers.CharField(help_text="What happened, in plain words.")
    # The response member ``fields``: DRF's metaclass takes declared fields out of the class, so
    # this never replaces ``Serializer.fields`` (the stubs see only the class attribute).
    fields = serializers.DictField(  # type: ignore[assignment]
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="invalid: the messages per field (non_field_errors for the whole request).",
    )
    allowed = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="transition_not_allowed: the transitions allowed now.",
    )
    expected_version = serializers.IntegerField(
        required=False, help_text="version_conflict: the version the request carried."
    )
    current_version = serializers.IntegerField(
        required=False, help_text="version_conflict: the case's version now."
    )
    retry_after = serializers.IntegerField(
        required=False, help_text="throttled: seconds to wait (also the Retry-After header)."
    )
    reference = serializers.CharField(
        required=False, help_text="open_case_exists: the open case of this order and kind."
    )
    proposal_status = serializers.CharField(
        required=False,
        help_text="proposal_not_current: the proposal's status now (awaiting_review, approved, "
        "rejected, superseded, …).",
    )
    roles = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="own_proposal: how the caller authored the proposal (e.g. prepared, "
        "requested), which is why they may not decide it.",
    )
    reason = serializers.CharField(
        required=False, help_text="bad_signature (webhooks): signature or timestamp."
    )


_ERROR_DESCRIPTIONS = {
    400: "invalid: the fields named in `fields` are wrong; malformed_request: the body is not "
    "JSON that can be read (not JSON, not UTF-8, nested too deeply). Nothing was written.",
    401: "not_authenticated (no credentials) or authentication_failed (a bad token, sent as "
    "`Token <key>` or `Bearer <key>`); the answer carries `WWW-Authenticate: Token`.",
    403: "permission_denied, not_permitted or own_proposal (with roles): the caller may not do "
    "this.",
    404: "not_found: nothing by that name among the caller's teams' objects (another team's "
    "object looks the same), or a page past the last one.",
    405: "method_not_allowed.",
    406: "not_acceptable: the Accept header asks for a format the API does not serve.",
    409: "version_conflict (with expected_version and current_version), "
    "transition_not_allowed (with allowed) or proposal_not_current (with proposal_status): "
    "reload and decide again; "
    "open_case_exists (with reference): the order has an open case of this kind already.",
    413: "request_too_large: the body is larger than the server reads; nothing was written.",
    415: "unsupported_media_type: send application/json.",
    429: "throttled: too many requests; wait retry_after seconds (the Retry-After header).",
}
# Answers any authenticated endpoint can give, whatever it does.
COMMON_ERRORS = (401, 405, 406, 429)


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    """The documented error answers for a view: ``statuses`` plus ``COMMON_ERRORS``; a view
    that reads a JSON body (it answers 415) may also answer 413."""
    wanted = sorted({*statuses, *COMMON_ERRORS, *((413,) if 415 in statuses else ())})
    return {
        status: OpenApiResponse(ErrorSerializer, description=_ERROR_DESCRIPTIONS[status])
        for status in wanted
    }
