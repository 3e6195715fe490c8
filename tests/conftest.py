"""Test configuration shared by both suites.

Holdfast's suite runs with ``config.settings``; the order system's own suite (``tests/orders``)
runs as a separate invocation with ``--ds=orders.settings``, because the order system is a
separate service with its own database. Both run on SQLite and on PostgreSQL; tests marked
``postgres_only`` prove row locks and races and are skipped on SQLite with a reason.
"""

from __future__ import annotations

import os

import pytest
from django.db import connection

if os.environ.get("DJANGO_SETTINGS_MODULE") == "orders.settings":
    collect_ignore = ["cases", "approvals", "reconciliation", "test_setup.py"]
else:
    collect_ignore = ["orders"]
    from django.db.backends.signals import connection_created

    from tests.support.fixtures import *  # noqa: F403
    from tests.support.order_system import *  # noqa: F403
    from tests.support.smtp import smtp  # noqa: F401 - a real SMTP server (staff mail)

    def _allow_test_flush(sender, connection, **kwargs):
        """Flushing a test database truncates the append-only event table; test sessions
        connect as the table's owner (a superuser) and opt into maintenance, which only the
        owner may use (see cases/migrations/0010)."""
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET holdfast.maintenance = 'on'")

    connection_created.connect(_allow_test_flush, weak=False)

    @pytest.fixture(autouse=True)
    def _fast_password_hasher(settings):
        """Fixture users get passwords, and PBKDF2's million rounds made creating the three of
        a team half the time of the suite's live-order-system tests. MD5 hashes what is made
        here; the configured hashers stay listed, so any hash still verifies."""
        fast = "django.contrib.auth.hashers.MD5PasswordHasher"
        settings.PASSWORD_HASHERS = [fast, *(h for h in settings.PASSWORD_HASHERS if h != fast)]

    @pytest.fixture(autouse=True)
    def _no_process_outlives_its_test(request):
        """A test on PostgreSQL that starts worker processes on its database must leave none
        running: one that outlived its test takes a later test's queued tasks (and due cases)
        and writes its orders, a failure far from its cause. Checked when the test ends (after
        its other fixtures): any found is killed and the test fails with each one's command
        line and the test that started it."""
        yield
        if connection.vendor != "postgresql":
            return
        marker = request.node.get_closest_marker("django_db")
        if not (
            "postgres_only" in request.keywords
            or "transactional_db" in request.fixturenames
            or (marker is not None and marker.kwargs.get("transaction"))
        ):
            return  # the test's rows are invisible to another process: none ran on them
        from tests.support.proc_worker import kill_processes_on, worker_database_url

        left = kill_processes_on(worker_database_url(), grace=3.0)
        if left:
            pytest.fail(
                "processes on the test database outlived their test (killed now):\n"
                + "\n".join(left),
                pytrace=False,
            )


def pytest_collection_modifyitems(config, items):
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL: SQLite ignores row locks (see STACK-NOTES)")
    for item in items:
        if "postgres_only" in item.keywords:
            item.add_marker(skip)
