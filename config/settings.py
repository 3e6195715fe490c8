"""Holdfast settings. Everything deployment-specific comes from the environment.

``DJANGO_ENV=production`` selects the production profile (``DEBUG`` off, secure cookies, HSTS,
required secrets of at least 32 characters that are not the development defaults); anything else
is development, where the embedded SQLite database and the development secrets are allowed.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import NotRequired, TypedDict

from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from config.env import (
    env_bool,
    env_float,
    env_int,
    env_list,
    env_secret,
    env_str,
    env_url,
    parse_database_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

DJANGO_ENV = env_str("DJANGO_ENV", "development")
if DJANGO_ENV not in {"development", "production", "test"}:
    raise ImproperlyConfigured(f"DJANGO_ENV={DJANGO_ENV!r}: use development, test or production.")
PRODUCTION = DJANGO_ENV == "production"
DEBUG = env_bool("DEBUG", not PRODUCTION)
if PRODUCTION and DEBUG:
    raise ImproperlyConfigured("DEBUG must be off when DJANGO_ENV=production.")


def _secret(name: str, dev_default: str) -> str:
    """A secret from the environment: in production required, not the development default and
    at least 32 characters (``config.env.env_secret``); elsewhere the default when unset."""
    return env_secret(name, dev_default, production=PRODUCTION)


SECRET_KEY = _secret("SECRET_KEY", "django-insecure-holdfast-development-only-key-0123456789")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [] if PRODUCTION else ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # OpClass in index expressions (the trigram search indexes of cases.0012); its lookups
    # and type handlers apply to PostgreSQL connections only, SQLite is unaffected.
    "django.contrib.postgres",
    "axes",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_fsm",
    "django_q",
    "cases",
    "approvals",
    "reconciliation",
    # The tooling that proves the product (drills, bench, simulation); a production process
    # loads none of its hooks (lab/apps.py).
    "lab",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Content-Security-Policy and Permissions-Policy on every response (see below).
    "csp.middleware.CSPMiddleware",
    "config.headers.PermissionsPolicyMiddleware",
    # Static files from STATIC_ROOT (collectstatic), before sessions and auth do any work.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # A view's refused database connection is a 503 with Retry-After (config.unavailable).
    "config.unavailable.DatabaseUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # An API path that is no endpoint: JSON 404, before APPEND_SLASH redirects (config.api_paths).
    "config.api_paths.ApiPathMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Each person's teams read once per request: every panel of a page is scoped by them.
    "cases.middleware.TeamIdsPerRequestMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

CONN_MAX_AGE = env_int("CONN_MAX_AGE", 600, minimum=0)
# When the database refuses connections, requests are answered 503 with this Retry-After.
DB_UNAVAILABLE_RETRY_AFTER_SECONDS = env_int("DB_UNAVAILABLE_RETRY_AFTER_SECONDS", 5, minimum=1)
# psycopg's connection pool (Django 5.2, PostgreSQL), for web processes: at most
# DB_POOL_MAX_SIZE connections per process, requests beyond it wait up to DB_POOL_TIMEOUT
# seconds for one (then 503), and every connection is checked before a request gets it. Off
# (0) by default. Not in worker clusters: django-q2 forks its workers from a process that has
# used the database, and a pool must not cross a fork.
DB_POOL_MAX_SIZE = env_int("DB_POOL_MAX_SIZE", 0, minimum=0)
DB_POOL_MIN_SIZE = env_int("DB_POOL_MIN_SIZE", min(1, DB_POOL_MAX_SIZE), minimum=0)
DB_POOL_TIMEOUT = env_float("DB_POOL_TIMEOUT", 5.0, minimum=0.1)
if DB_POOL_MAX_SIZE and DB_POOL_MIN_SIZE > DB_POOL_MAX_SIZE:
    raise ImproperlyConfigured("DB_POOL_MIN_SIZE must not exceed DB_POOL_MAX_SIZE.")
# A worker process (a cluster, or one worker): the database settings below differ for it.
WORKER_PROCESS = sys.argv[1:2] in (["qcluster"], ["run_cluster"], ["run_worker"])
if DB_POOL_MAX_SIZE and WORKER_PROCESS:
    raise ImproperlyConfigured("DB_POOL_MAX_SIZE is for web processes, not worker processes.")
DATABASES = {
    "default": parse_database_url(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'holdfast.sqlite3'}"),
        # A pool keeps its connections itself (Django refuses a pool with persistent ones).
        conn_max_age=0 if DB_POOL_MAX_SIZE else CONN_MAX_AGE,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and DB_POOL_MAX_SIZE:
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": DB_POOL_MIN_SIZE,
        "max_size": DB_POOL_MAX_SIZE,
        "timeout": DB_POOL_TIMEOUT,
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Server-side prepared statements for statements a connection runs again (psycopg prepares
    # one after it ran DB_PREPARE_THRESHOLD times): the claim's read costs ~3 ms to plan and
    # 0.6 ms to run, so planning it once per connection is most of a claim. Django turns them
    # off by default for transaction-pooling proxies; behind such a proxy without support for
    # prepared statements, set DB_PREPARE_THRESHOLD=0 (never prepare).
    _prepare = env_int("DB_PREPARE_THRESHOLD", 5, minimum=0)
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = _prepare or None
    # Every statement bound on the server, so that a worker's repeated statements are prepared
    # and planned once per connection too, not only the claim's (Django binds on the client by
    # default: the values are part of the text). In-process apply_due on the bench database:
    # 14.1 and 12.0 ms an apply with it against 17.8 and 14.3 ms without, runs alternated.
    # DB_SERVER_SIDE_BINDING=0 binds on the client again.
    if env_bool("DB_SERVER_SIDE_BINDING", True):
        DATABASES["default"]["OPTIONS"]["server_side_binding"] = True
    # How PostgreSQL plans a prepared statement. A worker repeats the same few statements, whose
    # one plan fits every value: it keeps PostgreSQL's choice (``auto``: a generic plan, made
    # once, after five runs). A page's statements are planned for their values each time: a
    # generic plan ignores them, and the approver queue's count, given the generic plan on a
    # served connection's eleventh request, went from 2 ms to 232 ms at 1M cases (the status
    # asked for is rare, the plan does not know it); every page of it, and under twenty users
    # every page behind it, waited (``make bench --load``).
    _plan_cache = env_str(
        "DB_PLAN_CACHE_MODE", "auto" if WORKER_PROCESS else "force_custom_plan"
    ).strip()
    if _plan_cache not in ("auto", "force_custom_plan", "force_generic_plan"):
        raise ImproperlyConfigured(
            "DB_PLAN_CACHE_MODE must be auto, force_custom_plan or force_generic_plan."
        )
    # No parallel workers for one statement by default: a page's query is short, and at 1M
    # cases PostgreSQL gave a few of them a parallel plan whose workers took longer to start
    # than the walk itself (the failed inbound events' count: 10.5 ms parallel, 4.1 ms not;
    # the past week's: 8.7 and 5.9), and under load they take the cores the other requests
    # and the workers need. A host with spare cores and long reports may allow some
    # (DB_PARALLEL_WORKERS_PER_QUERY=2).
    _parallel = env_int("DB_PARALLEL_WORKERS_PER_QUERY", 0, minimum=0)
    # No JIT compilation by default. PostgreSQL compiles a statement whose estimated cost passes
    # jit_above_cost, and its estimate is the table statistics', not the rows': the decision
    # page's approvers (approvals.selectors.eligible_approvers: six joins, three users) were
    # estimated past it on a desk whose tables were new, and each asking compiled 105 functions
    # for 640 ms of CPU to read three rows in 0.2 ms. Holdfast's statements are short; none needs
    # it. DB_JIT=1 gives the choice back to the server's settings.
    _jit = "" if env_bool("DB_JIT", False) else " -c jit=off"
    DATABASES["default"]["OPTIONS"]["options"] = (
        f"-c plan_cache_mode={_plan_cache} -c max_parallel_workers_per_gather={_parallel}{_jit}"
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# The inbound events page's indexes carry included columns (PostgreSQL's covering index, so the
# page's visibility check reads no table row); SQLite builds the same indexes without them, as
# this warning says: nothing to act on.
SILENCED_SYSTEM_CHECKS = ["models.W040"]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
# One date form on every page, with its zone (``config/formats``).
FORMAT_MODULE_PATH = ["config.formats"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(VAR_DIR / "static")))
# WhiteNoise serves the static files in every process. In production they come from STATIC_ROOT,
# filled by ``manage.py collectstatic`` with compressed copies and hashed names (cached for a
# year); outside production straight from the apps, so development and tests need no
# collectstatic.
if PRODUCTION:
    STORAGES = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
else:
    WHITENOISE_USE_FINDERS = True
    WHITENOISE_AUTOREFRESH = True

LOGIN_URL = "admin:login"

# --- Login lockout (django-axes): failures per username from one address --------------------
# The axes backend comes first: it refuses a locked-out login before any password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("AXES_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "axes/lockout.html"
AXES_VERBOSE = False  # no start-up banner on every management command

# --- Caches: the API throttles count requests in their own cache -----------------------------
# Without Redis each process counts on its own (locmem); with REDIS_URL all processes share it.
_THROTTLE_REDIS = env_str("REDIS_URL", "")
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "throttle": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": _THROTTLE_REDIS}
        if _THROTTLE_REDIS
        else {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "holdfast-throttle",
        }
    ),
}

# --- Email: the customer's notification and staff notifications, through Django's backend --
# SMTP whenever EMAIL_HOST is set (and in production); otherwise (``make run``) mail is printed
# on the console. EMAIL_BACKEND overrides either.
EMAIL_HOST = env_str("EMAIL_HOST", "")
EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if PRODUCTION or EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_HOST = EMAIL_HOST or "localhost"
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
# Seconds for one SMTP connection's calls: a silent mail server never holds a worker for long.
EMAIL_TIMEOUT = env_float("EMAIL_TIMEOUT", 10.0, minimum=0.1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "holdfast@localhost")
# Where Holdfast's pages are reached: the links in staff mails are absolute from here.
_PUBLIC_HOST = next((h for h in ALLOWED_HOSTS if h != "*" and not h.startswith(".")), "")
HOLDFAST_BASE_URL = env_url(
    "HOLDFAST_BASE_URL",
    f"https://{_PUBLIC_HOST}" if PRODUCTION and _PUBLIC_HOST else "http://127.0.0.1:8000",
)


# --- REST API ----------------------------------------------------------------------------
def _throttle_rate(name: str, default: str) -> str | None:
    """A DRF rate such as ``600/min`` from the environment; ``off`` means no limit."""
    value = env_str(name, default).strip()
    if value.lower() == "off":
        return None
    count, _, period = value.partition("/")
    if not count.isdigit() or int(count) < 1 or period[:1] not in {"s", "m", "h", "d"}:
        raise ImproperlyConfigured(f"{name}={value!r}: use a rate like 600/min, or off.")
    return value


REST_FRAMEWORK = {
    # Token first: a request without credentials is answered 401 with
    # ``WWW-Authenticate: Token``; the session (with CSRF) still serves the browsable API.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "config.api_auth.BearerTokenAuthentication",  # the same token, as OAuth sends it
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_THROTTLE_CLASSES": [
        "cases.throttling.UserRateThrottle",
        "cases.throttling.AnonRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "user": _throttle_rate("API_THROTTLE_USER", "600/min"),
        "anon": _throttle_rate("API_THROTTLE_ANON", "60/min"),
        "hooks": _throttle_rate("API_THROTTLE_HOOKS", "1200/min"),
    },
    # Reverse proxies in front of Holdfast: 0 counts the connecting address and ignores a
    # client's X-Forwarded-For (which anyone can forge to dodge the anonymous rate).
    "NUM_PROXIES": env_int("API_NUM_PROXIES", 0, minimum=0),
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "cases.api_errors.exception_handler",
    # JSON only in production; the browsable HTML API helps development alone.
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        *([] if PRODUCTION else ["rest_framework.renderers.BrowsableAPIRenderer"]),
    ],
    # JSON only (the schema publishes JSON request bodies alone, so generated clients send
    # JSON); nested deeper than the parser allows is a 400, not a RecursionError.
    "DEFAULT_PARSER_CLASSES": ["cases.parsers.BoundedJSONParser"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Holdfast API",
    "DESCRIPTION": "Cases that outlive the worker that started them.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Request bodies get their own components, so read-only fields and non-blank strings
    # (minLength) are stated exactly for what a client sends.
    "COMPONENT_SPLIT_REQUEST": True,
    # The API docs work on a closed network: Swagger UI is served from our static files.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # OpenAPI links from an answer to the operations its values lead to (config.schema_links).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "config.schema_links.add_links",
        "config.schema_bodies.close_intake_bodies",
    ],
    # Without deep links an operation's summary button holds no link of its own (a link
    # inside a button is a nested control that screen readers do not announce).
    "SWAGGER_UI_SETTINGS": {
        "deepLinking": False,
        "persistAuthorization": True,
        "displayOperationId": True,
    },
    "ENUM_NAME_OVERRIDES": {
        "CaseStatusEnum": "cases.models.Status",
        "ProposalStatusEnum": "approvals.models.Proposal.Status",
    },
}

# --- The order system --------------------------------------------------------------------
ORDER_SYSTEM_URL = env_url("ORDER_SYSTEM_URL", "http://127.0.0.1:8100")
# Seconds. httpx is told each one explicitly; the client never retries (see reconciliation).
ORDER_SYSTEM_TIMEOUTS = {
    "connect": env_float("ORDER_SYSTEM_CONNECT_TIMEOUT", 3.0, minimum=0.1),
    "read": env_float("ORDER_SYSTEM_READ_TIMEOUT", 10.0, minimum=0.1),
    "write": env_float("ORDER_SYSTEM_WRITE_TIMEOUT", 10.0, minimum=0.1),
    "pool": env_float("ORDER_SYSTEM_POOL_TIMEOUT", 3.0, minimum=0.1),
}
# Orders reserved for the capability probe, which really changes them. No case may use one.
ORDER_SYSTEM_SANDBOX_ORDERS = env_list("ORDER_SYSTEM_SANDBOX_ORDERS", ["ORD-PROBE"])
# Shared with the order system: it verifies the approval grants Holdfast signs.
APPROVAL_GRANT_KEY = _secret("APPROVAL_GRANT_KEY", "dev-approval-grant-key")
# Shared with the order system: it signs the webhooks Holdfast receives.
ORDER_WEBHOOK_SECRET = _secret("ORDER_WEBHOOK_SECRET", "dev-webhook-secret")
# A webhook's signed timestamp may be this far from Holdfast's clock, either way (seconds):
# an older delivery is a replay, refused 401 (the order system signs every attempt anew).
ORDER_WEBHOOK_TOLERANCE_SECONDS = env_int("ORDER_WEBHOOK_TOLERANCE_SECONDS", 300, minimum=1)
# Shared with the order system: the bearer credential on every call Holdfast makes to it (the
# order system reads the same value as ORDERS_API_TOKEN).
ORDER_SYSTEM_TOKEN = _secret("ORDER_SYSTEM_TOKEN", "dev-order-system-token")

# --- Case policy ---------------------------------------------------------------------------
CASE_RETENTION_DAYS = env_int("CASE_RETENTION_DAYS", 365, minimum=1)
# The prefix every reference had before each team had its own (cases.references): the team
# that kept it at migration (cases 0026) keeps its operation keys' old shape (DATE-41-1).
CASE_REFERENCE_PREFIX = env_str("CASE_REFERENCE_PREFIX", "D")
# A delivery date asked for or proposed is today or later, and at most this many days ahead.
DELIVERY_DATE_HORIZON_DAYS = env_int("DELIVERY_DATE_HORIZON_DAYS", 365, minimum=1)
# The change kinds this desk offers (``cases.kinds``): dotted paths of ChangeKind classes,
# registered in this order when the cases app is ready.
HOLDFAST_CHANGE_KINDS = env_list(
    "HOLDFAST_CHANGE_KINDS",
    [
        "cases.kinds.delivery_date.DeliveryDate",
        "cases.kinds.shipping_address.ShippingAddress",
        "cases.kinds.order_cancellation.OrderCancellation",
    ],
)

# --- django-q2 -----------------------------------------------------------------------------
# One retry layer: Holdfast's services decide about retries. django-q2 must neither re-deliver
# a running task (retry > timeout) nor retry a failed one by itself (max_attempts=1).
REDIS_URL = env_str("REDIS_URL", "")


class QClusterOptions(TypedDict):
    """The django-q2 options Holdfast sets (and reads back: ``timeout`` in the sweeper); exactly
    one broker, ``redis`` or ``orm``."""

    name: str
    workers: int
    timeout: int
    retry: int
    max_attempts: int
    ack_failures: bool
    save_limit: int
    catch_up: bool
    poll: float
    label: str
    redis: NotRequired[str]
    orm: NotRequired[str]
    broker_class: NotRequired[str]


Q_CLUSTER: QClusterOptions = {
    # Hosts that share a Redis queue share the name (its list, its stats, its signing salt).
    "name": env_str("Q_CLUSTER_NAME", "holdfast"),
    # One more than Q_WORKERS: the sweeper task (reconciliation.sweep) keeps one busy.
    "workers": env_int("Q_WORKERS", 2, minimum=1) + 1,
    "timeout": env_int("Q_TIMEOUT", 60, minimum=1),
    "retry": env_int("Q_RETRY", 120, minimum=2),
    "max_attempts": 1,
    "ack_failures": True,
    # save_limit=-1 stores no success rows: the default (250) locks and trims the success table
    # on every task, which measured about 3x slower (0 would keep every row forever). Failed
    # tasks are always kept; the outcome of each task is in the case's own audit trail.
    "save_limit": -1,
    "catch_up": False,
    # How long the database broker waits before it looks again at an empty queue: the wait
    # between an approval's enqueue and the apply's start. The Redis broker blocks on its list
    # and does not wait. An empty look is one small read.
    "poll": env_float("Q_POLL", 0.2, minimum=0.01),
    "label": "Worker tasks",
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"
    # The ORM broker that wakes its cluster on each enqueue (PostgreSQL LISTEN/NOTIFY) instead
    # of at its next poll: an approval's apply starts within milliseconds (cases.broker).
    # Q_LISTEN=0 turns it off (a pooler in transaction mode, such as PgBouncer's, drops LISTEN).
    if env_bool("Q_LISTEN", True):
        Q_CLUSTER["broker_class"] = "cases.broker.NotifyingORM"
if Q_CLUSTER["retry"] <= Q_CLUSTER["timeout"]:
    raise ImproperlyConfigured("Q_RETRY must exceed Q_TIMEOUT (no concurrent re-delivery).")
# The cluster's liveness (manage.py run_cluster, reconciliation.liveness): after this long
# without a task started, the watchdog queues a probe task; when a probe has waited
# Q_LIVENESS_SECONDS with no task started since, the cluster is wedged (a worker died holding
# the task queue's lock): it is killed and run_cluster exits 3 for its process manager to
# restart it. More than Q_TIMEOUT: a healthy cluster frees a worker within the task timeout.
# 0 turns the watchdog off.
Q_LIVENESS_SECONDS = env_float("Q_LIVENESS_SECONDS", Q_CLUSTER["timeout"] + 30.0, minimum=0.0)
Q_LIVENESS_PROBE_SECONDS = env_float("Q_LIVENESS_PROBE_SECONDS", 10.0, minimum=0.1)
if Q_LIVENESS_SECONDS and Q_CLUSTER["timeout"] >= Q_LIVENESS_SECONDS:
    raise ImproperlyConfigured("Q_LIVENESS_SECONDS must exceed Q_TIMEOUT (or be 0: off).")
# The workers give way to people on a shared host (reconciliation.priority): each worker
# process, and the cluster's own session when the cluster leads it, runs at this nice value
# (0-19; 0 leaves the priority as it is). Linux shares the CPU between sessions before
# processes: a cluster in a session of its own (make run, a bench, setsid) took an equal share
# with the web app's, and the pages people wait on queued behind a draining backlog. The test
# suite runs workers beside its own runners, not people: 0 there.
WORKER_CPU_NICE = env_int("WORKER_CPU_NICE", 0 if DJANGO_ENV == "test" else 10, minimum=0)
if WORKER_CPU_NICE > 19:
    raise ImproperlyConfigured(f"WORKER_CPU_NICE={WORKER_CPU_NICE}: at most 19 (the lowest).")

# --- Logging -------------------------------------------------------------------------------
# One line per record on standard error: JSON objects (production's default) or text. Every
# line carries the case, operation, attempt, fencing token and worker it is about
# (cases.logcontext; config.logs).
LOG_FORMAT = env_str("LOG_FORMAT", "json" if PRODUCTION else "text")
if LOG_FORMAT not in {"json", "text"}:
    raise ImproperlyConfigured(f"LOG_FORMAT={LOG_FORMAT!r}: use json or text.")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "cases.logcontext.ContextFilter"}},
    "formatters": {
        "json": {"()": "config.logs.JsonFormatter"},
        "text": {"()": "config.logs.TextFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["context"],
        }
    },
    # django-q2 adds a handler of its own only when none is configured: its lines come here.
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}

# --- Metrics (/metrics, Prometheus text format) ---------------------------------------------
# Open in development (unless METRICS_TOKEN is set); in production it needs "Authorization:
# Bearer <METRICS_TOKEN>" and a directory shared by the host's processes
# (PROMETHEUS_MULTIPROC_DIR, read by prometheus-client itself: see reconciliation.metrics).
# METRICS_ENABLED=0 answers 404 and needs neither.
METRICS_ENABLED = env_bool("METRICS_ENABLED", True)
METRICS_TOKEN = ""
if METRICS_ENABLED:
    # Development: open unless a token is set; production: required, at least 32 characters.
    METRICS_TOKEN = env_secret("METRICS_TOKEN", "", production=PRODUCTION)
    if PRODUCTION:
        _metrics_dir = env_str("PROMETHEUS_MULTIPROC_DIR", "")
        if not _metrics_dir or not Path(_metrics_dir).is_dir():
            raise ImproperlyConfigured(
                "Set PROMETHEUS_MULTIPROC_DIR to an existing directory that every Holdfast "
                "process of the host shares (or METRICS_ENABLED=0) when DJANGO_ENV=production."
            )

# --- What a page may do in the browser -------------------------------------------------------
# Scripts only from Holdfast's own origin (no inline script, no eval): the admin, the live
# pages (cases/static/holdfast/live.js), Swagger UI (drf-spectacular-sidecar, its init script
# served as a file: SpectacularSwaggerSplitView) and the browser suite run under it with no
# violation (tests/browser/test_content_security_policy.py). Styles allow 'unsafe-inline':
# Django's admin, Swagger UI and Holdfast's templates set style attributes and <style> blocks.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF, "'unsafe-inline'"],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}
# Features no page uses, refused to every frame (config.headers).
PERMISSIONS_POLICY = [
    (feature, ())
    for feature in (
        "accelerometer",
        "camera",
        "display-capture",
        "geolocation",
        "gyroscope",
        "magnetometer",
        "microphone",
        "payment",
        "usb",
    )
]

# --- Production hardening (manage.py check --deploy stays clean) ---------------------------
if PRODUCTION:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    # Probes inside the network speak plain HTTP to the health endpoints (config.health).
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    X_FRAME_OPTIONS = "DENY"
    if not ALLOWED_HOSTS:
        raise ImproperlyConfigured("Set ALLOWED_HOSTS when DJANGO_ENV=production.")

# --- Approval policy -----------------------------------------------------------------------
APPROVAL_DEFAULT_MINUTES = env_int("APPROVAL_DEFAULT_MINUTES", 240, minimum=1)
APPROVAL_MAX_MINUTES = env_int("APPROVAL_MAX_MINUTES", 24 * 60, minimum=1)
if APPROVAL_MAX_MINUTES < APPROVAL_DEFAULT_MINUTES:
    raise ImproperlyConfigured("APPROVAL_MAX_MINUTES must not be below APPROVAL_DEFAULT_MINUTES.")
# A proposal submitted for review is overdue (the approvers are late) after this long.
APPROVAL_REVIEW_SLA_MINUTES = env_int("APPROVAL_REVIEW_SLA_MINUTES", 60, minimum=1)
# A follow-up time is "overdue" only once it is this late: work due now is not yet late.
FOLLOW_UP_GRACE_MINUTES = env_int("FOLLOW_UP_GRACE_MINUTES", 5, minimum=0)

# --- Follow-ups: how long a person may take to answer each kind of wait ---------------------
# The defaults of the follow-up policy (leads override them per reason and change kind in the
# admin: cases.FollowUpPolicy). FOLLOW_UP_<REASON>_MINUTES; a review wait's default is
# APPROVAL_REVIEW_SLA_MINUTES (above).
FOLLOW_UP_MINUTES = {
    "unverified": env_int("FOLLOW_UP_UNVERIFIED_MINUTES", 240, minimum=1),
    "draft": env_int("FOLLOW_UP_DRAFT_MINUTES", 240, minimum=1),
    "rejected": env_int("FOLLOW_UP_REJECTED_MINUTES", 240, minimum=1),
    "supervised": env_int("FOLLOW_UP_SUPERVISED_MINUTES", 60, minimum=1),
    "held": env_int("FOLLOW_UP_HELD_MINUTES", 60, minimum=1),
    "needs_attention": env_int("FOLLOW_UP_NEEDS_ATTENTION_MINUTES", 120, minimum=1),
    "customer": env_int("FOLLOW_UP_CUSTOMER_MINUTES", 1440, minimum=1),
    "other": env_int("FOLLOW_UP_OTHER_MINUTES", 240, minimum=1),
}
# The last part of a follow-up's time, in percent, in which it shows as "at risk".
FOLLOW_UP_AT_RISK_PERCENT = env_int("FOLLOW_UP_AT_RISK_PERCENT", 25, minimum=0)
if FOLLOW_UP_AT_RISK_PERCENT > 99:
    raise ImproperlyConfigured("FOLLOW_UP_AT_RISK_PERCENT must be below 100.")

# --- Staff notifications (cases.notify, cases.delivery) ---------------------------------------
# Tries of one notification's email before it is left unsent (visible in the inbox); between
# tries the bounded backoff of RETRY_BASE_SECONDS / RETRY_MAX_SECONDS.
NOTIFICATION_EMAIL_ATTEMPT_LIMIT = env_int("NOTIFICATION_EMAIL_ATTEMPT_LIMIT", 8, minimum=1)
# How long one delivery may take before the sweep treats its worker as gone: a mail not yet
# begun is handed out again; one whose send had begun may have gone and is not sent again.
NOTIFICATION_SEND_LEASE_SECONDS = env_float(
    "NOTIFICATION_SEND_LEASE_SECONDS", max(60.0, 3 * EMAIL_TIMEOUT), minimum=1.0
)
# The local hour (TIME_ZONE) at which daily digests go out.
NOTIFICATION_DIGEST_HOUR = env_int("NOTIFICATION_DIGEST_HOUR", 7, minimum=0)
if NOTIFICATION_DIGEST_HOUR > 23:
    raise ImproperlyConfigured("NOTIFICATION_DIGEST_HOUR must be 0-23.")

# --- Retries: one bounded policy, scheduled through the case's next check time -------------
RETRY_BASE_SECONDS = env_float("RETRY_BASE_SECONDS", 5.0, minimum=0.0)
RETRY_MAX_SECONDS = env_float("RETRY_MAX_SECONDS", 600.0, minimum=1.0)
RETRY_JITTER = env_float("RETRY_JITTER", 0.2, minimum=0.0)
# Consecutive failed source checks before the case goes to a person (needs attention).
SOURCE_CHECK_ATTEMPT_LIMIT = env_int("SOURCE_CHECK_ATTEMPT_LIMIT", 5, minimum=1)
# Consecutive inconclusive settlements of a held case before it is flagged for a person (it
# stays held: uncertainty is never resolved by a write).
RECONCILE_ATTEMPT_LIMIT = env_int("RECONCILE_ATTEMPT_LIMIT", 10, minimum=1)
# Processing attempts of one inbound event before it is left failed for a person (or a resend).
INBOUND_ATTEMPT_LIMIT = env_int("INBOUND_ATTEMPT_LIMIT", 10, minimum=1)


# --- Leases per kind of work -------------------------------------------------------------
# lease_seconds: how long a claim (an apply attempt) or a dispatched task holds the case before
# the watchdog / the dispatcher treat the worker as missing. heartbeat_seconds: how often a
# running worker renews its lease, also during a long call to the order system.
def _lease(kind: str, lease: float, heartbeat: float) -> dict[str, float]:
    prefix = kind.upper()
    values = {
        "lease_seconds": env_float(f"{prefix}_LEASE_SECONDS", lease, minimum=0.5),
        "heartbeat_seconds": env_float(f"{prefix}_HEARTBEAT_SECONDS", heartbeat, minimum=0.1),
    }
    if values["heartbeat_seconds"] >= values["lease_seconds"]:
        raise ImproperlyConfigured(f"{prefix}: the heartbeat must come before the lease runs out.")
    return values


LEASES = {
    "source_check": _lease("source_check", 60.0, 20.0),
    "prepare": _lease("prepare", 60.0, 20.0),
    "apply": _lease("apply", 60.0, 15.0),
    "reconcile": _lease("reconcile", 120.0, 30.0),
    # Processing one inbound order event: past it, the sweep takes a stranded event again.
    "inbound": _lease("inbound", 60.0, 20.0),
}
# How often the sweep (lease watchdog, approval expiry, inbound re-drive, dispatcher) runs:
# derived from the shortest lease, so a case whose worker died stays applying at most about
# this long past its lease. django-q2 schedules tick only every ~30 s, so the cluster runs the
# sweep as a long-lived task (reconciliation.sweep), and run_worker in its own loop.
SHORTEST_LEASE_SECONDS = min(lease["lease_seconds"] for lease in LEASES.values())
SWEEP_INTERVAL_SECONDS = env_float(
    "SWEEP_INTERVAL_SECONDS",
    max(1.0, min(5.0, SHORTEST_LEASE_SECONDS / 2)),
    minimum=0.1,
)
if SWEEP_INTERVAL_SECONDS > SHORTEST_LEASE_SECONDS:
    raise ImproperlyConfigured("SWEEP_INTERVAL_SECONDS must not exceed the shortest lease.")
# After its case, an apply task takes the next due ready case at once, for at most this long
# (then the dispatcher's next pass goes on); 0 turns it off. A third of the task timeout leaves
# the case in flight time to finish before django-q2 would kill the task.
APPLY_DRAIN_SECONDS = env_float(
    "APPLY_DRAIN_SECONDS", min(20.0, Q_CLUSTER["timeout"] / 3), minimum=0.0
)
if Q_CLUSTER["timeout"] / 2 < APPLY_DRAIN_SECONDS:
    raise ImproperlyConfigured("APPLY_DRAIN_SECONDS must stay under half of Q_TIMEOUT.")
# The cluster's apply tasks send the customer's notification as its own task after the answer
# (reconciliation.tasks.notify_case) instead of within the apply task. Off by default: the
# queued step waits behind every apply task queued before it, and under a backlog the lease
# renewed with the answer can run out first (the watchdog then resumes the case with a second
# attempt; still one change, but more work). Measure before turning it on.
NOTIFY_AS_OWN_TASK = env_bool("NOTIFY_AS_OWN_TASK", False)
# Test-only: prepare_proposal sleeps this long first, so a drill can kill its worker mid-task.
# Off (0) by default and refused in production.
PREPARE_TEST_DELAY_SECONDS = env_float("PREPARE_TEST_DELAY_SECONDS", 0.0, minimum=0.0)
if PRODUCTION and PREPARE_TEST_DELAY_SECONDS:
    raise ImproperlyConfigured("PREPARE_TEST_DELAY_SECONDS is for tests only.")
ATTEMPT_LIMIT = env_int("ATTEMPT_LIMIT", 5, minimum=1)
# After a hold (a worker's lease ran out, a restore), how soon reconciliation looks first. 0:
# the same sweep pass dispatches it, so a killed worker's case is taken up again within its
# lease plus a sweep or two (tests/reconciliation/test_reclaim_after_kill.py). Reconciliation
# fences the operation before it looks, so a worker that was only paused cannot write after
# it; waiting longer only leaves the case stranded (30 s measured 37 s from kill to re-take).
HOLD_FIRST_CHECK_SECONDS = env_float("HOLD_FIRST_CHECK_SECONDS", 0.0, minimum=0.0)
# Where this host remembers the database epoch it last saw (restore detection).
HOLDFAST_STATE_DIR = env_str("HOLDFAST_STATE_DIR", str(VAR_DIR))
