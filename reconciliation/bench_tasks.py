"""Tasks for ``manage.py bench`` only: a django-q2 task that does nothing (the broker's cost)."""

from __future__ import annotations


def noop() -> None:
    """Do nothing: the time a worker cluster needs per task is then all overhead."""
