"""Serve a worker host's process metrics for Prometheus: ``manage.py serve_metrics``.

A worker host runs no web process, so nothing there answers ``/metrics``. This small HTTP
server does, for what that host's processes counted (order-system answers, apply outcomes,
lease expiries, takeovers, latencies): it reads the ``PROMETHEUS_MULTIPROC_DIR`` that the
host's ``qcluster`` writes. The database gauges are left to the web's ``/metrics`` (every host
would report the same values). It asks for the same ``Authorization: Bearer <METRICS_TOKEN>``
as the web, reads nothing else and answers only ``GET /metrics``.
"""

from __future__ import annotations

from wsgiref.simple_server import WSGIRequestHandler, make_server

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.exposition import ThreadingWSGIServer

from reconciliation.metrics import multiproc_dir
from reconciliation.scrape import bearer_ok, exposition


def metrics_app(environ, start_response):
    """GET /metrics with the bearer token: this host's process metrics; anything else refused."""
    if environ.get("PATH_INFO") != "/metrics":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"Only /metrics is served here.\n"]
    if environ.get("REQUEST_METHOD") not in {"GET", "HEAD"}:
        start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
        return [b""]
    if not bearer_ok(environ.get("HTTP_AUTHORIZATION", ""), settings.METRICS_TOKEN):
        start_response(
            "401 Unauthorized",
            [("Content-Type", "text/plain"), ("WWW-Authenticate", 'Bearer realm="metrics"')],
        )
        return [b"Send Authorization: Bearer <METRICS_TOKEN>.\n"]
    body = exposition(database=False)
    start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST), ("Cache-Control", "no-store")])
    return [b"" if environ["REQUEST_METHOD"] == "HEAD" else body]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        """Scrapes every few seconds would flood the log; refusals are visible to Prometheus."""


class Command(BaseCommand):
    help = "Serve this host's process metrics (PROMETHEUS_MULTIPROC_DIR) at /metrics."

    def add_arguments(self, parser):
        parser.add_argument("--bind", default="127.0.0.1", help="address (default 127.0.0.1)")
        parser.add_argument("--port", type=int, default=9464, help="port (default 9464)")

    def handle(self, *args, bind="127.0.0.1", port=9464, **options):
        if not settings.METRICS_ENABLED:
            raise CommandError("METRICS_ENABLED=0: metrics are off.")
        if not multiproc_dir():
            raise CommandError(
                "Set PROMETHEUS_MULTIPROC_DIR to the directory this host's qcluster writes."
            )
        server = make_server(
            bind, port, metrics_app, server_class=ThreadingWSGIServer, handler_class=_QuietHandler
        )
        self.stdout.write(
            f"Serving {multiproc_dir()} at http://{bind}:{server.server_port}/metrics"
        )
        self.stdout.flush()
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
