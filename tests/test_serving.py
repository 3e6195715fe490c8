"""Production serving: gunicorn, WhiteNoise's static files and the health endpoints.

``test_gunicorn_serves_*`` runs the real thing: ``collectstatic`` into a temporary
``STATIC_ROOT`` and ``gunicorn config.wsgi -w 2`` as a separate process under
``DJANGO_ENV=production``, on a migrated SQLite file (SQLite suite) or on this test's own
PostgreSQL database (PostgreSQL suite). No worker runs, so ``/readyz`` answers 503 and says why.
The other tests call the views in-process with the worker evidence faked.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder
from django.utils import timezone
from django_q.models import Schedule

from reconciliation import health
from reconciliation.sweep import SWEEPER_TASK

ROOT = Path(__file__).resolve().parent.parent
GUNICORN = Path(sys.executable).with_name("gunicorn")
SECRETS = (
    "SECRET_KEY",
    "APPROVAL_GRANT_KEY",
    "ORDER_WEBHOOK_SECRET",
    "ORDER_SYSTEM_TOKEN",
    "METRICS_TOKEN",
)
HTTPS = {"X-Forwarded-Proto": "https"}  # what the TLS proxy in front of gunicorn adds


def _production_env(tmp_path: Path, database_url: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DJANGO_SETTINGS_MODULE", "REDIS_URL", "DEBUG", *SECRETS}
    }
    env.update({name: secrets.token_urlsafe(48) for name in SECRETS})
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DJANGO_ENV": "production",
            "ALLOWED_HOSTS": "127.0.0.1",
            "DATABASE_URL": database_url,
            "STATIC_ROOT": str(tmp_path / "static"),
            "HOLDFAST_STATE_DIR": str(tmp_path / "state"),
            "PROMETHEUS_MULTIPROC_DIR": str(_made(tmp_path / "metrics")),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def _made(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _manage(env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(  # noqa: S603 - our own interpreter and manage.py
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(proc: subprocess.Popen, what: str) -> None:
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"{what} failed:\n{output}"


@contextlib.contextmanager
def _gunicorn(env: dict[str, str], log: Path):
    """Yield gunicorn's base URL (it binds a free port itself); stop it, and its workers."""
    with log.open("w") as out:
        proc = subprocess.Popen(  # noqa: S603 - the virtualenv's gunicorn, fixed arguments
            [
                str(GUNICORN),
                "config.wsgi",
                "-b",
                "127.0.0.1:0",
                "-w",
                "2",
                "--no-control-socket",
                "--access-logfile",
                "-",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        url = None
        while url is None:
            found = re.search(r"Listening at: (http://127\.0\.0\.1:\d+)", log.read_text())
            if found:
                url = found.group(1)
            elif proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"gunicorn did not start:\n{log.read_text()}")
            else:
                time.sleep(0.1)
        while True:  # the workers boot after the arbiter listens
            try:
                httpx.get(f"{url}/healthz", timeout=5)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    pytest.fail(f"gunicorn does not answer:\n{log.read_text()}")
                time.sleep(0.1)
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # graceful: the arbiter stops its workers
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # no worker outlives the test
        proc.wait(timeout=10)


@pytest.fixture
def served_database(request, tmp_path) -> str:
    """A migrated database another process can open: this test's PostgreSQL database, or a
    SQLite file (the SQLite test database is in memory)."""
    if connection.vendor == "postgresql":
        from tests.support.proc_worker import worker_database_url

        request.getfixturevalue("transactional_db")
        return worker_database_url()
    return f"sqlite:///{tmp_path / 'holdfast.sqlite3'}"


@pytest.mark.serving
def test_gunicorn_serves_the_app_static_files_and_health(tmp_path, served_database):
    env = _production_env(tmp_path, served_database)
    steps = [(_manage(env, "collectstatic", "--noinput", "-v0"), "collectstatic")]
    if served_database.startswith("sqlite:"):
        steps.append((_manage(env, "migrate", "--noinput", "-v0"), "migrate"))
    for proc, what in steps:
        _finish(proc, what)
    manifest = json.loads((tmp_path / "static" / "staticfiles.json").read_text())
    hashed_css = manifest["paths"]["admin/css/base.css"]
    log = tmp_path / "gunicorn.log"

    with _gunicorn(env, log) as url:
        # Liveness over plain HTTP: exempt from the HTTPS redirect, never cached.
        live = httpx.get(f"{url}/healthz", timeout=10)
        assert live.status_code == 200, log.read_text()
        assert live.json() == {"status": "ok"}
        assert "no-store" in live.headers["Cache-Control"]

        # Readiness: database and migrations are fine; no worker runs, and it says so.
        ready = httpx.get(f"{url}/readyz", timeout=10)
        body = ready.json()
        assert body["database"] == "ok", body
        assert body["migrations"] == "ok", body
        assert body["workers"] in {"none", "stale"}, body
        assert ready.status_code == 503, body
        assert body["status"] == "unavailable"
        assert "no-store" in ready.headers["Cache-Control"]

        # Everything else is HTTPS only: plain HTTP is redirected.
        plain = httpx.get(f"{url}/admin/login/", timeout=10)
        assert plain.status_code == 301
        assert plain.headers["Location"].startswith("https://")

        # WhiteNoise serves the collected admin CSS, with a cache header and compressed.
        css = httpx.get(
            f"{url}/static/admin/css/base.css",
            headers={**HTTPS, "Accept-Encoding": "gzip"},
            timeout=10,
        )
        assert css.status_code == 200, log.read_text()
        assert css.headers["Content-Type"].startswith("text/css")
        assert "max-age=" in css.headers["Cache-Control"]
        assert css.headers.get("Content-Encoding") == "gzip"
        # The hashed copy the templates link to is cached for good.
        hashed = httpx.get(f"{url}/static/{hashed_css}", headers=HTTPS, timeout=10)
        assert hashed.status_code == 200
        assert "immutable" in hashed.headers["Cache-Control"]

        # The admin login page renders (its {% static %} links resolve through the manifest).
        login = httpx.get(f"{url}/admin/login/", headers=HTTPS, timeout=10)
        assert login.status_code == 200, log.read_text()
        assert f"/static/{hashed_css}" in login.text
        assert "Strict-Transport-Security" in login.headers
        assert "script-src 'self'" in login.headers["Content-Security-Policy"]
        assert "camera=()" in login.headers["Permissions-Policy"]

        # The API speaks JSON only: no browsable HTML, even to a browser.
        browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
        api = httpx.get(f"{url}/api/cases/", headers={**HTTPS, "Accept": browser}, timeout=10)
        assert api.status_code == 401
        assert api.headers["Content-Type"] == "application/json", api.text[:200]

        # /metrics answers the bearer token only, and reads the desk from the database.
        refused = httpx.get(f"{url}/metrics", headers=HTTPS, timeout=10)
        assert refused.status_code == 401
        assert "holdfast_" not in refused.text
        token = {"Authorization": f"Bearer {env['METRICS_TOKEN']}"}
        scraped = httpx.get(f"{url}/metrics", headers={**HTTPS, **token}, timeout=10)
        assert scraped.status_code == 200, log.read_text()
        assert 'holdfast_cases_open{status="held"} 0.0' in scraped.text
        assert "holdfast_database_up 1.0" in scraped.text

    requests_logged = log.read_text()
    assert "GET /readyz" in requests_logged
    assert "Booting worker" in requests_logged


HUGE_PAGE = "4303703354380503545786585604870373376"


@pytest.mark.serving
@pytest.mark.postgres_only
def test_gunicorn_answers_503_while_the_database_refuses_connections_and_recovers(
    tmp_path, transactional_db, lead
):
    """From outside, in production settings: gunicorn connects as the README's application
    role; while that role is out of connections (its CONNECTION LIMIT, the same refusal as
    "too many clients already"), the API answers 503 with Retry-After in its error shape and
    the admin a short page, no traceback; once connections free up it serves again."""
    import psycopg
    from rest_framework.authtoken.models import Token

    from tests.support.db_roles import role_connection, roles
    from tests.support.proc_worker import worker_database_url

    token = Token.objects.create(user=lead)
    with roles(writer_tables=("cases_case",)) as names:
        app = names["app"]
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER ROLE "{app}" CONNECTION LIMIT 2')
        database = worker_database_url().replace("postgres://postgres@", f"postgres://{app}@")
        env = {**_production_env(tmp_path, database), "CONN_MAX_AGE": "0"}
        api = {**HTTPS, "Authorization": f"Token {token.key}"}
        log = tmp_path / "gunicorn.log"
        with _gunicorn(env, log) as url:
            assert httpx.get(f"{url}/api/cases/", headers=api, timeout=10).status_code == 200
            huge = httpx.get(f"{url}/api/cases/", params={"page": HUGE_PAGE}, headers=api)
            assert huge.status_code == 404, huge.text
            assert huge.json()["error"] == "not_found"

            # Each request closed its connection (CONN_MAX_AGE=0), but the server counts a
            # backend against the limit until it has exited: wait for that, then take them all.
            _wait_for_no_sessions_of(app)
            held = [role_connection(app), role_connection(app)]  # every connection it may have
            try:
                with pytest.raises(psycopg.OperationalError, match="too many connections"):
                    role_connection(app)
                busy = httpx.get(f"{url}/api/cases/", headers=api, timeout=10)
                page = httpx.get(
                    f"{url}/admin/cases/case/",
                    headers={**HTTPS, "Cookie": "sessionid=" + "x" * 32},
                    timeout=10,
                )
            finally:
                for conn in held:
                    conn.close()
            assert busy.status_code == 503, busy.text
            assert busy.headers["Retry-After"] == "5"
            assert busy.json()["error"] == "database_unavailable"
            assert busy.json()["retry_after"] == 5
            assert page.status_code == 503, page.text
            assert page.headers["Retry-After"] == "5"
            assert "cannot reach its database" in page.text
            for answer in (busy, page):
                assert "Traceback" not in answer.text
                assert "too many connections" not in answer.text

            again = httpx.get(f"{url}/api/cases/", headers=api, timeout=10)
            assert again.status_code == 200, again.text
    assert "Traceback" not in log.read_text()


def _wait_for_no_sessions_of(role: str, timeout: float = 10.0) -> None:
    """Until PostgreSQL has no backend of ``role`` left (one whose client closed it may still
    be exiting, and counts against the role's connection limit until it has)."""
    deadline = time.monotonic() + timeout
    while True:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s", [role])
            if cursor.fetchone()[0] == 0:
                return
        if time.monotonic() > deadline:
            pytest.fail(f"{role} still has sessions after {timeout} s")
        time.sleep(0.05)


# --- The views in-process ----------------------------------------------------------------


def test_healthz_touches_no_database(client):
    """No ``django_db`` mark: any query here would raise."""
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-store" in response["Cache-Control"]


def test_health_endpoints_refuse_writes(client):
    assert client.post("/healthz").status_code == 405
    assert client.post("/readyz").status_code == 405


def _schedule_ran(*, seconds_ago: float) -> None:
    """The sweeper's schedule as a cluster's scheduler leaves it: ran, next run a minute on."""
    Schedule.objects.update_or_create(
        name="Keep the sweeper running",
        defaults={
            "func": SWEEPER_TASK,
            "schedule_type": "I",
            "minutes": 1,
            "repeats": -1,
            "task": "0123456789abcdef",
            "next_run": timezone.now() - dt.timedelta(seconds=seconds_ago),
        },
    )


@pytest.fixture
def orm_heartbeats(monkeypatch):
    """The ORM broker's view: cluster heartbeats are in per-process memory, invisible here."""
    monkeypatch.setattr(health, "heartbeats_visible", lambda broker: False)


@pytest.mark.django_db
def test_readyz_is_ready_when_the_sweepers_schedule_runs(
    client, orm_heartbeats, django_assert_max_num_queries
):
    _schedule_ran(seconds_ago=-30)  # next run in 30 s: a scheduler just ran it

    with django_assert_max_num_queries(3):
        response = client.get("/readyz")

    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ok"
    assert body["database"] == body["migrations"] == body["workers"] == "ok"
    assert body["sweeper_schedule_overdue_seconds"] == 0
    assert "no-store" in response["Cache-Control"]


@pytest.mark.django_db
def test_readyz_says_stale_when_the_schedule_stopped_running(client, orm_heartbeats):
    _schedule_ran(seconds_ago=health.SCHEDULE_STALE_SECONDS + 60)

    response = client.get("/readyz")

    assert response.status_code == 503
    body = response.json()
    assert body["workers"] == "stale"
    assert body["sweeper_schedule_overdue_seconds"] > health.SCHEDULE_STALE_SECONDS


@pytest.mark.django_db
def test_readyz_says_none_when_no_worker_ever_ran(client, orm_heartbeats):
    Schedule.objects.filter(func=SWEEPER_TASK).update(task=None)

    response = client.get("/readyz")

    assert response.status_code == 503
    assert response.json()["workers"] == "none"


@pytest.mark.django_db
def test_readyz_is_unavailable_with_an_unapplied_migration(client, orm_heartbeats):
    _schedule_ran(seconds_ago=-30)
    MigrationRecorder.Migration.objects.filter(app="cases").order_by("-id").first().delete()

    response = client.get("/readyz")

    assert response.status_code == 503
    body = response.json()
    assert body["migrations"] == "unapplied"
    assert body["unapplied_migrations"] == 1
    assert body["workers"] == "ok"


def _stat(age: float, *, status: str = "Idle", workers: int = 3) -> SimpleNamespace:
    now = timezone.now()
    return SimpleNamespace(
        status=status, timestamp=now - dt.timedelta(seconds=age), workers=list(range(workers))
    )


@pytest.fixture
def redis_heartbeats(monkeypatch):
    """The Redis broker's view: every cluster's heartbeat is visible; ``stats`` is what the
    broker holds."""
    from django_q.status import Stat

    stats: list[SimpleNamespace] = []
    monkeypatch.setattr(health, "heartbeats_visible", lambda broker: True)
    monkeypatch.setattr(Stat, "get_all", staticmethod(lambda broker=None: list(stats)))
    return stats


@pytest.mark.django_db
def test_worker_verdict_follows_cluster_heartbeats_where_visible(redis_heartbeats):
    _schedule_ran(seconds_ago=-30)

    assert health.worker_health().verdict == "stale"  # ran before, no cluster reports now

    redis_heartbeats.append(_stat(0.4))
    redis_heartbeats.append(_stat(1.0, status="Stopping"))
    fresh = health.worker_health()
    assert fresh.verdict == "ok"
    assert fresh.as_dict()["clusters"] == 1
    assert fresh.as_dict()["cluster_workers"] == 3

    redis_heartbeats[:] = [_stat(health.CLUSTER_STALE_SECONDS + 5)]
    assert health.worker_health().verdict == "stale"


@pytest.mark.django_db
def test_worker_verdict_is_none_before_any_cluster_ran(redis_heartbeats):
    Schedule.objects.filter(func=SWEEPER_TASK).update(task=None)

    assert health.worker_health().verdict == "none"


@pytest.mark.django_db
def test_an_unreadable_broker_is_stale_and_named(monkeypatch):
    def broken(*args, **kwargs):
        raise ConnectionError("no broker")

    monkeypatch.setattr("django_q.brokers.get_broker", broken)

    verdict = health.worker_health()

    assert verdict.verdict == "stale"
    assert "ConnectionError" in verdict.as_dict()["error"]


@pytest.mark.django_db
def test_worker_health_command_exits_with_the_verdict(orm_heartbeats, capsys):
    from django.core.management import call_command

    _schedule_ran(seconds_ago=-30)
    call_command("worker_health")
    assert json.loads(capsys.readouterr().out)["workers"] == "ok"

    _schedule_ran(seconds_ago=health.SCHEDULE_STALE_SECONDS + 60)
    with pytest.raises(SystemExit) as exited:
        call_command("worker_health")
    assert exited.value.code == 1
    assert json.loads(capsys.readouterr().out)["workers"] == "stale"
