"""Enqueueing background work: only after the transaction that decided it commits.

Tasks are thin entry points (``<app>.tasks``) that re-read state and act only through
services, so a duplicate delivery is harmless. ``django-q2`` never retries on its own
(``max_attempts=1``); Holdfast's services schedule retries through ``next_check_at``.
"""

from __future__ import annotations

from django.db import transaction


def enqueue(func: str, *args) -> None:
    from django_q.tasks import async_task

    async_task(func, *args, group=func.rsplit(".", 1)[-1])


def enqueue_on_commit(func: str, *args) -> None:
    transaction.on_commit(lambda: enqueue(func, *args))
