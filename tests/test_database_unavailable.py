"""A database that refuses connections is a 503 with Retry-After, never a 500 with a traceback.

In-process here (the connection pointed at a port nothing listens on); ``tests/test_serving.py``
does it from outside, against gunicorn with a PostgreSQL role out of connections.
"""

from __future__ import annotations

import socket

import psycopg
import pytest
from django.db import DatabaseError, IntegrityError, OperationalError, connection
from django.test import Client
from rest_framework.test import APIClient

from config.unavailable import database_unavailable


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def database_down(transactional_db):
    """From the moment it is entered, this process's connection goes to a closed port."""
    saved = dict(connection.settings_dict)

    def down() -> None:
        connection.close()
        connection.settings_dict.update(HOST="127.0.0.1", PORT=str(_closed_port()))

    yield down
    connection.close()
    connection.settings_dict.clear()
    connection.settings_dict.update(saved)


def _no_traceback(response) -> None:
    body = response.content.decode()
    assert "Traceback" not in body
    assert "psycopg" not in body
    assert "OperationalError" not in body


@pytest.mark.postgres_only
def test_the_api_admin_and_live_pages_answer_503_when_the_database_is_down(
    database_down, lead, case
):
    api = APIClient(raise_request_exception=False)
    api.force_authenticate(user=lead)
    admin = Client(raise_request_exception=False)
    admin.force_login(lead)
    database_down()

    answer = api.get("/api/cases/")
    assert answer.status_code == 503
    assert answer["Retry-After"] == "5"
    assert answer.json() == {
        "error": "database_unavailable",
        "detail": answer.json()["detail"],
        "retry_after": 5,
    }
    assert "try again in 5 seconds" in answer.json()["detail"]
    _no_traceback(answer)

    page = admin.get("/admin/cases/case/")
    assert page.status_code == 503
    assert page["Retry-After"] == "5"
    assert page["Content-Type"].startswith("text/html")
    assert "cannot reach its database" in page.content.decode()
    _no_traceback(page)

    live = admin.get("/admin/live/queues/held/", HTTP_ACCEPT="application/json")
    assert live.status_code == 503
    assert live.json()["error"] == "database_unavailable"


def _django_error(cls, cause: Exception) -> DatabaseError:
    error = cls(str(cause))
    error.__cause__ = cause
    return error


def test_only_a_refused_or_lost_connection_counts_as_unavailable():
    refused = psycopg.OperationalError("connection failed: sorry, too many clients already")
    assert database_unavailable(_django_error(OperationalError, refused))
    assert database_unavailable(
        _django_error(OperationalError, psycopg.errors.TooManyConnections())
    )
    assert database_unavailable(_django_error(OperationalError, psycopg.errors.AdminShutdown()))
    # A query's own trouble is an error of Holdfast's, not the database's availability.
    assert not database_unavailable(
        _django_error(OperationalError, psycopg.errors.DeadlockDetected())
    )
    assert not database_unavailable(_django_error(OperationalError, psycopg.errors.QueryCanceled()))
    assert not database_unavailable(_django_error(IntegrityError, psycopg.errors.UniqueViolation()))
    assert not database_unavailable(ValueError("no"))
