"""An API path that names no endpoint is answered in the API's error shape, whatever the
settings: a JSON 404, never Django's HTML page (``DEBUG``) nor its slash redirect.

``APPEND_SLASH`` would answer ``POST /api/cases`` (no trailing slash) with a 301 to
``/api/cases/``, which clients follow as a ``GET`` (the list: the intake silently not made),
and with ``DEBUG`` on with an HTML 500. Here it is a 404 that names the endpoint meant.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, get_resolver

API_PREFIX = "/api/"


class ApiPathMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path_info
        if path.startswith(API_PREFIX) and not _resolves(path):
            detail = f"No API endpoint at {request.method} {path}."
            if not path.endswith("/") and _resolves(f"{path}/"):
                # The path only: whether it takes this method is the endpoint's to say.
                detail += f" API paths end with a slash: {path}/."
            return JsonResponse({"error": "not_found", "detail": detail}, status=404)
        return self.get_response(request)


def _resolves(path: str) -> bool:
    try:
        get_resolver().resolve(path)
    except Resolver404:
        return False
    return True
