"""Standalone settings for the reference order system process.

The order system imports nothing of Holdfast: its env helpers are its own (``orders.env``, the
same semantics as Holdfast's ``config.env``). Holdfast's own settings never list the ``orders``
app.

``DJANGO_ENV=production``: every secret must be set, not the development default and at least 32
characters; debug, fault injection and the ``/_testing/`` endpoints are refused (not routed).
"""

from __future__ import annotations

import re
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from orders.env import (
    env_bool,
    env_float,
    env_list,
    env_secret,
    env_str,
    env_url,
    parse_database_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent

PRODUCTION = env_str("DJANGO_ENV", "development") == "production"
DEBUG = env_bool("ORDERS_DEBUG", not PRODUCTION)
if PRODUCTION and DEBUG:
    raise ImproperlyConfigured("ORDERS_DEBUG must be off when DJANGO_ENV=production.")


def _secret(name: str, dev_default: str) -> str:
    """A secret from the environment: in production required, not the development default and
    at least 32 characters (``orders.env.env_secret``); elsewhere the default when unset."""
    return env_secret(name, dev_default, production=PRODUCTION)


SECRET_KEY = _secret("SECRET_KEY", "dev-insecure-orders-secret-key")
# Shared with Holdfast: it signs approval grants, this system verifies them.
APPROVAL_GRANT_KEY = _secret("APPROVAL_GRANT_KEY", "dev-approval-grant-key")
# Signs outgoing webhooks with a timestamp (X-Orders-Signature: t=<seconds>,sha256=<hex>).
ORDER_WEBHOOK_SECRET = _secret("ORDER_WEBHOOK_SECRET", "dev-webhook-secret")
# The bearer credential Holdfast sends on every call (Holdfast's ORDER_SYSTEM_TOKEN). Every
# endpoint except /healthz answers 401 without it.
ORDERS_API_TOKEN = _secret("ORDERS_API_TOKEN", "dev-order-system-token")

# Holdfast's hook; an empty value disables delivery (events stay in the outbox). The trailing
# slash is kept: Holdfast's route ends with one.
ORDERS_WEBHOOK_URL = env_str(
    "ORDERS_WEBHOOK_URL", "http://127.0.0.1:8000/api/hooks/orders/"
).strip()
if ORDERS_WEBHOOK_URL:
    env_url("ORDERS_WEBHOOK_URL", ORDERS_WEBHOOK_URL)  # validates the scheme and host
ORDERS_WEBHOOK_TIMEOUT_SECONDS = env_float("ORDERS_WEBHOOK_TIMEOUT_SECONDS", 5.0, minimum=0.1)
ORDERS_WEBHOOK_BACKOFF_SECONDS = env_float("ORDERS_WEBHOOK_BACKOFF_SECONDS", 1.0, minimum=0.0)
ORDERS_WEBHOOK_BACKOFF_CAP_SECONDS = env_float(
    "ORDERS_WEBHOOK_BACKOFF_CAP_SECONDS", 60.0, minimum=0.0
)
ORDERS_DELIVERY_POLL_SECONDS = env_float("ORDERS_DELIVERY_POLL_SECONDS", 0.5, minimum=0.05)

# Fault injection and the /_testing/ endpoints: 404 unless enabled; in production they are not
# routed at all, and asking for them is a start-up error.
ORDERS_FAULTS_ENABLED = env_bool("ORDERS_FAULTS_ENABLED", False)
if PRODUCTION and ORDERS_FAULTS_ENABLED:
    raise ImproperlyConfigured(
        "ORDERS_FAULTS_ENABLED must be off when DJANGO_ENV=production: fault injection and the "
        "/_testing/ endpoints (which delete every row) are for development and tests only."
    )
ORDERS_SEARCH_LAG_SECONDS = env_float("ORDERS_SEARCH_LAG_SECONDS", 0.0, minimum=0.0)

# Crippled modes: the system keeps claiming these capabilities in /capabilities but does not
# honour them, so that Holdfast's probe can be shown to catch a system that lies.
ORDERS_DISABLE_FENCING = env_bool("ORDERS_DISABLE_FENCING", False)
ORDERS_DISABLE_IDEMPOTENCY = env_bool("ORDERS_DISABLE_IDEMPOTENCY", False)
# Unsafe receiver modes, for tests that prove Holdfast's own guards: with one of these on, the
# receiver skips that check (approval: the grant's expiry -- its signature and exact change are
# still checked; access: the account's current permission; version: the expected order version)
# and still claims it in /capabilities.
ORDERS_UNSAFE_SKIP_APPROVAL_CHECK = env_bool("ORDERS_UNSAFE_SKIP_APPROVAL_CHECK", False)
ORDERS_UNSAFE_SKIP_ACCESS_CHECK = env_bool("ORDERS_UNSAFE_SKIP_ACCESS_CHECK", False)
ORDERS_UNSAFE_SKIP_VERSION_CHECK = env_bool("ORDERS_UNSAFE_SKIP_VERSION_CHECK", False)
# Every switch that makes this receiver break its contract: all off by default, refused in
# production, and named by ``python -m orders check`` (orders.W001) wherever one is on.
UNSAFE_SWITCHES = (
    "ORDERS_DISABLE_FENCING",
    "ORDERS_DISABLE_IDEMPOTENCY",
    "ORDERS_UNSAFE_SKIP_APPROVAL_CHECK",
    "ORDERS_UNSAFE_SKIP_ACCESS_CHECK",
    "ORDERS_UNSAFE_SKIP_VERSION_CHECK",
)
_UNSAFE_ON = [name for name in UNSAFE_SWITCHES if globals()[name]]
if PRODUCTION and _UNSAFE_ON:
    raise ImproperlyConfigured(
        f"{', '.join(_UNSAFE_ON)} must be off when DJANGO_ENV=production: a receiver that "
        "skips its checks or lies about its capabilities is for tests of Holdfast's own "
        "guards only."
    )

# Change kinds (orders.kinds): the built-in kinds this receiver accepts, and plug-in handler
# modules (dotted paths, each with a ``HANDLER``) loaded beside them. A kind not listed is refused
# with 422 unsupported_kind and not named in /capabilities.
BUILT_IN_CHANGE_KINDS = ("delivery_date", "shipping_address", "order_cancellation")
ORDERS_CHANGE_KINDS = env_list("ORDERS_CHANGE_KINDS", list(BUILT_IN_CHANGE_KINDS))
_UNKNOWN_KINDS = sorted(set(ORDERS_CHANGE_KINDS) - set(BUILT_IN_CHANGE_KINDS))
if _UNKNOWN_KINDS:
    raise ImproperlyConfigured(
        f"ORDERS_CHANGE_KINDS names {', '.join(_UNKNOWN_KINDS)}: the built-in kinds are "
        f"{', '.join(BUILT_IN_CHANGE_KINDS)} (a plug-in kind goes in ORDERS_EXTRA_KINDS)."
    )
ORDERS_EXTRA_KINDS = env_list("ORDERS_EXTRA_KINDS", [])
if PRODUCTION and ORDERS_EXTRA_KINDS:
    raise ImproperlyConfigured(
        "ORDERS_EXTRA_KINDS must be empty when DJANGO_ENV=production: plug-in kinds loaded by "
        "dotted path are for tests and development of a new kind only."
    )
# The countries a shipping address may be changed to (ISO 3166-1 alpha-2).
SHIP_TO_DEFAULT = "AT,BE,CH,DE,DK,ES,FI,FR,GB,IE,IT,LU,NL,NO,PT,SE"
ORDERS_SHIP_TO_COUNTRIES = env_list("ORDERS_SHIP_TO_COUNTRIES", SHIP_TO_DEFAULT.split(","))
_BAD_COUNTRIES = [code for code in ORDERS_SHIP_TO_COUNTRIES if not re.fullmatch("[A-Z]{2}", code)]
if _BAD_COUNTRIES:
    raise ImproperlyConfigured(
        f"ORDERS_SHIP_TO_COUNTRIES holds {', '.join(_BAD_COUNTRIES)}: use two capital letters "
        "(ISO 3166-1 alpha-2) per country, e.g. GB,DE,FR."
    )

ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]", *env_list("ORDERS_ALLOWED_HOSTS", [])]

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "orders",
]

MIDDLEWARE = [
    # Every answer carries its length, so the server can keep the connection alive.
    "orders.middleware.ContentLengthMiddleware",
    # Then: every request is logged, refused ones and injected faults included.
    "orders.middleware.RequestLogMiddleware",
    # First: a request without the credential reaches no view and consumes no fault rule.
    "orders.middleware.ApiTokenMiddleware",
    "orders.middleware.FaultInjectionMiddleware",
]

ROOT_URLCONF = "orders.urls"
WSGI_APPLICATION = None

DATABASES = {
    "default": parse_database_url(
        env_str("ORDERS_DATABASE_URL", f"sqlite:///{BASE_DIR / 'var' / 'orders.sqlite3'}")
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
TIME_ZONE = "UTC"
USE_I18N = False

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        # Refusals are answers, not incidents: no warning line per 4xx.
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
        "orders": {
            "handlers": ["console"],
            "level": env_str("ORDERS_LOG_LEVEL", "WARNING").upper(),
        },
        # One line per request (orders.middleware.RequestLogMiddleware); WARNING silences it.
        "orders.requests": {"level": env_str("ORDERS_REQUEST_LOG_LEVEL", "INFO").upper()},
    },
}
