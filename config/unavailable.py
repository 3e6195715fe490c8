"""A database that refuses connections is "try again shortly", never a 500 with a traceback.

When PostgreSQL is out of connections ("too many clients already", or a role's CONNECTION
LIMIT), down, restarting or shutting down, or a connection pool has none to give in time, the
request cannot be served, and the honest answer is ``503`` with ``Retry-After``: the API's
error body (``{"error": "database_unavailable", "detail", "retry_after"}``), JSON for the
admin's live pollers, and a short HTML page for the admin. A query's own error (a constraint,
a deadlock, bad SQL) is not this: it stays a server error.

:class:`DatabaseUnavailableMiddleware` answers for exceptions raised by a view (DRF's views
re-raise them); ``config.views.server_error`` for those raised anywhere else in the request
(a middleware saving the session).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

# SQLSTATE classes of a connection that is refused, lost or being shut down: 08 connection
# exception, 53 insufficient resources (53300 too_many_connections), 57P operator intervention
# (admin or crash shutdown, cannot connect now, database dropped).
UNAVAILABLE_SQLSTATES = ("08", "53", "57P")
SQLITE_UNAVAILABLE = ("database is locked", "unable to open database file")


def database_unavailable(exc: BaseException | None) -> bool:
    """Whether ``exc`` says the database cannot be reached now (not that a query failed)."""
    if isinstance(exc, InterfaceError):
        return True  # the connection is already closed
    if not isinstance(exc, OperationalError):
        return False
    cause = exc.__cause__
    if isinstance(cause, sqlite3.OperationalError):
        return str(cause).startswith(SQLITE_UNAVAILABLE)
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg is a dependency
        return False
    if not isinstance(cause, psycopg.OperationalError):
        return False
    state = getattr(cause, "sqlstate", None)
    # No SQLSTATE: the connection could not be made or was lost (libpq's own errors), or a
    # pool had none to give (psycopg_pool.PoolTimeout).
    return state is None or state.startswith(UNAVAILABLE_SQLSTATES)


def wants_json(request: HttpRequest) -> bool:
    return request.path.startswith("/api/") or "application/json" in request.headers.get(
        "Accept", ""
    )


def unavailable_response(request: HttpRequest) -> HttpResponse:
    """``503`` with ``Retry-After``; rendered without the database (no context processors, no
    session, no user)."""
    seconds = int(settings.DB_UNAVAILABLE_RETRY_AFTER_SECONDS)
    detail = (
        "Holdfast cannot reach its database right now. Nothing is lost: "
        f"try again in {seconds} seconds."
    )
    response: HttpResponse
    if wants_json(request):
        response = JsonResponse(
            {"error": "database_unavailable", "detail": detail, "retry_after": seconds},
            status=503,
        )
    else:
        response = HttpResponse(
            render_to_string("503.html", {"detail": detail, "retry_after": seconds}),
            status=503,
        )
    response["Retry-After"] = str(seconds)
    response["Cache-Control"] = "no-store"
    return response


class DatabaseUnavailableMiddleware:
    """Turn a view's refused database connection into :func:`unavailable_response`."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if database_unavailable(exception):
            return unavailable_response(request)
        return None
