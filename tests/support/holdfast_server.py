"""Holdfast's own WSGI app served on a loopback port from a thread, for tests in which another
process (the reference order system) must reach Holdfast over HTTP.

pytest-django's ``live_server`` is avoided on purpose: its session-wide server thread left the
test database half-flushed for the transactional tests after it on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.core.wsgi import get_wsgi_application
from django.db import connections
from django.db.backends.signals import connection_created


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
        pass


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


@contextlib.contextmanager
def serve_holdfast(
    *, static_files: bool = False, lock: contextlib.AbstractContextManager | None = None
) -> Iterator[str]:
    """Serve Holdfast on 127.0.0.1 (a free port) and yield its base URL; with
    ``static_files`` also the admin's CSS and JavaScript, which a browser needs. With ``lock``
    each request holds it (SQLite's in-memory test database locks whole tables: a test that
    works the database from another thread at the same time takes the same lock)."""
    app = get_wsgi_application()
    if static_files:
        from django.contrib.staticfiles.handlers import StaticFilesHandler

        app = StaticFilesHandler(app)

    def application(environ, start_response):
        with lock or contextlib.nullcontext():
            try:
                return app(environ, start_response)
            finally:
                connections.close_all()

    connection_created.connect(_read_uncommitted_in_shared_memory, weak=False)
    server = make_server(
        "127.0.0.1", 0, application, server_class=_ThreadingServer, handler_class=_QuietHandler
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        connection_created.disconnect(_read_uncommitted_in_shared_memory)


def _read_uncommitted_in_shared_memory(sender, connection, **kwargs) -> None:
    """On SQLite's in-memory test database (one shared cache for every thread), a read waits
    for no other thread's write transaction: without this, a page the browser fetches by
    itself (an open case page updating in place) while the test thread runs a worker fails
    at once with "database table is locked" (shared-cache locks are per table and have no
    busy timeout). Files and PostgreSQL are untouched."""
    if connection.vendor == "sqlite" and connection.is_in_memory_db():
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA read_uncommitted = 1")
