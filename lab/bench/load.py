"""Issue 27's goal 7 (``make bench`` with ``--load``): twenty users on gunicorn while a worker
cluster applies.

gunicorn (``config.wsgi``, 3 sync workers, ``DEBUG`` off, the API's rate limits off: one
session's twenty users are one API user) serves Holdfast on the largest list-page database
(``lab.bench.lists``: 10k–1M seeded cases, the bench lead's team); ``locust`` (headless, the
bench extra) runs the users of ``lab.bench.locustfile`` for :data:`SECONDS`. Meanwhile, after
the users are up, a real ``qcluster`` applies a backlog of approved cases in the bench's own
database (the order system's live probe and account are there; both databases share the
server and the machine's cores, which is what the load competes for); every order is checked
changed exactly once. The apply rate during the load goes beside the one of the rounds.

The users read the list, queue and search pages (admin and API), the agents open cases through
the API's intake and the approvers approve proposals of the queue (``lab.bench.locustfile``),
with the bench lead's API token. Those writes change the seeded database: the next run finds
more cases than its seed and seeds it again (``lists.prepare_database``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from django.utils.module_loading import import_string

from lab.bench import end_to_end, lists
from lab.bench.cluster import ROOT, child_env, qcluster, stop, warm
from lab.bench.context import Run
from lab.bench.deployed_orders import DeployedOrderSystem
from lab.bench.locustfile import LoadSummary, summarise, surface_of
from lab.bench.postgres import database_url
from lab.bench.series import Skip

USERS = 20
# Fewer than the README's 2 × cores + 1 for a web host of its own: this one machine also runs
# the workers, PostgreSQL and the order system (5 workers measured admin p95 551 ms, API 372 ms,
# against 397 and 267 ms with 3, one run each).
GUNICORN_WORKERS = 3
SECONDS = 40
# Applies during the load, at least: at the loaded rate (30–50/s here) they take most of it.
APPLIES = 600
PORT = int(os.environ.get("BENCH_LOAD_PORT", "8009"))
# Which pages each role asks (names of ``lists.pages()``).
ROLES = {
    "agent": [
        "admin changelist",
        "admin changelist status",
        "admin changelist owner",
        "admin changelist search case reference",
        "API case list",
        "API case list status",
    ],
    "approver": [
        "admin approver queue",
        "admin approver queue search order id",
        "API approver queue",
    ],
    "lead": [
        "admin held queue",
        "admin needs-attention queue",
        "admin changelist search three words",
        "admin changelist search order id",
        "admin events",
        "API case list search three words",
        "API case list overdue",
    ],
}


def role_pages() -> dict[str, list[list[object]]]:
    by_name = {page.name: page for page in lists.pages()}
    return {
        role: [[name, by_name[name].path, by_name[name].params or {}] for name in names]
        for role, names in ROLES.items()
    }


def _session(database: str) -> str:
    """A session of the bench lead in ``database`` (as a login leaves it)."""
    with lists._database(database):
        user = get_user_model().objects.get(username=lists.BENCH_USERNAME)
        store = SessionStore()
        store[SESSION_KEY] = str(user.pk)
        # The backend that reads the user back (axes' comes first and only checks logins).
        store[BACKEND_SESSION_KEY] = next(
            path
            for path in settings.AUTHENTICATION_BACKENDS
            if hasattr(import_string(path), "get_user")
        )
        store[HASH_SESSION_KEY] = user.get_session_auth_hash()
        store.save()
        return str(store.session_key)


def _writer(database: str) -> tuple[str, str]:
    """The bench lead's API token in ``database`` and the account of its team the agents'
    intakes are for."""
    from rest_framework.authtoken.models import Token

    from cases.models import CustomerAccount

    with lists._database(database):
        user = get_user_model().objects.get(username=lists.BENCH_USERNAME)
        token, _ = Token.objects.get_or_create(user=user)
        account = CustomerAccount.objects.filter(team_id=lists.BENCH_TEAM_ID).order_by("pk")
        return token.key, account.values_list("reference", flat=True)[0]


def _gunicorn(log_dir: Path, database: str) -> subprocess.Popen[bytes]:
    binary = Path(sys.executable).with_name("gunicorn")
    env = child_env(DEBUG="0", API_THROTTLE_USER="off", API_THROTTLE_ANON="off")
    env["DATABASE_URL"] = database_url(database)
    with (log_dir / "gunicorn-load.log").open("wb") as log:
        process = subprocess.Popen(  # noqa: S603 - our own gunicorn
            [
                str(binary),
                "config.wsgi",
                "-b",
                f"127.0.0.1:{PORT}",
                "-w",
                str(GUNICORN_WORKERS),
                "--control-socket",
                str(log_dir / "gunicorn-load.ctl"),
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise Skip(f"gunicorn exited with {process.returncode} (see gunicorn-load.log)")
        try:
            if httpx.get(f"http://127.0.0.1:{PORT}/healthz", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    stop(process, grace=2)
    raise Skip("gunicorn did not answer /healthz in 60 s")


def _warm_server(session: str, rounds: int = 2 * GUNICORN_WORKERS) -> None:
    """Each page the users ask, ``rounds`` times, before they start: every gunicorn worker's
    first answers (imports, templates compiled, statements prepared) are a cold start that a
    served site has long paid, not the load (they were the first 50 answers' p95 of 640 ms,
    against 136 ms for the next 50)."""
    cookies = {"sessionid": session}
    with httpx.Client(base_url=f"http://127.0.0.1:{PORT}", cookies=cookies, timeout=30) as web:
        for _ in range(rounds):
            for pages in role_pages().values():
                for _name, path, params in pages:
                    web.get(str(path), params=params)  # type: ignore[arg-type]


def _locust(
    log_dir: Path, session: str, writer: tuple[str, str], out: Path
) -> subprocess.Popen[bytes]:
    binary = shutil.which("locust", path=str(Path(sys.executable).parent))
    if binary is None:
        raise Skip("locust not installed (pip install '.[bench]')")
    env = {
        **os.environ,
        "HF_LOAD_SESSION": session,
        "HF_LOAD_TOKEN": writer[0],
        "HF_LOAD_ACCOUNT": writer[1],
        "HF_LOAD_OUT": str(out),
        "HF_LOAD_PAGES": json.dumps(role_pages()),
    }
    with (log_dir / "locust-load.log").open("wb") as log:
        return subprocess.Popen(  # noqa: S603 - our own locust
            [
                binary,
                "-f",
                str(Path(__file__).with_name("locustfile.py")),
                "--headless",
                "-u",
                str(USERS),
                "-r",
                str(USERS),
                "-t",
                f"{SECONDS}s",
                "-H",
                f"http://127.0.0.1:{PORT}",
                "--only-summary",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _apply_during(run: Run, orders: DeployedOrderSystem, made: dict[int, str]) -> float:
    """The backlog applied by a real cluster; applies per second; exactly once checked."""
    versions_before = orders.versions(list(made.values()))
    ids = list(made)
    with qcluster(run.log_dir, "load", ORDER_SYSTEM_URL=orders.base_url) as process:
        warm(process)
        start = time.perf_counter()
        end_to_end._enqueue_backlog(ids, not end_to_end.has_task(end_to_end.APPLY_DUE))
        end_to_end._wait_done(ids, process)
        elapsed = time.perf_counter() - start
    orders.check_changed_once(made, versions_before)
    return len(ids) / elapsed


def measure(
    run: Run, orders: DeployedOrderSystem, database: str, applies: int
) -> tuple[LoadSummary, float]:
    """The load's summary and the apply rate during it."""
    applies = max(applies, APPLIES)
    made = end_to_end.approved_cases(run, orders, applies, "load")
    session = _session(database)
    out = run.log_dir / "load-requests.tsv"
    out.unlink(missing_ok=True)
    server = _gunicorn(run.log_dir, database)
    users = None
    try:
        _warm_server(session)
        users = _locust(run.log_dir, session, _writer(database), out)
        time.sleep(5)  # the users up and asking
        rate = _apply_during(run, orders, made)
        users.wait(timeout=SECONDS + 60)
    finally:
        if users is not None:
            stop(users, grace=5)
        stop(server, grace=5)
    with out.open() as lines:
        summary = summarise(lines)
    run.write(
        f"  load: {summary.requests} requests by {USERS} users in {SECONDS} s on gunicorn "
        f"({database}); admin p95 {summary.admin_p95_ms:.0f} ms, API p95 "
        f"{summary.api_p95_ms:.0f} ms, {summary.errors} errors"
        + (f" (first: {'; '.join(summary.first_errors)})" if summary.errors else "")
        + f"; {applies} applies during it at {rate:.1f}/s"
    )
    return summary, rate


__all__ = ["measure", "role_pages", "surface_of"]
