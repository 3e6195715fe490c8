"""Health endpoints for load balancers, orchestrators and monitoring.

- ``GET /healthz`` (liveness): the process answers. It touches neither the database nor the
  broker, so a database outage never makes an orchestrator restart healthy web processes.
- ``GET /readyz`` (readiness): the database answers ``SELECT 1``, every migration on disk is
  applied, and the worker side is alive (``reconciliation.health``: ``workers: ok|stale|none``
  with ages). 200 when all three hold, 503 otherwise, with the same JSON body.

Both are unauthenticated, read nothing about cases, cost a constant number of queries (none;
three) and are never cached. Production redirects plain HTTP to HTTPS everywhere except here
(``SECURE_REDIRECT_EXEMPT``), so a probe inside the network may speak plain HTTP; like every
request it must carry a ``Host`` in ``ALLOWED_HOSTS``.
"""

from __future__ import annotations

import functools
from typing import Any

from django.db import DatabaseError, connection
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from reconciliation.health import worker_health


@functools.cache
def _migrations_on_disk() -> dict[tuple[str, str], tuple[tuple[str, str], ...]]:
    """Every migration the code ships, each with the migrations it replaces (squashes).

    Read once per process: the code on disk does not change under a running process.
    """
    loader = MigrationLoader(None, ignore_no_migrations=True)
    return {
        key: tuple(tuple(replaced) for replaced in (migration.replaces or ()))
        for key, migration in loader.graph.nodes.items()
    }


def unapplied_migrations() -> list[str]:
    """``app.name`` of each migration on disk that the database has not recorded (one query).

    A squashed migration counts as applied when the migrations it replaces all are.
    """
    # The recorder's queryset, not ``applied_migrations()``: that one introspects the tables
    # first. A database without the table raises, which the caller reports.
    applied = set(MigrationRecorder(connection).migration_qs.values_list("app", "name"))
    missing = [
        key
        for key, replaces in _migrations_on_disk().items()
        if key not in applied and not (replaces and all(r in applied for r in replaces))
    ]
    return sorted(f"{app}.{name}" for app, name in missing)


@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: this process serves requests. No database, no broker."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: database, migrations and workers; 200 only when all three are ok."""
    body: dict[str, Any] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        body["database"] = "ok"
    except DatabaseError as exc:
        body["database"] = f"error: {type(exc).__name__}"
        body["migrations"] = "unknown"
        body["workers"] = "unknown"
        body["status"] = "unavailable"
        return JsonResponse(body, status=503)
    try:
        missing = unapplied_migrations()
    except DatabaseError as exc:
        body["migrations"] = f"error: {type(exc).__name__}"
    else:
        body["migrations"] = "ok" if not missing else "unapplied"
        if missing:
            body["unapplied_migrations"] = len(missing)
    try:
        workers = worker_health()
    except DatabaseError as exc:
        body["workers"] = "unknown"
        body["workers_error"] = type(exc).__name__
        ready = False
    else:
        body.update(workers.as_dict())
        ready = workers.ok
    ready = ready and body["migrations"] == "ok"
    body["status"] = "ok" if ready else "unavailable"
    return JsonResponse(body, status=200 if ready else 503)
