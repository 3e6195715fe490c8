"""Run the order system: migrate its database, deliver webhooks, serve HTTP until a signal."""

from __future__ import annotations

import signal
import threading

from django.core.handlers.wsgi import WSGIHandler
from django.core.management import call_command
from django.core.management.base import BaseCommand

from orders.outbox import OutboxDeliverer
from orders.server import make_server


class Command(BaseCommand):
    help = "Serve the reference order system (HTTP) with its outbox deliverer."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8100, help="0 picks a free port.")
        parser.add_argument("--no-migrate", action="store_true", help="Skip migrations.")

    def handle(self, *args, host: str, port: int, no_migrate: bool, **options) -> None:
        if not no_migrate:
            call_command("migrate", interactive=False, verbosity=0)
        server = make_server(host, port, WSGIHandler())
        deliverer = OutboxDeliverer()
        stopping = threading.Event()

        def on_signal(signum, frame) -> None:
            stopping.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

        serving = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True
        )
        serving.start()
        deliverer.start()
        # What ``server_address`` holds once bound, read as the (host, port) of an inet socket.
        bound_host, bound_port = server.socket.getsockname()[:2]
        self.stdout.write(f"Order system: http://{bound_host}:{bound_port}/")
        self.stdout.flush()
        while not stopping.wait(1.0):
            pass
        server.shutdown()
        server.server_close()
        deliverer.stop()
