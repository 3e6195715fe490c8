"""A small threaded HTTP/1.1 WSGI server (keep-alive) that lets a fault reach the socket.

Each TCP connection runs in a daemon thread that answers its requests one after another
(HTTP/1.1 keep-alive) until the client closes it, sends ``Connection: close``, idles for
``IDLE_TIMEOUT_SECONDS``, or a response goes out without a ``Content-Length`` (then the
connection is closed after it: without a length the client cannot find the next answer).
``orders.middleware.ContentLengthMiddleware`` gives every non-streaming answer its length.

The thread's database connection lives as long as the TCP connection: Django's own
``close_old_connections`` runs at the start and end of every request and keeps it only while it
is usable (``close_if_unusable_or_obsolete``: an error on a broken connection, an obsolete
``CONN_MAX_AGE`` or an unfinished transaction closes it; ``CONN_HEALTH_CHECKS`` pings it before
its first use in a request). The thread closes it when the TCP connection ends.

The handler puts its connection socket in the WSGI environ as ``orders.socket`` so
``drop_after_commit`` can close it without answering; the write that then fails is swallowed,
and a request whose environ says ``orders.dropped`` ends its TCP connection (no further request
is read from it), so the client sees the drop exactly as before keep-alive.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import sys
import threading
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from django.core.servers.basehttp import ServerHandler
from django.db import connections

SOCKET_KEY = "orders.socket"
# Set by ``orders.middleware.FaultInjectionMiddleware`` when it dropped the connection.
DROPPED_KEY = "orders.dropped"
# An idle keep-alive connection is closed after this long. Longer than httpx's keep-alive
# expiry (5 s): a client never reuses a connection this server is about to close.
IDLE_TIMEOUT_SECONDS = 30.0


class CoalescingServerHandler(ServerHandler):
    """Django's ``ServerHandler`` that sends an answer's status line, headers and body in one
    write: wsgiref writes them piece by piece (status line, ``Date``, ``Server``, the other
    headers, then the body), and with ``TCP_NODELAY`` each piece is a system call and a TCP
    segment of its own. The bytes and their order are unchanged: what ``_write`` queues goes
    out at wsgiref's own flush points (after every body chunk) and, for whatever an answer
    queued without one (headers of an empty streaming body, an interrupted answer), at
    :meth:`flush_pending` once ``run`` returns."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: list[bytes] = []

    def _write(self, data: bytes) -> None:
        self._pending.append(data)

    def _flush(self) -> None:
        self.flush_pending()
        self.stdout.flush()

    def flush_pending(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            self.stdout.write(data)


class QuietHandler(WSGIRequestHandler):
    """One TCP connection: requests answered in turn while the connection stays open."""

    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT_SECONDS  # StreamRequestHandler applies it to the socket
    # TCP_NODELAY: the status line, headers and body go out in separate writes; with Nagle on,
    # a kept-alive connection waits for the client's delayed ACK (~40 ms) on every answer.
    disable_nagle_algorithm = True

    def get_environ(self) -> dict:
        environ = super().get_environ()
        environ[SOCKET_KEY] = self.connection
        return environ

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the order system logs nothing per request by default."""

    def address_string(self) -> str:
        return str(self.client_address[0])  # no reverse DNS lookup

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()
        while not self.close_connection:
            self.handle_one_request()
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_WR)

    def handle_one_request(self) -> None:
        """Read and answer one request; any reason not to go on sets ``close_connection``."""
        self.close_connection = True
        try:
            self.raw_requestline = self.rfile.readline(65537)
        except (TimeoutError, OSError):
            return  # idle too long, or the client went away
        if not self.raw_requestline:
            return  # the client closed the connection
        if len(self.raw_requestline) > 65536:
            self.requestline = ""
            self.request_version = ""
            self.command = ""
            self.send_error(414)
            return
        if not self.parse_request():  # an error was sent; parse_request set close_connection
            return
        environ = self.get_environ()
        # Django's ServerHandler: HTTP/1.1, drains an unread request body, and sends
        # ``Connection: close`` (setting our ``close_connection``) for an answer without a length.
        handler = CoalescingServerHandler(self.rfile, self.wfile, self.get_stderr(), environ)
        handler.request_handler = self  # type: ignore[attr-defined]
        try:
            handler.run(self.server.get_app())  # type: ignore[attr-defined]
        finally:
            try:
                handler.flush_pending()
            except OSError:  # the client went away (or the answer was dropped on purpose)
                self.close_connection = True
        if environ.get(DROPPED_KEY):
            self.close_connection = True

    def finish(self) -> None:
        with contextlib.suppress(OSError):  # the connection was dropped on purpose
            super().finish()


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    """Daemon thread per TCP connection; counts the connections it accepted (``accepted``)."""

    daemon_threads = True
    allow_reuse_address = True
    # socketserver listens with a backlog of 5: a burst of new connections past it (a cluster
    # starting, several hosts behind one forwarder) has its handshakes dropped and retried a
    # second or more later, which a client's read timeout then counts against the request.
    request_queue_size = 128

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._accepted_lock = threading.Lock()
        self.accepted = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._accepted_lock:
            self.accepted += 1
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            connections.close_all()  # this thread's own database connection

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Dropped, reset and timed-out connections are expected here; anything else is
        reported."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


def make_server(host: str, port: int, app: Any) -> ThreadingWSGIServer:
    server = ThreadingWSGIServer((host, port), QuietHandler)
    server.set_app(app)
    return server
