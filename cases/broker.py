"""The database broker that wakes its cluster at once (``Q_CLUSTER["broker_class"]``).

django-q2's ORM broker looks at an empty queue every ``poll`` seconds: an approval's apply
waited up to that long before a worker took it. On PostgreSQL this broker also sends a
``NOTIFY`` with every enqueue (delivered when the enqueuing transaction commits, so never
before its rows are visible), and its cluster waits on a ``LISTEN`` connection instead of
sleeping: an enqueue wakes it within milliseconds. The poll stays as the fallback (a
notification lost with a dropped connection costs at most one poll), and the sweep stays
the safety net for work whose enqueue was lost. A duplicate wake is harmless: the broker's
compare-and-set on the row's lock, and then the case's claim, decide who runs what.

On another database (SQLite in development) it is the plain ORM broker.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from typing import Any

import psycopg
from django.db import connections
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf

logger = logging.getLogger(__name__)


def channel(list_key: str) -> str:
    """The notification channel of a queue: an identifier whatever the cluster's name."""
    return "holdfast_q_" + hashlib.sha256(list_key.encode()).hexdigest()[:16]


class NotifyingORM(ORM):
    """The ORM broker, plus ``NOTIFY`` on enqueue and ``LISTEN`` instead of the empty poll."""

    def __init__(self, list_key: str | None = None) -> None:
        super().__init__(list_key=list_key or Conf.CLUSTER_NAME)
        self._listener: psycopg.Connection[Any] | None = None

    @staticmethod
    def _postgresql() -> bool:
        return connections[Conf.ORM].vendor == "postgresql"

    def enqueue(self, task: Any) -> Any:
        pk = super().enqueue(task)
        if self._postgresql():
            # In the caller's transaction if it has one: the wake is sent on its commit.
            with connections[Conf.ORM].cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, '')", [channel(self.list_key)])
        return pk

    def dequeue(self) -> list[tuple[int, Any]] | None:
        tasks = self._ready()
        if tasks:
            return tasks
        if not self._postgresql():
            return super().dequeue()  # the plain poll's sleep
        if self._listener is None:
            self._listen()
            return None  # listening now: look again before waiting
        self._wait(Conf.POLL)
        return None

    def _ready(self) -> list[tuple[int, Any]]:
        """The ORM broker's take of due rows (a compare-and-set on each row's lock)."""
        found = []
        queue = self.get_connection().filter(key=self.list_key, lock__lt=timezone.now())
        for task in queue[0 : Conf.BULK]:
            if (
                self.get_connection()
                .filter(id=task.id, lock=task.lock)
                .update(lock=self.timeout(task))
            ):
                found.append((task.pk, task.payload))
        return found

    def _listen(self) -> None:
        params = connections[Conf.ORM].get_connection_params()
        try:
            self._listener = psycopg.connect(**params, autocommit=True)
            self._listener.execute(f"LISTEN {channel(self.list_key)}")
        except psycopg.Error:
            logger.warning("Broker: LISTEN failed, polling every %ss", Conf.POLL, exc_info=True)
            self._close()

    def _wait(self, seconds: float) -> None:
        """Until a notification arrives or ``seconds`` pass (all pending ones consumed)."""
        listener = self._listener
        if listener is None:
            self._listen()
            listener = self._listener
        if listener is None:
            super().dequeue()  # cannot listen: the plain poll
            return
        try:
            for _ in listener.notifies(timeout=seconds, stop_after=1):
                break
            # Drain what else arrived: one look at the queue serves them all.
            for _ in listener.notifies(timeout=0):
                pass
        except psycopg.Error:
            logger.warning("Broker: the LISTEN connection failed; reconnecting", exc_info=True)
            self._close()

    def _close(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(psycopg.Error):
                self._listener.close()
        self._listener = None
