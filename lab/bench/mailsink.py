"""The customers' mail server during a bench run: a real SMTP server (aiosmtpd) in the bench's
own process, so that every applied case takes the path a customer with an address takes
(the notification's start, the send over SMTP, its confirmation with the close) and the run
checks that each customer was told exactly once, by the notification's key.

Its CPU is the bench process's, not Holdfast's: the goals count the workers and Holdfast's
PostgreSQL backends, and the mail server is neither.
"""

from __future__ import annotations

import email
import email.policy
import logging
import socket
import threading
from collections import Counter
from collections.abc import Iterable
from typing import Any

from lab.bench.series import Skip

KEY_HEADER = "X-Holdfast-Notification-Key"


class _Handler:
    """Counts each message by its notification key (aiosmtpd calls ``handle_DATA``)."""

    def __init__(self) -> None:
        self.keys: Counter[str] = Counter()
        self.lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
        message = email.message_from_bytes(envelope.content, policy=email.policy.SMTP)
        with self.lock:
            self.keys[str(message.get(KEY_HEADER, ""))] += 1
        return "250 Message accepted for delivery"


class MailSink:
    """``start()`` listens on a free port of 127.0.0.1; ``env()`` is what a cluster needs to
    send to it (Django's SMTP backend); ``told_once(keys)`` checks each key arrived once."""

    def __init__(self) -> None:
        self.handler = _Handler()
        self.controller: Any = None
        self.port = 0

    def start(self) -> MailSink:
        from aiosmtpd.controller import Controller

        logging.getLogger("mail.log").setLevel(logging.WARNING)  # a line per SMTP command
        with socket.socket() as probe:  # a free port (the controller checks it by connecting)
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self.controller = Controller(self.handler, hostname="127.0.0.1", port=self.port)
        self.controller.start()
        return self

    def env(self) -> dict[str, str]:
        return {
            "EMAIL_HOST": "127.0.0.1",
            "EMAIL_PORT": str(self.port),
            "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        }

    def told_once(self, keys: Iterable[str]) -> None:
        """Each of ``keys`` arrived exactly once; a Skip naming the first few that did not."""
        with self.handler.lock:
            wrong = {key: self.handler.keys.get(key, 0) for key in keys}
        wrong = {key: n for key, n in wrong.items() if n != 1}
        if wrong:
            sample = dict(list(wrong.items())[:5])
            raise Skip(f"{len(wrong)} customers not told exactly once (key: messages): {sample}")

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None
