"""The workers give way to people (``reconciliation.priority``): a real ``qcluster``'s worker
processes run at ``WORKER_CPU_NICE``, and so does the cluster's session when the cluster leads
it (Linux shares the CPU between sessions first); a session led by anything else is left as
it is, and 0 changes nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reconciliation import priority
from tests.support.proc_worker import REPO_ROOT, Proc, child_env, wait_for

AUTOGROUPS = Path("/proc/self/autogroup").exists()

needs_autogroups = pytest.mark.skipif(
    not AUTOGROUPS, reason="this kernel has no scheduler autogroups (/proc/self/autogroup)"
)


def real_cluster(test):
    """A real qcluster on the test's PostgreSQL database (another process reads it)."""
    marks = (needs_autogroups, pytest.mark.postgres_only, pytest.mark.django_db(transaction=True))
    for mark in marks:
        test = mark(test)
    return test


def _nice(pid: int) -> int:
    # /proc/PID/stat: the 19th field is the nice value (after the command, which may hold spaces).
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[16])


def _session_nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


def _workers(output: str, count: int) -> list[int]:
    """The pids of the cluster's live workers, from their "ready for work at PID" lines."""
    pids = {int(pid) for pid in re.findall(r"ready for work at (\d+)", output)}
    alive = sorted(pid for pid in pids if Path(f"/proc/{pid}").exists())
    return alive if len(alive) >= count else []


def _all_at(pids: list[int], nice: int) -> bool:
    """Each worker gives way just after it says it is ready (``post_spawn``): wait for it."""
    return all(_nice(pid) == nice for pid in pids)


ENV = {"Q_WORKERS": "2", "WORKER_CPU_NICE": "10"}


@real_cluster
def test_a_cluster_in_a_session_of_its_own_gives_way_with_its_session(tmp_path):
    with Proc("qcluster", env={**ENV, "HOLDFAST_STATE_DIR": str(tmp_path)}) as cluster:
        assert cluster.process is not None
        workers = wait_for(
            lambda: _workers(cluster.output(), 2),
            timeout=60,
            what=lambda: f"two workers ready\n{cluster.output()}",
        )
        # The session's (its leader is the cluster's main process): what counts against the
        # web app's session.
        wait_for(
            lambda: _session_nice(cluster.process.pid) == 10,
            timeout=10,
            what="the cluster's session at nice 10",
        )
        wait_for(lambda: _all_at(workers, 10), timeout=10, what="the workers at nice 10")
        assert _nice(cluster.process.pid) == 0  # the main process only waits


@real_cluster
def test_a_session_the_cluster_does_not_lead_is_left_as_it_is(tmp_path):
    """A shell leads the session (it may run other work): only the workers give way."""
    env = child_env({**ENV, "HOLDFAST_STATE_DIR": str(tmp_path)})
    log = tmp_path / "cluster.log"
    with log.open("wb") as out:
        shell = subprocess.Popen(  # noqa: S603 - our own interpreter and manage.py
            ["/bin/sh", "-c", f'"{sys.executable}" manage.py qcluster; exit 0'],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        workers = wait_for(
            lambda: _workers(log.read_text(errors="replace"), 2),
            timeout=60,
            what=f"two workers ready\n{log.read_text(errors='replace')}",
        )
        wait_for(lambda: _all_at(workers, 10), timeout=10, what="the workers at nice 10")
        assert _session_nice(shell.pid) == 0
        assert os.getsid(workers[0]) == shell.pid
    finally:
        os.killpg(shell.pid, 9)
        shell.wait(timeout=10)


@real_cluster
def test_0_leaves_the_cluster_as_it_is(tmp_path):
    env = {**ENV, "WORKER_CPU_NICE": "0", "HOLDFAST_STATE_DIR": str(tmp_path)}
    with Proc("qcluster", env=env) as cluster:
        assert cluster.process is not None
        workers = wait_for(lambda: _workers(cluster.output(), 2), timeout=60, what=cluster.output())
        assert _all_at(workers, 0)
        assert _session_nice(cluster.process.pid) == 0


@pytest.mark.parametrize(
    ("argv", "cluster"),
    [
        ([sys.executable, "-c", "import time; time.sleep(30)", "qcluster"], True),
        ([sys.executable, "-c", "import time; time.sleep(30)", "run_cluster"], True),
        # A shell whose command names a cluster may run anything else beside it.
        (["/bin/sh", "-c", "sleep 30; echo manage.py qcluster"], False),
        ([sys.executable, "-c", "import time; time.sleep(30)", "runserver"], False),
    ],
)
def test_a_session_is_the_clusters_when_its_leader_runs_a_cluster_command(argv, cluster):
    leader = subprocess.Popen(argv, start_new_session=True)  # noqa: S603 - fixed commands
    try:
        wait_for(
            lambda: Path(f"/proc/{leader.pid}/cmdline").read_bytes().startswith(argv[0].encode()),
            timeout=10,
            what="the leader's command",
        )
        assert priority.session_led_by_cluster(leader.pid) is cluster
        assert not priority.session_led_by_cluster()  # the test runner's own session
    finally:
        leader.kill()
        leader.wait(timeout=10)
