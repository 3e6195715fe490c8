"""One error shape for the whole API: ``{"error": code, "detail": text, ...}``."""

from __future__ import annotations

from rest_framework import exceptions
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
    exceptions.Throttled: "throttled",
}


def error_response(exc: CaseError) -> Response:
    return Response({"error": exc.code, "detail": exc.detail, **exc.extra}, status=exc.http_status)


def exception_handler(exc, context):
    if isinstance(exc, CaseError):
        return error_response(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        fields = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        response.data = {
            "error": "invalid",
            "detail": "The request has invalid fields; nothing was written.",
            "fields": fields,
        }
    else:
        code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
        response.data = {"error": code, "detail": str(getattr(exc, "detail", exc))}
    return response
