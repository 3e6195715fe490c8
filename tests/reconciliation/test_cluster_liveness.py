"""A wedged worker cluster cannot stop the desk (``manage.py run_cluster``).

django-q2's workers read one ``multiprocessing.Queue``; the worker blocked reading its pipe
holds the queue's read lock, the others wait for that lock. SIGKILL that worker while it is
idle and the lock is never released: every worker blocks for good, although the sentinel
reincarnates the dead one (django-q2 issue #23). These tests kill exactly that worker (the one
in ``read()`` on the queue's pipe, read from ``/proc``), so the wedge happens every time, then
open a new case and require it to reach review within a bound: the liveness watchdog ends the
wedged cluster (exit 3) and the process manager (here the test) starts a new one.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
from django.utils import timezone

from cases.models import Case, Status
from reconciliation.liveness import WEDGED_EXIT
from tests.support.order_system import DEFAULT_GRANT_KEY
from tests.support.proc_worker import Proc, wait_for

pytestmark = [
    pytest.mark.order_system,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]

BOUND = 30.0  # seconds from opening the case to its proposal in review
STALE_AFTER = 10.0  # Q_LIVENESS_SECONDS: more than Q_TIMEOUT (8 s here)


def _env(live_orders, tmp_path, **extra: str) -> dict[str, str]:
    return {
        "ORDER_SYSTEM_URL": live_orders.base_url,
        "APPROVAL_GRANT_KEY": DEFAULT_GRANT_KEY,
        "HOLDFAST_STATE_DIR": str(tmp_path / "worker-state"),
        "Q_TIMEOUT": "8",
        "Q_RETRY": "20",
        "Q_LIVENESS_SECONDS": str(STALE_AFTER),
        "Q_LIVENESS_PROBE_SECONDS": "2",
        "SOURCE_CHECK_LEASE_SECONDS": "4",
        "SOURCE_CHECK_HEARTBEAT_SECONDS": "1",
        "PREPARE_LEASE_SECONDS": "4",
        "PREPARE_HEARTBEAT_SECONDS": "1",
        **extra,
    }


class Supervised:
    """``manage.py run_cluster`` under a minimal process manager: restarted when it exits."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.runs: list[Proc] = []
        self.exits: list[int] = []

    def __enter__(self) -> Supervised:
        self._start()
        return self

    def _start(self) -> None:
        self.runs.append(Proc("run_cluster", env=self.env).__enter__())

    @property
    def current(self) -> Proc:
        return self.runs[-1]

    def poll(self) -> None:
        process = self.current.process
        assert process is not None
        code = process.poll()
        if code is not None:
            self.exits.append(code)
            self._start()

    def output(self) -> str:
        return "\n---- restarted ----\n".join(run.output() for run in self.runs)

    def __exit__(self, *exc_info: object) -> None:
        for run in self.runs:
            run.__exit__(None, None, None)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _queue_reader(output: str) -> int | None:
    """The live worker blocked in ``read()`` on the task queue's pipe: it holds the lock."""
    for pid in map(int, re.findall(r"ready for work at (\d+)", output)):
        if not _alive(pid):
            continue
        try:
            syscall = Path(f"/proc/{pid}/syscall").read_text().split()
        except OSError:
            continue
        if syscall and syscall[0] == "0":  # read(2) on x86_64
            return pid
    return None


def _status(case: Case) -> str:
    return Case.objects.filter(pk=case.pk).values_list("status", flat=True).get()


@pytest.mark.parametrize("broker", ["orm", "redis"])
def test_a_cluster_wedged_by_killing_an_idle_worker_is_replaced_and_new_work_reaches_review(
    broker, broker_env, make_case, live_orders, autonomous, tmp_path
):
    with Supervised(_env(live_orders, tmp_path, **broker_env)) as cluster:
        first = cluster.current
        reader = wait_for(
            lambda: _queue_reader(first.output()),
            timeout=30,
            interval=0.2,
            what=lambda: f"an idle worker reading the task queue\n{first.output()}",
        )
        os.kill(reader, signal.SIGKILL)
        case = make_case()
        Case.objects.filter(pk=case.pk).update(next_check_at=timezone.now())
        opened = time.monotonic()

        def reviewed() -> bool:
            cluster.poll()
            return _status(case) == Status.AWAITING_REVIEW

        wait_for(
            reviewed,
            timeout=BOUND + 15,
            interval=0.2,
            what=lambda: f"the new case to reach review\n{cluster.output()}",
        )
        took = time.monotonic() - opened
        print(
            f"\n{broker}: idle queue reader killed; cluster exits {cluster.exits}; "
            f"new case in review {took:.1f} s after it was opened (bound {BOUND:g} s)"
        )
        # The kill wedged the cluster: the watchdog ended it and a new one did the work.
        assert cluster.exits == [WEDGED_EXIT], cluster.output()
        assert "Cluster wedged" in first.output(), first.output()
        assert took <= BOUND, cluster.output()
