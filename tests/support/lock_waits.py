"""A step on a connection of its own that waits for a lock this thread holds (PostgreSQL).

The race tests hold a lock in the test's thread, start the other step, and let the held
transaction commit only once PostgreSQL reports the other step blocked on it
(``pg_blocking_pids``): each run then shows that the two met, not that one happened to run
first."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from django.db import connection, connections


def blocked(pid: int) -> bool:
    """Whether the backend ``pid`` waits for a lock another backend holds."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", [pid])
        return cursor.fetchone()[0]


class Waiter:
    """``body(found)`` started on a thread and connection of its own; what it raised is
    ``found["error"]``."""

    def __init__(self, body: Callable[[dict[str, object]], None]) -> None:
        self.found: dict[str, object] = {}
        self._body = body
        self._pid: list[int] = []
        self._connected = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        assert self._connected.wait(timeout=10), "the other step never connected"

    def _run(self) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self._pid.append(cursor.fetchone()[0])
            self._connected.set()
            self._body(self.found)
        except Exception as exc:  # noqa: BLE001 - reported by the test's thread
            self.found["error"] = repr(exc)
        finally:
            connections.close_all()

    def waits(self, timeout: float = 10) -> bool:
        """Whether it came to wait for a lock within ``timeout`` (False at once if it ended)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.thread.is_alive():
            if blocked(self._pid[0]):
                return True
            time.sleep(0.01)
        return False

    def join(self) -> dict[str, object]:
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the other step never ended"
        return self.found
