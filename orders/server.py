"""A small threaded WSGI server that lets a fault reach the client's socket.

Each request runs in a daemon thread; the handler puts its connection socket in the WSGI
environ as ``orders.socket`` so ``drop_after_commit`` can close it without answering. The
write that then fails is swallowed (wsgiref already ignores a client that went away).
"""

from __future__ import annotations

import contextlib
import socketserver
import sys
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from django.db import connections

SOCKET_KEY = "orders.socket"


class QuietHandler(WSGIRequestHandler):
    def get_environ(self) -> dict:
        environ = super().get_environ()
        environ[SOCKET_KEY] = self.connection
        return environ

    def log_message(self, format: str, *args) -> None:
        """Silent: the order system logs nothing per request by default."""

    def finish(self) -> None:
        with contextlib.suppress(OSError):  # the connection was dropped on purpose
            super().finish()


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            connections.close_all()  # each thread's own database connection

    def handle_error(self, request, client_address) -> None:
        """Dropped and reset connections are expected here; anything else is reported."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            return
        super().handle_error(request, client_address)


def make_server(host: str, port: int, app) -> ThreadingWSGIServer:
    server = ThreadingWSGIServer((host, port), QuietHandler)
    server.set_app(app)
    return server
