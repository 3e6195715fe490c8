"""Error pages: the API answers in its own error shape, the rest gets Django's pages; a
database that refuses connections is a 503 (``config.unavailable``)."""

from __future__ import annotations

import sys

from django.http import JsonResponse
from django.views import defaults

from config.unavailable import database_unavailable, unavailable_response


def not_found(request, exception):
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"error": "not_found", "detail": f"No API endpoint at {request.path}."}, status=404
        )
    return defaults.page_not_found(request, exception)


def server_error(request):
    # Called while the exception is being handled (from anywhere in the request, a
    # middleware's too): a refused database connection is "try again", not an error.
    if database_unavailable(sys.exc_info()[1]):
        return unavailable_response(request)
    if request.path.startswith("/api/"):
        return JsonResponse(
            {
                "error": "server_error",
                "detail": "Something went wrong on Holdfast's side.",
            },
            status=500,
        )
    return defaults.server_error(request)
