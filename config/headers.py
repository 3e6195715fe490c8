"""Response headers that tell the browser what a Holdfast page may do.

The Content-Security-Policy itself comes from django-csp (``CONTENT_SECURITY_POLICY`` in the
settings); this module adds ``Permissions-Policy``: no page of Holdfast uses the camera, the
microphone, the location or any other powerful feature, so none may, in any frame.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


class PermissionsPolicyMiddleware:
    """Sets ``Permissions-Policy`` from ``settings.PERMISSIONS_POLICY`` on every response that
    has none."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.value = ", ".join(
            f"{feature}=({' '.join(allow)})" for feature, allow in settings.PERMISSIONS_POLICY
        )

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Permissions-Policy", self.value)
        return response
