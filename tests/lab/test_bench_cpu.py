"""``make bench``'s CPU split: what each side of a run used, read from ``/proc``.

The split says where an apply's time goes (the workers, Holdfast's PostgreSQL, the order system
and its PostgreSQL); these check that it counts a process of the session it names and a backend
of the database it names, one that existed before the window and one that started in it, and
nothing of anyone else.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from lab.bench.cpu import CpuSplit

pytestmark = [
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)"),
]

BURN = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"


def _burning() -> subprocess.Popen:
    """A process of its own session that burns 400 ms of CPU, then waits to be read."""
    return subprocess.Popen(  # noqa: S603 - this interpreter
        [sys.executable, "-c", BURN + "print('burnt', flush=True)\ntime.sleep(30)\n"],
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_session_s_processes_count_and_another_session_s_do_not():
    idle = subprocess.Popen(  # noqa: S603 - this interpreter
        [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
    )
    meter = CpuSplit.start(sessions={"idle": idle.pid}, databases={})
    busy = _burning()  # started in the window: counted whole
    try:
        assert meter is not None
        meter.sessions["busy"] = busy.pid
        assert busy.stdout is not None
        assert busy.stdout.readline().strip() == "burnt"
        split = meter.per_apply_ms(1)
        assert meter.per_apply_ms(4)["busy"] == pytest.approx(split["busy"] / 4, abs=20)
    finally:
        idle.kill()
        busy.kill()
    assert split["busy"] >= 300
    assert split["idle"] < 100


def test_a_backend_of_the_named_database_that_started_in_the_window_is_counted(db):
    if connection.vendor != "postgresql":
        pytest.skip("counts PostgreSQL backends")
    meter = CpuSplit.start(sessions={}, databases={"pg": connection.settings_dict["NAME"]})
    assert meter is not None
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
        other.execute("SELECT count(*) FROM generate_series(1, 3000000)").fetchone()
        split = meter.per_apply_ms(1)
    assert split["pg"] >= 50  # a few hundred ms of the server's CPU
