"""Production refuses weak secrets and demo tooling, in Holdfast and in the order system.

Each case starts a fresh interpreter with ``DJANGO_ENV=production`` and a clean environment, so
the settings module under test reads only what the test gives it. Nothing here imports either
settings module in-process: the file runs under either suite.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOWTO = "secrets.token_urlsafe(48)"

# The development defaults each settings module falls back to outside production.
HOLDFAST_DEFAULTS = {
    "SECRET_KEY": "django-insecure-holdfast-development-only-key-0123456789",
    "APPROVAL_GRANT_KEY": "dev-approval-grant-key",
    "ORDER_WEBHOOK_SECRET": "dev-webhook-secret",
    "ORDER_SYSTEM_TOKEN": "dev-order-system-token",
    # /metrics is open in development (no token): production requires one.
    "METRICS_TOKEN": "",
}
ORDERS_DEFAULTS = {
    "SECRET_KEY": "dev-insecure-orders-secret-key",
    "APPROVAL_GRANT_KEY": "dev-approval-grant-key",
    "ORDER_WEBHOOK_SECRET": "dev-webhook-secret",
    "ORDERS_API_TOKEN": "dev-order-system-token",
}
MODULES = {"config.settings": HOLDFAST_DEFAULTS, "orders.settings": ORDERS_DEFAULTS}
_CLEARED = {
    "DJANGO_SETTINGS_MODULE",
    "DJANGO_ENV",
    "DEBUG",
    "DATABASE_URL",
    "ALLOWED_HOSTS",
    *HOLDFAST_DEFAULTS,
    *ORDERS_DEFAULTS,
}


def _env(module: str, tmp_path: Path, **overrides: str | None) -> dict[str, str]:
    """A production environment with good secrets for ``module``; ``None`` removes a name."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in _CLEARED and not key.startswith("ORDERS_")
    }
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": module,
            "DJANGO_ENV": "production",
            "ALLOWED_HOSTS": "holdfast.example",
            "DATABASE_URL": f"sqlite:///{tmp_path / 'holdfast.sqlite3'}",
            "ORDERS_DATABASE_URL": f"sqlite:///{tmp_path / 'orders.sqlite3'}",
            "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        }
    )
    env.update({name: secrets.token_urlsafe(48) for name in MODULES[module]})
    env.update(overrides)
    return {key: value for key, value in env.items() if value is not None}


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _setup(env: dict[str, str]) -> subprocess.CompletedProcess:
    return _run(env, "-c", "import django; django.setup()")


BAD_VALUES = {
    "missing": lambda default: None,
    "empty": lambda default: "",
    "blank": lambda default: "   ",
    "dev default": lambda default: default,
    "31 characters": lambda default: "k" * 31,
}
CASES = [
    pytest.param(module, name, kind, id=f"{module.split('.')[0]}-{name}-{kind}")
    for module, defaults in MODULES.items()
    for name in defaults
    for kind in BAD_VALUES
]


@pytest.mark.parametrize(("module", "name", "kind"), CASES)
def test_production_refuses_a_weak_secret_and_says_how_to_make_one(tmp_path, module, name, kind):
    value = BAD_VALUES[kind](MODULES[module][name])

    result = _setup(_env(module, tmp_path, **{name: value}))

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert name in result.stderr
    assert HOWTO in result.stderr


@pytest.mark.parametrize("module", list(MODULES))
def test_production_starts_with_strong_secrets_of_32_characters(tmp_path, module):
    env = _env(module, tmp_path, **{name: "s" * 32 for name in MODULES[module]})

    result = _setup(env)

    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("module", list(MODULES))
def test_development_still_runs_on_the_development_defaults(tmp_path, module):
    env = _env(module, tmp_path, DJANGO_ENV=None, **dict.fromkeys(MODULES[module]))
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.APPROVAL_GRANT_KEY)"
    )

    result = _run(env, "-c", code)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "dev-approval-grant-key"


def test_production_metrics_need_a_directory_the_hosts_processes_share(tmp_path):
    missing = _setup(_env("config.settings", tmp_path, PROMETHEUS_MULTIPROC_DIR=None))
    not_a_directory = _setup(
        _env("config.settings", tmp_path, PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "nowhere"))
    )

    for result in (missing, not_a_directory):
        assert result.returncode != 0
        assert "PROMETHEUS_MULTIPROC_DIR" in result.stderr


def test_production_without_metrics_needs_neither_their_token_nor_their_directory(tmp_path):
    env = _env(
        "config.settings",
        tmp_path,
        METRICS_ENABLED="0",
        METRICS_TOKEN=None,
        PROMETHEUS_MULTIPROC_DIR=None,
    )

    result = _setup(env)

    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("environment", "renderers"),
    [
        ("production", ["JSONRenderer"]),
        (None, ["JSONRenderer", "BrowsableAPIRenderer"]),
    ],
)
def test_the_browsable_api_is_served_in_development_only(tmp_path, environment, renderers):
    code = (
        "import django; django.setup(); from rest_framework.settings import api_settings; "
        "print(' '.join(r.__name__ for r in api_settings.DEFAULT_RENDERER_CLASSES))"
    )

    result = _run(_env("config.settings", tmp_path, DJANGO_ENV=environment), "-c", code)

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == renderers


def test_holdfast_and_the_order_system_share_the_development_credential(tmp_path):
    """``make run`` works without configuration: both sides default to the same token."""
    assert HOLDFAST_DEFAULTS["ORDER_SYSTEM_TOKEN"] == ORDERS_DEFAULTS["ORDERS_API_TOKEN"]
    code = "import django; django.setup(); from django.conf import settings; print(settings.{})"
    holdfast = _run(
        _env("config.settings", tmp_path, DJANGO_ENV=None, ORDER_SYSTEM_TOKEN=None),
        "-c",
        code.format("ORDER_SYSTEM_TOKEN"),
    )
    orders = _run(
        _env("orders.settings", tmp_path, DJANGO_ENV=None, ORDERS_API_TOKEN=None),
        "-c",
        code.format("ORDERS_API_TOKEN"),
    )

    assert holdfast.stdout.strip() == orders.stdout.strip() == "dev-order-system-token"


@pytest.mark.parametrize("name", ["ORDERS_FAULTS_ENABLED", "ORDERS_DEBUG"])
def test_the_order_system_refuses_faults_and_debug_in_production(tmp_path, name):
    result = _setup(_env("orders.settings", tmp_path, **{name: "1"}))

    assert result.returncode != 0
    assert name in result.stderr


def test_load_demo_refuses_under_production_settings(tmp_path):
    result = _run(_env("config.settings", tmp_path), "manage.py", "load_demo")

    assert result.returncode != 0
    assert "refuses to run when DJANGO_ENV=production" in result.stderr
    assert "holdfast-demo" not in result.stdout + result.stderr
    assert "API token" not in result.stdout


def test_the_order_systems_seed_demo_refuses_under_production_settings(tmp_path):
    result = _run(_env("orders.settings", tmp_path), "-m", "orders", "seed_demo")

    assert result.returncode != 0
    assert "refuses to run when DJANGO_ENV=production" in result.stderr


def test_make_run_refuses_production(tmp_path):
    result = _run(_env("config.settings", tmp_path), "-m", "config.run_stack")

    assert result.returncode == 2
    assert "development stack" in result.stderr
    assert not (tmp_path / "holdfast.sqlite3").exists()


# What the apply step's named points call in a fresh process (``reconciliation.apply``).
OBSERVERS = (
    "import django; django.setup()\n"
    "from reconciliation.apply import STEP_POINT_OBSERVERS as o\n"
    "print([f'{f.__module__}.{f.__qualname__}' for f in o])\n"
)
DRILL_POINT = "lab.drills.step_points.drill_point"


def test_production_registers_no_drill_step_point_even_when_a_drill_asks(tmp_path):
    """The lab's stop point (a SIGSTOP at a named point of the apply) never loads in production,
    whatever the environment says; only a drill worker outside production registers it."""
    production = _run(_env("config.settings", tmp_path, HOLDFAST_DRILL="1"), "-c", OBSERVERS)
    drill_worker = _run(
        _env("config.settings", tmp_path, DJANGO_ENV="test", HOLDFAST_DRILL="1"), "-c", OBSERVERS
    )
    plain_worker = _run(
        _env("config.settings", tmp_path, DJANGO_ENV="test", HOLDFAST_DRILL=None), "-c", OBSERVERS
    )

    assert production.returncode == 0, production.stderr
    assert production.stdout.strip() == "[]"
    assert drill_worker.stdout.strip() == repr([DRILL_POINT]), drill_worker.stderr
    assert plain_worker.stdout.strip() == "[]", plain_worker.stderr


def test_the_connection_pool_is_bounded_for_web_processes_and_refused_for_workers(tmp_path):
    pool = {
        "DATABASE_URL": "postgres://holdfast_app@db.internal:5432/holdfast",
        "DB_POOL_MAX_SIZE": "4",
        "DB_POOL_TIMEOUT": "2.5",
    }
    env = _env("config.settings", tmp_path, **pool)
    shown = _run(
        env,
        "-c",
        "from django.conf import settings as s; d = s.DATABASES['default']; "
        "print(d['OPTIONS']['pool'], d['CONN_MAX_AGE'])",
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "{'min_size': 1, 'max_size': 4, 'timeout': 2.5} 0"

    worker = _run(env, "manage.py", "qcluster")
    assert worker.returncode != 0
    assert "DB_POOL_MAX_SIZE is for web processes" in worker.stderr
    off = _run(_env("config.settings", tmp_path), "-c", _POOL_OFF)
    assert off.stdout.strip() == "None", off.stderr


_POOL_OFF = (
    "from django.conf import settings as s; print(s.DATABASES['default']['OPTIONS'].get('pool'))"
)
