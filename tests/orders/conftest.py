"""Fixtures for the reference order system's own tests.

These tests need the order system's settings:
``.venv/bin/python -m pytest --ds=orders.settings tests/orders -p no:cacheprovider``.
Under any other settings module the directory is skipped (the ``orders`` app is not installed).
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("DJANGO_SETTINGS_MODULE") != "orders.settings":
    collect_ignore_glob = ["test_*.py", "helpers.py"]
else:
    from tests.orders.helpers import Api, seed_rows
    from tests.support.order_system import (  # noqa: F401 - fixtures
        order_system,
        order_system_process,
    )


@pytest.fixture
def seeded(db) -> None:
    seed_rows()


@pytest.fixture
def api(client) -> Api:
    return Api(client)


@pytest.fixture
def faults_on(settings) -> None:
    settings.ORDERS_FAULTS_ENABLED = True
