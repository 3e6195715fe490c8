"""The cluster liveness watchdog's decision (``reconciliation.liveness.Watchdog``), on a fake
clock and a real beat file; ``test_cluster_liveness.py`` proves it with real processes."""

from __future__ import annotations

import os
import time

from reconciliation.liveness import Watchdog


class _Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _watchdog(tmp_path, *, fail: bool = False):
    queued: list[float] = []
    clock = _Clock()

    def enqueue() -> None:
        if fail:
            raise ConnectionError("broker refused")
        queued.append(clock.now)

    dog = Watchdog(
        beat=tmp_path / "beat", stale_after=10, probe_every=2, enqueue_probe=enqueue, clock=clock
    )
    dog.reset()
    os.utime(dog.beat, (clock.now, clock.now))
    return dog, clock, queued


def _beat(dog, at: float) -> None:
    os.utime(dog.beat, (at, at))


def test_a_quiet_cluster_gets_a_probe_and_is_wedged_only_when_it_waits_past_the_bound(tmp_path):
    dog, clock, queued = _watchdog(tmp_path)
    clock.now += 1
    assert dog.check() is None
    assert queued == []
    clock.now += 1.5
    assert dog.check() is None
    assert len(queued) == 1
    clock.now += 9
    assert dog.check() is None
    assert len(queued) == 1
    clock.now += 1.5
    assert "no task started" in (dog.check() or "")  # waited 10.5 s: wedged


def test_a_task_started_after_the_probe_keeps_the_cluster_live(tmp_path):
    dog, clock, queued = _watchdog(tmp_path)
    clock.now += 3
    assert dog.check() is None
    assert len(queued) == 1
    clock.now += 5
    _beat(dog, clock.now)  # the probe (or any task) was taken
    clock.now += 8
    assert dog.check() is None  # 13 s after the probe, but a task started since
    assert len(queued) == 2  # quiet again since: the next probe


def test_a_probe_that_cannot_be_queued_is_no_evidence_of_a_wedge(tmp_path):
    dog, clock, _ = _watchdog(tmp_path, fail=True)
    for _ in range(10):
        clock.now += 5
        assert dog.check() is None
