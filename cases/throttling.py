"""API rate limits: per user, per anonymous address, and a separate scope for the webhook.

DRF's throttles copy ``DEFAULT_THROTTLE_RATES`` and the default cache when their module is
imported; these read the rates from the current settings and count in the ``throttle`` cache,
so a changed setting (a test, a reload) takes effect and clearing that cache resets only the
counters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from django.core.cache import BaseCache, caches
from django.core.exceptions import ImproperlyConfigured
from rest_framework import exceptions, throttling
from rest_framework.settings import api_settings

THROTTLE_CACHE = "throttle"

if TYPE_CHECKING:
    # Never imported at run time: DRF imports this module (DEFAULT_THROTTLE_CLASSES) while
    # ``rest_framework.views`` is itself being imported.
    from rest_framework.request import Request
    from rest_framework.views import APIView

    # The mixin is only ever mixed into an APIView: type it as one.
    _ViewBase = APIView
else:
    _ViewBase = object


class _LiveRateMixin:
    scope: str | None
    cache: BaseCache

    def __init__(self) -> None:
        # Looked up per throttle, not frozen at import: DRF makes a throttle per request.
        self.cache = caches[THROTTLE_CACHE]
        super().__init__()

    def get_rate(self) -> str | None:
        rates = api_settings.DEFAULT_THROTTLE_RATES
        if self.scope is None or self.scope not in rates:
            raise ImproperlyConfigured(f"No rate for the {self.scope!r} API throttle.")
        # The rates are DRF's "<count>/<period>" strings (or None: unthrottled); the stubs
        # type them as numbers.
        return cast("str | None", rates[self.scope])


class UserRateThrottle(_LiveRateMixin, throttling.UserRateThrottle):
    """An authenticated caller's requests, counted per user."""


class AnonRateThrottle(_LiveRateMixin, throttling.AnonRateThrottle):
    """Requests without credentials, counted per client address."""


class HookRateThrottle(_LiveRateMixin, throttling.SimpleRateThrottle):
    """The order system's webhooks, counted per sending address in their own scope."""

    scope = "hooks"

    def get_cache_key(self, request: Request, view: APIView) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class ThrottleRefusalsMixin(_ViewBase):
    """Count refused credentials against the anonymous rate too.

    DRF checks throttles only after authentication and permissions pass, so a client guessing
    tokens (401 after 401) would never be throttled. Here a refused authentication, or a
    request without credentials, is counted as anonymous before it is answered, and past the
    rate the answer is 429 instead.
    """

    def perform_authentication(self, request: Request) -> None:
        try:
            super().perform_authentication(request)
        except exceptions.APIException:
            self.check_throttles(request)
            raise

    def check_permissions(self, request: Request) -> None:
        try:
            super().check_permissions(request)
        except exceptions.NotAuthenticated:
            self.check_throttles(request)
            raise
