"""A cluster's worker finds its cluster's stop event on its own call stack, and what a worker
needs for its first apply is loaded before the cluster forks it.

Both were costs each new worker process paid before its first case: the search of the whole
heap for the sentinel (``reconciliation.stopping``) took 55 ms of CPU and copied 34 MB of the
pages the worker shared with the sentinel; httpx's transport, imported when the first client
is built, took 73 ms.
"""

from __future__ import annotations

import gc
import multiprocessing
import signal
import subprocess
import sys

import pytest
from django_q.brokers import Broker
from django_q.cluster import Sentinel

from reconciliation import stopping
from tests.support.proc_worker import REPO_ROOT


def _report_stop_event(results) -> None:
    """In a process the sentinel forked: its cluster's stop event, found without a look at the
    heap, and whether it is the one the cluster sets."""

    def no_heap_search(*args, **kwargs):
        raise AssertionError("the heap was searched for the sentinel")

    gc.get_objects = no_heap_search
    try:
        event = stopping.cluster_stop_event()
    except AssertionError as exc:
        results.put(("error", str(exc)))
        return
    results.put(("found", event is not None))
    results.put(("told", event is not None and event.wait(20)))
    results.put(("stopping", stopping.stopping()))


@pytest.fixture
def sentinel():
    """A real django-q2 sentinel, not started (no pusher, monitor or workers), on django-q2's
    base broker (nothing is queued); its constructor sets the signal handlers a cluster runs
    with, put back after."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    context = multiprocessing.get_context("fork")
    made = Sentinel(
        context.Event(), context.Event(), "stop-event-test", broker=Broker(), start=False
    )
    try:
        yield made
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def test_a_process_the_sentinel_forked_finds_the_clusters_stop_event_on_its_stack(sentinel):
    results = multiprocessing.get_context("fork").Queue()
    child = sentinel.spawn_process(_report_stop_event, results)
    try:
        assert results.get(timeout=20) == ("found", True)
        sentinel.stop_event.set()  # after the child found it: the one the cluster sets
        assert results.get(timeout=20) == ("told", True)
        assert results.get(timeout=20) == ("stopping", True)
    finally:
        child.join(timeout=20)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0


def test_outside_a_cluster_there_is_no_stop_event_and_nothing_stops():
    stopping._found = None  # noqa: SLF001 - looked up afresh, as in a new process
    assert stopping.cluster_stop_event() is None
    assert stopping.stopping() is False


def test_the_order_systems_http_transport_is_loaded_with_django_before_any_fork():
    """What ``qcluster`` has loaded when it forks its workers: ``django.setup()`` and the
    apps' ``ready``. The first client a worker builds then imports nothing."""
    code = (
        "import sys, django; django.setup(); "
        "print(sorted(m for m in ('httpcore', 'h11') if m in sys.modules))"
    )
    done = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "['h11', 'httpcore']", done.stdout[-2000:]
