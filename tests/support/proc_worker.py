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
from collections.abc import Callable, Iterator
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


_ENDED = ("Z", "X")  # a zombie (its parent has not reaped it yet) or dead


def _live_processes() -> Iterator[tuple[int, Path, list[str]]]:
    """Every process that has not ended: its pid, its ``/proc`` directory and the fields of
    its ``stat`` after the command name (state, parent, process group, ...)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if fields[0] not in _ENDED:
            yield int(entry.name), entry, fields


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    return [pid for pid, _, fields in _live_processes() if int(fields[2]) == pgid]


def _on_database(database_url: str) -> list[tuple[int, str]]:
    """Each other live process on ``database_url``: its pid and its line (:func:`processes_on`)."""
    wanted = f"DATABASE_URL={database_url}".encode()
    found = []
    for pid, entry, fields in _live_processes():
        if pid == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            if wanted not in environ:
                continue
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        started_by = next(
            (
                v.split(b"=", 1)[1].decode(errors="replace")
                for v in environ
                if v.startswith(b"PYTEST_CURRENT_TEST=")
            ),
            "?",
        )
        found.append((pid, f"pid {pid} ({fields[0]}) started by {started_by}: {argv.strip()}"))
    return found


def processes_on(database_url: str) -> list[str]:
    """Every other live process whose environment puts it on ``database_url`` (a worker, a
    cluster or a command a test started), one line each: pid, state, the test that started it
    (``PYTEST_CURRENT_TEST``, inherited) and its command line. Only processes this user may
    read are seen, which is every child of the suite."""
    return [line for _, line in _on_database(database_url)]


def kill_processes_on(database_url: str, *, grace: float = 0.0) -> list[str]:
    """Kill (SIGKILL) every process :func:`processes_on` finds after ``grace`` seconds (for a
    process killed a moment ago, still ending); what was found."""
    deadline = time.monotonic() + grace
    found = _on_database(database_url)
    while found and time.monotonic() < deadline:
        time.sleep(0.05)
        found = _on_database(database_url)
    for pid, _ in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return [line for _, line in found]


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


def wait_for(
    condition,
    *,
    timeout: float,
    interval: float = 0.02,
    what: str | Callable[[], str] = "condition",
):
    """Poll ``condition()`` until it returns something truthy; return it, or fail loudly.

    ``what`` names what was awaited; a callable is called only on the timeout, so that a message
    that quotes a process's output quotes what it had said by then, not when the wait began."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout} s waiting for {what() if callable(what) else what}"
    )


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
            group = self.process.pid
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)  # no child outlives the test
            self.process.wait(timeout=10)
            # A killed process is gone only when the kernel has torn it down, which takes a
            # while on a busy machine: the next test starts when none of the group runs.
            wait_for(
                lambda: not group_members(group),
                timeout=10,
                what=lambda: f"the killed group of {self.args} to end: {group_members(group)}",
            )
        self._log.close()
