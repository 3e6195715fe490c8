"""Enqueueing background work: only after the transaction that decided it commits.

Tasks are thin entry points (``<app>.tasks``) that re-read state and act only through
services, so a duplicate delivery is harmless. ``django-q2`` never retries on its own
(``max_attempts=1``); Holdfast's services schedule retries through ``next_check_at``.
"""

from __future__ import annotations

from collections import deque

from django.db import transaction

# Set by ``run_in_process``: this process runs its own tasks (``run_worker``), so an enqueue
# lands here instead of the broker. Nothing is lost if the process dies before running one:
# every enqueue of stage work follows a due ``next_check_at`` the next sweep finds.
_local: deque[tuple[str, tuple]] | None = None


def run_in_process(queue: deque[tuple[str, tuple]] | None) -> None:
    """Route this process's enqueues into ``queue`` (``None``: back to the broker)."""
    global _local
    _local = queue


def enqueue(func: str, *args) -> None:
    if _local is not None:
        _local.append((func, args))
        return
    from django_q.tasks import async_task

    async_task(func, *args, group=func.rsplit(".", 1)[-1])


def enqueue_on_commit(func: str, *args) -> None:
    transaction.on_commit(lambda: enqueue(func, *args))
