"""API rate limits: per user, per anonymous address, and a separate scope for the webhook.

DRF's throttles copy ``DEFAULT_THROTTLE_RATES`` and the default cache when their module is
imported; these read the rates from the current settings and count in the ``throttle`` cache,
so a changed setting (a test, a reload) takes effect and clearing that cache resets only the
counters.
"""

from __future__ import annotations

from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured
from rest_framework import exceptions, throttling
from rest_framework.settings import api_settings

THROTTLE_CACHE = "throttle"


class _LiveRateMixin:
    scope: str | None

    @property
    def cache(self):
        return caches[THROTTLE_CACHE]

    def get_rate(self) -> str | None:
        rates = api_settings.DEFAULT_THROTTLE_RATES
        if self.scope not in rates:
            raise ImproperlyConfigured(f"No rate for the {self.scope!r} API throttle.")
        return rates[self.scope]


class UserRateThrottle(_LiveRateMixin, throttling.UserRateThrottle):
    """An authenticated caller's requests, counted per user."""


class AnonRateThrottle(_LiveRateMixin, throttling.AnonRateThrottle):
    """Requests without credentials, counted per client address."""


class HookRateThrottle(_LiveRateMixin, throttling.SimpleRateThrottle):
    """The order system's webhooks, counted per sending address in their own scope."""

    scope = "hooks"

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class ThrottleRefusalsMixin:
    """Count refused credentials against the anonymous rate too.

    DRF checks throttles only after authentication and permissions pass, so a client guessing
    tokens (401 after 401) would never be throttled. Here a refused authentication, or a
    request without credentials, is counted as anonymous before it is answered, and past the
    rate the answer is 429 instead.
    """

    def perform_authentication(self, request):
        try:
            super().perform_authentication(request)
        except exceptions.APIException:
            self.check_throttles(request)
            raise

    def check_permissions(self, request):
        try:
            super().check_permissions(request)
        except exceptions.NotAuthenticated:
            self.check_throttles(request)
            raise
