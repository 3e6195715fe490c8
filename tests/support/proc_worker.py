"""A Holdfast worker as a separate process (``manage.py run_worker --apply REF``), for drills
that pause or kill it. It uses the test's own PostgreSQL database, so the test must commit what
the worker reads (``transactional_db``).

Always use it as a context manager: on exit the process is resumed (if paused) and killed (if
still running), so no stopped child outlives a failing test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from django.db import connection

REPO_ROOT = Path(__file__).resolve().parents[2]


def worker_database_url() -> str:
    """The URL of the database this test runs on (PostgreSQL only: SQLite's test database is
    in memory and invisible to another process)."""
    if connection.vendor != "postgresql":
        raise RuntimeError("A worker process needs the PostgreSQL test database.")
    db = connection.settings_dict
    auth = quote(db["USER"] or "", safe="")
    if db["PASSWORD"]:
        auth += ":" + quote(db["PASSWORD"], safe="")
    host = db["HOST"] or "127.0.0.1"
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgres://{auth}@{host}{port}/{quote(db['NAME'], safe='')}"


def child_env(env: dict[str, str]) -> dict[str, str]:
    """The environment of a Holdfast child process on this test's database, plus ``env``."""
    return {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "DJANGO_ENV": "test",
        "PYTHONUNBUFFERED": "1",
        **env,
    }


class WorkerProcess:
    """``run_worker --apply <reference>`` with its output captured to a temporary file."""

    def __init__(self, reference: str, *, env: dict[str, str]) -> None:
        self.reference = reference
        self.env = child_env(env)
        self._log = tempfile.NamedTemporaryFile(prefix="holdfast-worker-", suffix=".log")  # noqa: SIM115
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def process(self) -> subprocess.Popen[bytes]:
        assert self._process is not None, "start() the worker first"
        return self._process

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.poll() if self._process else None

    def output(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    def start(self) -> WorkerProcess:
        self._process = subprocess.Popen(  # noqa: S603 - our own interpreter and manage.py
            [sys.executable, "manage.py", "run_worker", "--apply", self.reference],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        return self

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def __enter__(self) -> WorkerProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        if self._process is not None and self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.resume()
            self._process.kill()
            self._process.wait(timeout=10)
        self._log.close()


def wait_for(condition, *, timeout: float, interval: float = 0.02, what: str = "condition"):
    """Poll ``condition()`` until it returns something truthy; return it, or fail loudly."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Proc:
    """``manage.py <args>`` as a child process with its output in a temporary file."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        self.args = args
        self.env = child_env(env)
        self._log = tempfile.NamedTemporaryFile(prefix="holdfast-proc-", suffix=".log")  # noqa: SIM115
        self.process: subprocess.Popen | None = None

    def output(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    def __enter__(self) -> Proc:
        self.process = subprocess.Popen(  # noqa: S603 - our own interpreter and manage.py
            [sys.executable, "manage.py", *self.args],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: the cluster's workers die with it
        )
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # the main PID only (STACK-NOTES)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)  # no child outlives the test
            self.process.wait(timeout=10)
        self._log.close()
