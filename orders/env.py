"""Typed readers for the order system's settings, from the environment.

The order system is a separate service: it imports nothing of Holdfast, so these helpers are its
own (the same semantics as Holdfast's ``config.env``). Each fails loudly
(``ImproperlyConfigured``) on a value it cannot parse.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_MISSING = object()


def env_str(name: str, default: str | object = _MISSING) -> str:
    value = os.environ.get(name)
    if value is None:
        if default is _MISSING:
            raise ImproperlyConfigured(f"Set the {name} environment variable.")
        return str(default)
    return value


SECRET_MIN_LENGTH = 32
SECRET_HOWTO = 'python -c "import secrets; print(secrets.token_urlsafe(48))"'  # noqa: S105


def env_secret(name: str, dev_default: str, *, production: bool) -> str:
    """A shared secret from the environment.

    In production the variable is required and must be neither the development default nor
    shorter than ``SECRET_MIN_LENGTH`` characters. Elsewhere a missing variable means the
    development default. A variable that is set but empty is refused everywhere: it is a typo,
    and an empty HMAC key is one anybody can compute.
    """
    value = os.environ.get(name)
    make_one = f"Make one with: {SECRET_HOWTO}"
    if value is None:
        if production:
            raise ImproperlyConfigured(f"Set {name} when DJANGO_ENV=production. {make_one}")
        return dev_default
    if not value.strip():
        raise ImproperlyConfigured(f"{name} is set but empty. {make_one}")
    if production:
        if value == dev_default:
            raise ImproperlyConfigured(
                f"{name} is the development default, refused when DJANGO_ENV=production. {make_one}"
            )
        if len(value) < SECRET_MIN_LENGTH:
            raise ImproperlyConfigured(
                f"{name} is shorter than {SECRET_MIN_LENGTH} characters, refused when "
                f"DJANGO_ENV=production. {make_one}"
            )
    return value


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use 1/0, true/false).")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer.") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum of {minimum}.")
    return number


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number.") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum of {minimum}.")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_url(name: str, default: str) -> str:
    value = os.environ.get(name, default).strip()
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise ImproperlyConfigured(f"{name}={value!r} is not an http(s) URL.")
    return value.rstrip("/")


SQLITE_OPTIONS = {
    # IMMEDIATE takes the write lock at BEGIN: read-then-write transactions under contention
    # wait for the busy timeout instead of failing with "database is locked".
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
    "init_command": (
        "PRAGMA journal_mode=WAL;PRAGMA synchronous=NORMAL;"
        "PRAGMA busy_timeout=20000;PRAGMA foreign_keys=ON;"
    ),
}


def parse_database_url(url: str, *, conn_max_age: int = 600) -> dict:
    """Turn ``sqlite:///path`` or ``postgres://user:pw@host:port/name`` into a DATABASES entry."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        path = unquote(parts.path)
        # sqlite:////abs/path.sqlite3 is absolute; sqlite:///rel/path.sqlite3 is relative.
        name = path if url.startswith("sqlite:////") else (path.lstrip("/") or ":memory:")
        if name != ":memory:":
            Path(name).parent.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name,
            # A server thread keeps its connection across the requests of one keep-alive
            # connection (no PRAGMAs per request); it is closed when the thread ends.
            "CONN_MAX_AGE": conn_max_age,
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": dict(SQLITE_OPTIONS),
            "TEST": {"NAME": None},
        }
    if parts.scheme in {"postgres", "postgresql", "pgsql"}:
        name = unquote(parts.path.lstrip("/"))
        if not name:
            raise ImproperlyConfigured(f"Database URL {url!r} names no database.")
        options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "CONN_MAX_AGE": conn_max_age,
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": options,
        }
    raise ImproperlyConfigured(
        f"Unsupported database URL {url!r}: use sqlite:///path or postgres://user@host/name."
    )
