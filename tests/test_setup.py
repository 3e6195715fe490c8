"""Settings a newcomer can trust: production passes ``check --deploy``; bad values fail loudly."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_float, env_int, env_list, env_str, env_url, parse_database_url

ROOT = Path(__file__).resolve().parent.parent
# Whatever the test run itself was given must not leak into the settings under test.
_INHERITED = {
    "DATABASE_URL",
    "DEBUG",
    "DJANGO_ENV",
    "SECRET_KEY",
    "ALLOWED_HOSTS",
    "APPROVAL_GRANT_KEY",
    "ORDER_WEBHOOK_SECRET",
    "ORDER_SYSTEM_TOKEN",
    "METRICS_TOKEN",
    "PROMETHEUS_MULTIPROC_DIR",
    "REDIS_URL",
    "CONN_MAX_AGE",
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "DJANGO_SETTINGS_MODULE",
}


def _production_env(tmp_path, **overrides) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _INHERITED}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DJANGO_ENV": "production",
            "SECRET_KEY": secrets.token_urlsafe(64),
            "ALLOWED_HOSTS": "holdfast.example",
            "APPROVAL_GRANT_KEY": secrets.token_urlsafe(48),
            "ORDER_WEBHOOK_SECRET": secrets.token_urlsafe(48),
            "ORDER_SYSTEM_TOKEN": secrets.token_urlsafe(48),
            "METRICS_TOKEN": secrets.token_urlsafe(48),
            "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
            "DATABASE_URL": f"sqlite:///{tmp_path / 'deploy.sqlite3'}",
        }
    )
    env.update(overrides)
    return {k: v for k, v in env.items() if v is not None}


def _manage(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_check_deploy_is_clean_under_production_settings(tmp_path):
    result = _manage(_production_env(tmp_path), "check", "--deploy", "--fail-level", "WARNING")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_production_without_secret_key_fails_loudly(tmp_path):
    result = _manage(_production_env(tmp_path, SECRET_KEY=None), "check")

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "SECRET_KEY" in result.stderr


def test_production_with_debug_on_fails_loudly(tmp_path):
    result = _manage(_production_env(tmp_path, DEBUG="1"), "check")

    assert result.returncode != 0
    assert "DEBUG must be off" in result.stderr


def test_production_without_allowed_hosts_fails_loudly(tmp_path):
    result = _manage(_production_env(tmp_path, ALLOWED_HOSTS=None), "check")

    assert result.returncode != 0
    assert "ALLOWED_HOSTS" in result.stderr


def test_typo_in_environment_fails_start_up(tmp_path):
    result = _manage(_production_env(tmp_path, CONN_MAX_AGE="ten"), "check")

    assert result.returncode != 0
    assert "CONN_MAX_AGE='ten' is not an integer" in result.stderr


@pytest.mark.parametrize(
    ("value", "said"),
    [("20", "at most 19"), ("-1", "below the minimum"), ("low", "not an integer")],
)
def test_a_worker_nice_value_outside_0_to_19_fails_start_up(tmp_path, value, said):
    result = _manage(_production_env(tmp_path, WORKER_CPU_NICE=value), "check")

    assert result.returncode != 0
    assert said in result.stderr


@pytest.mark.parametrize("value", ["maybe", "2", "ja"])
def test_env_bool_rejects_values_that_are_not_booleans(monkeypatch, value):
    monkeypatch.setenv("DEBUG", value)

    with pytest.raises(ImproperlyConfigured, match="DEBUG"):
        env_bool("DEBUG", False)


@pytest.mark.parametrize(
    ("value", "expected"), [("1", True), ("TRUE", True), (" off ", False), ("no", False)]
)
def test_env_bool_reads_the_usual_spellings(monkeypatch, value, expected):
    monkeypatch.setenv("DEBUG", value)

    assert env_bool("DEBUG", not expected) is expected


def test_env_int_rejects_non_integers_and_values_below_minimum(monkeypatch):
    monkeypatch.setenv("CONN_MAX_AGE", "abc")
    with pytest.raises(ImproperlyConfigured, match="not an integer"):
        env_int("CONN_MAX_AGE", 600, minimum=0)

    monkeypatch.setenv("CONN_MAX_AGE", "-1")
    with pytest.raises(ImproperlyConfigured, match="below the minimum"):
        env_int("CONN_MAX_AGE", 600, minimum=0)

    monkeypatch.setenv("CONN_MAX_AGE", "30")
    assert env_int("CONN_MAX_AGE", 600, minimum=0) == 30


def test_env_float_rejects_non_numbers(monkeypatch):
    monkeypatch.setenv("ORDER_SYSTEM_READ_TIMEOUT", "soon")

    with pytest.raises(ImproperlyConfigured, match="not a number"):
        env_float("ORDER_SYSTEM_READ_TIMEOUT", 10.0)


def test_env_str_without_default_requires_the_variable(monkeypatch):
    monkeypatch.delenv("HOLDFAST_TEST_UNSET", raising=False)

    with pytest.raises(ImproperlyConfigured, match="HOLDFAST_TEST_UNSET"):
        env_str("HOLDFAST_TEST_UNSET")


def test_env_list_splits_and_trims(monkeypatch):
    monkeypatch.setenv("ALLOWED_HOSTS", " a.example , ,b.example")

    assert env_list("ALLOWED_HOSTS", []) == ["a.example", "b.example"]


@pytest.mark.parametrize("value", ["ftp://orders", "orders.example", "http://"])
def test_env_url_rejects_non_http_urls(monkeypatch, value):
    monkeypatch.setenv("ORDER_SYSTEM_URL", value)

    with pytest.raises(ImproperlyConfigured, match="ORDER_SYSTEM_URL"):
        env_url("ORDER_SYSTEM_URL", "http://127.0.0.1:8100")


def test_database_url_parses_postgres_and_sqlite():
    pg = parse_database_url("postgres://hf:s%40cret@db.example:6543/holdfast?sslmode=require")

    assert pg["ENGINE"] == "django.db.backends.postgresql"
    assert (pg["NAME"], pg["USER"], pg["PASSWORD"], pg["HOST"], pg["PORT"]) == (
        "holdfast",
        "hf",
        "s@cret",
        "db.example",
        "6543",
    )
    assert pg["OPTIONS"] == {"sslmode": "require"}
    assert pg["CONN_MAX_AGE"] == 600
    lite = parse_database_url("sqlite:///:memory:")
    assert lite["ENGINE"] == "django.db.backends.sqlite3"
    assert lite["OPTIONS"]["transaction_mode"] == "IMMEDIATE"


@pytest.mark.parametrize("url", ["mysql://db/holdfast", "postgres://db.example/", "nonsense"])
def test_database_url_rejects_what_it_cannot_use(url):
    with pytest.raises(ImproperlyConfigured):
        parse_database_url(url)


def test_unknown_api_urls_answer_in_the_api_error_shape(client):
    response = client.get("/api/cases/not-a-reference/")

    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_api_docs_are_served_without_a_cdn(client, django_user_model):
    user = django_user_model.objects.create_user(username="reader", password="pw")
    client.force_login(user)

    page = client.get("/api/docs/").content.decode()

    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    assert "cdn.jsdelivr.net" not in page


@pytest.mark.parametrize("busy", ["HOLDFAST_PORT", "ORDER_SYSTEM_PORT"])
def test_make_run_beside_a_running_one_refuses_before_it_touches_anything(tmp_path, busy):
    """A second ``make run`` while the first still serves: it found the first one's services
    answering, printed their URLs as its own, emptied their metrics directory, started a second
    worker cluster, and stopped on a traceback when its order system could not bind."""
    import socket

    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "counter_1.db").write_text("the running stack's")
    with socket.socket() as listening, socket.socket() as spare:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        spare.bind(("127.0.0.1", 0))
        ports = {
            "HOLDFAST_PORT": spare.getsockname()[1],
            "ORDER_SYSTEM_PORT": spare.getsockname()[1],
        }
        ports[busy] = listening.getsockname()[1]
        spare.close()  # free: only ``busy`` is taken
        env = {k: v for k, v in os.environ.items() if k not in _INHERITED}
        env.update(
            {
                "DATABASE_URL": f"sqlite:///{tmp_path / 'second.sqlite3'}",
                "PROMETHEUS_MULTIPROC_DIR": str(metrics),
                **{name: str(port) for name, port in ports.items()},
            }
        )
        result = subprocess.run(
            [sys.executable, "-m", "config.run_stack"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    assert result.returncode == 2, result.stdout + result.stderr
    assert f"port {ports[busy]} ({busy})" in result.stderr
    assert "Is another `make run` still running?" in result.stderr
    assert "Nothing was changed." in result.stderr
    assert "Preparing databases" not in result.stdout
    assert not (tmp_path / "second.sqlite3").exists()
    assert (metrics / "counter_1.db").read_text() == "the running stack's"
