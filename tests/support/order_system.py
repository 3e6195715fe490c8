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
    SEED_ADDRESS,
    WEBHOOK_SIGNATURE_HEADER,
    WEBHOOK_TIMESTAMP_HEADER,
    OrderSystemProcess,
    webhook_headers,
)

__all__ = [
    "DEFAULT_API_TOKEN",
    "DEFAULT_GRANT_KEY",
    "DEFAULT_WEBHOOK_SECRET",
    "GIFT_MESSAGE_KIND",
    "SEED_ADDRESS",
    "WEBHOOK_SIGNATURE_HEADER",
    "WEBHOOK_TIMESTAMP_HEADER",
    "OrderSystemProcess",
    "order_system",
    "order_system_process",
    "webhook_headers",
]

# A plug-in change kind for tests (``tests/support/orders_gift_message_kind.py``), loaded by
# ``OrderSystemProcess(extra_kinds=[GIFT_MESSAGE_KIND])``.
GIFT_MESSAGE_KIND = "tests.support.orders_gift_message_kind"


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
