"""Error pages: the API answers in its own error shape, the rest gets Django's pages."""

from __future__ import annotations

from django.http import JsonResponse
from django.views import defaults


def not_found(request, exception):
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"error": "not_found", "detail": f"No API endpoint at {request.path}."}, status=404
        )
    return defaults.page_not_found(request, exception)


def server_error(request):
    if request.path.startswith("/api/"):
        return JsonResponse(
            {
                "error": "server_error",
                "detail": "Something went wrong on Holdfast's side.",
            },
            status=500,
        )
    return defaults.server_error(request)
