"""``make bench``'s memory goal reads each process of the cluster's session from ``/proc``: its
resident memory and the CPU it used (the busiest is the worker it follows). A process of its own
session that holds 64 MiB shows them; another session's process is not read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lab.bench.end_to_end import session_memory

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")

HOLD = (
    "import time\nblock = bytearray(64 * 1024 * 1024)\nend = time.process_time() + 0.3\n"
    "while time.process_time() < end: pass\nprint('held', flush=True)\ntime.sleep(30)\n"
)


def test_a_session_s_process_shows_its_resident_memory_and_cpu():
    holder = subprocess.Popen(  # noqa: S603 - this interpreter
        [sys.executable, "-c", HOLD], start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        found = session_memory(holder.pid)
    finally:
        holder.kill()
        holder.wait(timeout=10)
    rss, ticks = found[holder.pid]
    assert rss >= 64
    assert ticks > 0
    assert list(found) == [holder.pid]  # nothing of this test's own session
