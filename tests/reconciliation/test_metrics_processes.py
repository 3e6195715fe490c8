"""Process metrics across processes: prometheus-client's multiprocess mode with slots.

Each test runs real processes with ``PROMETHEUS_MULTIPROC_DIR`` set (this test process keeps
its own values in memory and only reads the directory). The slots keep the directory as small
as the most processes that ever ran at once, and a process that takes a dead one's slot counts
on from its values: counters never go down, whatever process died how.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest
from django.utils import timezone
from prometheus_client import CollectorRegistry
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector

from cases.logcontext import FIELDS
from cases.models import Case
from tests.support.fixtures import days_ahead
from tests.support.order_system import DEFAULT_GRANT_KEY
from tests.support.proc_worker import Proc, wait_for

ROOT = Path(__file__).resolve().parents[2]
COUNTER = "holdfast_lease_expiries"


def _python(metrics_dir: Path, code: str) -> subprocess.Popen[str]:
    """A Python process counting into ``metrics_dir`` (``reconciliation.metrics`` needs no
    Django); it prints ``ready`` once it holds its slot."""
    program = textwrap.dedent(
        """
        import os, sys, time
        from reconciliation import metrics
        print("ready", metrics.slot_number(), flush=True)
        """
    ) + textwrap.dedent(code)
    return subprocess.Popen(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", program],
        cwd=ROOT,
        env={"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
    )


def _ready(process: subprocess.Popen[str]) -> int:
    assert process.stdout is not None
    line = process.stdout.readline().split()
    assert line[:1] == ["ready"], line
    return int(line[1])


def _total(metrics_dir: Path, name: str = COUNTER) -> float:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(metrics_dir))
    return registry.get_sample_value(name + "_total") or 0.0


def _per_file(metrics_dir: Path, name: str = COUNTER) -> dict[str, float]:
    found = {}
    for path in sorted(metrics_dir.glob("counter_*.db")):
        for key, value, _timestamp, _pos in MmapedDict.read_all_values_from_file(str(path)):
            if key.startswith(f'["{name}",'):
                found[path.name] = found.get(path.name, 0.0) + value
    return found


def test_processes_that_run_one_after_another_share_one_slot_and_count_on(tmp_path):
    """Three processes in turn, the second killed with SIGKILL: each took slot 0 (the kernel
    releases a dead process's lock) and counted on from the last one's value."""
    first = _python(tmp_path, "metrics.lease_expired()\n")
    assert _ready(first) == 0
    assert first.wait(timeout=30) == 0

    second = _python(
        tmp_path, "metrics.lease_expired()\nprint('counted', flush=True)\ntime.sleep(60)\n"
    )
    assert _ready(second) == 0
    assert second.stdout is not None
    assert second.stdout.readline().strip() == "counted"
    second.send_signal(signal.SIGKILL)
    second.wait(timeout=10)

    third = _python(tmp_path, "metrics.lease_expired()\n")
    assert _ready(third) == 0
    assert third.wait(timeout=30) == 0

    assert _total(tmp_path) == 3
    assert list(_per_file(tmp_path)) == ["counter_0.db"]
    assert (tmp_path / "slot-0.lock").read_text().strip() == str(third.pid)


def test_processes_running_at_once_take_their_own_slots_and_add_up(tmp_path):
    holders = [_python(tmp_path, "metrics.lease_expired()\ntime.sleep(30)\n") for _ in range(3)]
    try:
        slots = sorted(_ready(process) for process in holders)
        assert slots == [0, 1, 2]
        wait_for(lambda: _total(tmp_path) == 3, timeout=20, what="three counts")
        assert sorted(_per_file(tmp_path).values()) == [1.0, 1.0, 1.0]
    finally:
        for process in holders:
            process.kill()
            process.wait(timeout=10)
    # Their slots are free again: the next process takes the lowest, and counts on from it.
    later = _python(tmp_path, "metrics.lease_expired()\n")
    assert _ready(later) == 0
    assert later.wait(timeout=30) == 0
    assert _total(tmp_path) == 4
    assert len(list(tmp_path.glob("counter_*.db"))) == 3


def test_a_forked_child_counts_in_a_slot_of_its_own(tmp_path):
    """django-q2 forks its workers from the cluster's process after Django (and so this
    module) is loaded: a child must not write its parent's files."""
    parent = _python(
        tmp_path,
        """
        metrics.lease_expired()
        children = []
        for _ in range(2):
            pid = os.fork()
            if pid == 0:
                metrics.lease_expired()
                metrics.lease_expired()
                print("child", metrics.slot_number(), flush=True)
                time.sleep(2)  # both children alive at once
                os._exit(0)
            children.append(pid)
        for pid in children:
            os.waitpid(pid, 0)
        """,
    )
    assert _ready(parent) == 0
    assert parent.stdout is not None
    children = sorted(int(parent.stdout.readline().split()[1]) for _ in range(2))
    assert parent.wait(timeout=30) == 0
    assert children == [1, 2]
    assert _total(tmp_path) == 5
    assert _per_file(tmp_path) == {"counter_0.db": 1.0, "counter_1.db": 2.0, "counter_2.db": 2.0}


def test_a_scrape_reads_every_slot_in_well_under_a_tenth_of_a_second(tmp_path):
    """The directory a scrape reads stays small: 16 slots' files, read and summed."""
    holders = [_python(tmp_path, "metrics.lease_expired()\ntime.sleep(30)\n") for _ in range(16)]
    try:
        for process in holders:
            _ready(process)
        wait_for(lambda: _total(tmp_path) == 16, timeout=30, what="sixteen counts")
        started = time.perf_counter()
        for _ in range(10):
            _total(tmp_path)
        per_scrape = (time.perf_counter() - started) / 10
    finally:
        for process in holders:
            process.kill()
            process.wait(timeout=10)
    print(f"\nreading 16 slots' files: {per_scrape * 1000:.1f} ms a scrape")
    assert per_scrape < 0.1


@pytest.mark.order_system
@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_clusters_worker_processes_add_up_to_the_order_systems_own_count(
    approved_case, live_orders, account, tmp_path
):
    """A real ``qcluster`` (two task workers and the sweeper's, the ORM broker) applies eight
    cases, one task each: more than one worker process counted, and the sums equal what the
    order system itself recorded. Its log lines are JSON, and every line of an apply names the
    case, operation, attempt, fencing token and worker."""
    orders = [f"ORD-MP{i}" for i in range(8)]
    live_orders.seed(
        orders=[
            {
                "order_id": order,
                "account_id": account.reference,
                "delivery_date": str(days_ahead(3)),
            }
            for order in orders
        ]
    )
    # A date each: a slot holds five deliveries.
    cases = [
        approved_case(order_id=order, request_key=f"mp-{order}", delivery_date=days_ahead(5 + i))
        for i, order in enumerate(orders)
    ]
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    env = {
        "ORDER_SYSTEM_URL": live_orders.base_url,
        "APPROVAL_GRANT_KEY": DEFAULT_GRANT_KEY,
        "HOLDFAST_STATE_DIR": str(tmp_path / "worker-state"),
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        "APPLY_DRAIN_SECONDS": "0",  # one case per task: the cluster's workers share them
        "Q_WORKERS": "2",
        "LOG_FORMAT": "json",
        # The console backend prints each mail on standard output between the log lines.
        "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
    }
    Case.objects.filter(pk__in=[c.pk for c in cases]).update(next_check_at=timezone.now())
    with Proc("qcluster", env=env) as cluster:
        try:
            wait_for(
                lambda: (
                    Case.objects.filter(pk__in=[c.pk for c in cases], status="done").count() == 8
                ),
                timeout=90,
                interval=0.2,
                what="the cluster to apply eight cases",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{cluster.output()[-6000:]}") from None
        # A worker logs "… ended: done" after the close commits: the last line may follow the
        # last case's status by a moment (7 of the 8 lines were read once in CI).
        wait_for(
            lambda: cluster.output().count(' ended: done"') >= 8,
            timeout=10,
            interval=0.1,
            what="every worker's last log line",
        )
        output = cluster.output()

    applied_there = sum(
        1
        for order in orders
        for op in live_orders.state(order)["operations"]
        if op["status"] == "applied"
    )
    assert applied_there == 8
    requests = "holdfast_order_system_requests"
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(metrics_dir))
    sent = registry.get_sample_value(
        f"{requests}_total", {"call": "apply_operation", "outcome": "201"}
    )
    assert sent == applied_there
    assert registry.get_sample_value("holdfast_apply_attempts_total", {"outcome": "applied"}) == 8
    assert registry.get_sample_value("holdfast_approval_to_applied_seconds_count") == 8
    writers = [
        name
        for name, count in _per_file(metrics_dir, "holdfast_apply_attempts").items()
        if count > 0
    ]
    assert len(writers) >= 2, f"one process applied everything: {writers}"

    lines = [line for line in output.splitlines() if line.strip()]
    not_json = [line for line in lines if not line.startswith("{")]
    assert not not_json, not_json[:5]
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    keys = {"time", "level", "logger", "message", *FIELDS}
    assert all(keys <= set(record) for record in records)
    ended = [r for r in records if r["message"].endswith(": done") and r["attempt"]]
    assert len(ended) == 8
    references = {c.reference for c in cases}
    for record in ended:
        assert record["case"] in references
        assert record["operation"].startswith("DATE-")
        assert record["attempt"].startswith(record["case"] + "-a")
        assert isinstance(record["fencing_token"], int)
        assert record["worker"].startswith(("apply:", "notify:"))  # the last step ends it


def test_a_worker_hosts_exporter_serves_its_processes_counts_with_the_token(tmp_path):
    """``manage.py serve_metrics`` on a worker host: the counts its processes wrote, behind the
    same bearer token as the web's /metrics, and none of the database gauges."""
    counter = _python(tmp_path, "metrics.lease_expired()\nmetrics.lease_expired()\n")
    assert counter.wait(timeout=30) == 0
    token = "w" * 40
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DATABASE", "DJANGO"))},
        "DJANGO_ENV": "test",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'unused.sqlite3'}",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        "METRICS_TOKEN": token,
    }
    server = subprocess.Popen(  # noqa: S603 - our own interpreter and manage.py
        [sys.executable, "manage.py", "serve_metrics", "--port", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split(" at ")[1].strip()
        refused = httpx.get(url, timeout=10)
        served = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        elsewhere = httpx.get(url.replace("/metrics", "/admin/"), timeout=10)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert refused.status_code == 401
    assert served.status_code == 200
    assert "holdfast_lease_expiries_total 2.0" in served.text
    assert "holdfast_cases_open" not in served.text  # the web's scrape reports the database
    assert elsewhere.status_code == 404
