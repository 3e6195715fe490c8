"""The suite's check that no process a test started on its database outlives the test
(``tests/conftest.py``): it sees such a process, names the test that started it, and kills it.

A cluster left running by one test takes a later test's queued tasks and due cases: the later
test then finds its order written by nobody it started, or its task never run."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.proc_worker import (
    child_env,
    kill_processes_on,
    processes_on,
    wait_for,
    worker_database_url,
)

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]


def test_a_process_left_on_the_test_database_is_found_named_and_killed(request):
    stray = subprocess.Popen(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env=child_env({}),
        start_new_session=True,  # as a cluster's main process runs: out of our group
    )
    try:
        # Until it has executed, the child's environment is still its parent's copy; once
        # asleep its line (which shows its state) stays the same from one read to the next.
        found = wait_for(
            lambda: [line for line in processes_on(worker_database_url()) if " (S) " in line],
            timeout=10,
        )
        assert len(found) == 1, found
        assert found[0].startswith(f"pid {stray.pid} ")
        assert request.node.name in found[0], "names the test that started it"
        assert "time.sleep(120)" in found[0]

        assert kill_processes_on(worker_database_url()) == found
        assert stray.wait(timeout=10) == -signal.SIGKILL
        assert processes_on(worker_database_url()) == []
    finally:
        if stray.poll() is None:
            stray.kill()
            stray.wait(timeout=10)


def _argv(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def test_a_process_on_another_database_is_not_ours():
    other = subprocess.Popen(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={**child_env({}), "DATABASE_URL": worker_database_url() + "_elsewhere"},
    )
    try:
        wait_for(lambda: "time.sleep" in " ".join(_argv(other.pid)), timeout=10)
        assert processes_on(worker_database_url()) == []
    finally:
        other.kill()
        other.wait(timeout=10)
