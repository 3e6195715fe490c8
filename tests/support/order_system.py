"""The reference order system's pytest fixtures; the process itself is the lab's
(``lab.order_system.OrderSystemProcess``), which ``manage.py simulate`` uses too.

Register it with ``pytest_plugins = ["tests.support.order_system"]`` (``tests/conftest.py``
does) to get the fixtures:

- ``order_system_process`` (session): one running order system, stopped at the end;
- ``order_system`` (function): the same process after ``reset()`` (no rows, no faults).
"""

from __future__ import annotations

import pytest

from lab.order_system import (
    DEFAULT_API_TOKEN,
    DEFAULT_GRANT_KEY,
    DEFAULT_WEBHOOK_SECRET,
    OrderSystemProcess,
)

__all__ = [
    "DEFAULT_API_TOKEN",
    "DEFAULT_GRANT_KEY",
    "DEFAULT_WEBHOOK_SECRET",
    "OrderSystemProcess",
    "order_system",
    "order_system_process",
]


@pytest.fixture(scope="session")
def order_system_process():
    """One order system process for the session (SQLite, or PostgreSQL when configured)."""
    process = OrderSystemProcess().start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def order_system(order_system_process: OrderSystemProcess) -> OrderSystemProcess:
    """The session's order system, emptied of rows and faults before the test."""
    order_system_process.reset()
    return order_system_process
