"""A real SMTP server for the tests (aiosmtpd's ``Controller``: a thread of this process that
listens on a local port and speaks SMTP), recording what it accepted.

It can refuse the next messages (``refuse``: a ``451`` answer to DATA, as a mail server that is
overloaded does) and hold one in the middle of its delivery (``hold``: the message has arrived
in full and the server has not answered yet) until the test lets it go.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.header import decode_header, make_header
from email.message import Message

import pytest
from aiosmtpd.controller import Controller


@dataclass
class Received:
    envelope_to: list[str]
    message: Message
    session: str = ""  # which SMTP session brought it (the client's address and port)

    @property
    def subject(self) -> str:
        """The subject as read (an encoded word, e.g. a subject cut with "…", decoded)."""
        return str(make_header(decode_header(self.message["Subject"])))

    @property
    def body(self) -> str:
        payload = self.message.get_payload(decode=True)
        return payload.decode() if isinstance(payload, bytes) else str(payload)


@dataclass
class MailServer:
    """What the test sees and steers of the server."""

    host: str
    port: int
    received: list[Received] = field(default_factory=list)
    refused: int = 0
    refuse_next: int = 0
    # Sessions to drop without an answer when a message names its recipient (before its DATA).
    drop_at_recipient: int = 0
    # Sessions to close with "421" when a message names its sender, as after an idle timeout.
    close_at_sender: int = 0
    noops: int = 0  # NOOP commands answered
    # A predicate on the message: the first that matches is held until ``release`` is set.
    hold: Callable[[Message], bool] | None = None
    holding: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def to(self, address: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if address in r.envelope_to]

    def wait_for(self, count: int, *, timeout: float) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.05)
        raise AssertionError(f"{len(self.received)} of {count} messages after {timeout} s")

    def env(self) -> dict[str, str]:
        """The environment that points a Holdfast process at this server."""
        return {
            "EMAIL_HOST": self.host,
            "EMAIL_PORT": str(self.port),
            "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "EMAIL_TIMEOUT": "5",
        }


class _Handler:
    def __init__(self, server: MailServer) -> None:
        self.server = server

    async def handle_NOOP(self, smtp, session, envelope, arg) -> str:  # noqa: N802 - aiosmtpd's
        with self.server.lock:
            self.server.noops += 1
        return "250 OK"

    def _take(self, fault: str) -> bool:
        """Whether one of the faults the test asked for (a count on the server) happens now."""
        with self.server.lock:
            left = getattr(self.server, fault)
            setattr(self.server, fault, max(left - 1, 0))
        return left > 0

    async def handle_MAIL(self, smtp, session, envelope, address, options) -> str:  # noqa: N802
        if self._take("close_at_sender"):
            asyncio.get_running_loop().call_later(0.05, smtp.transport.close)
            return "421 4.4.2 Error: timeout exceeded, closing"
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 OK"

    async def handle_RCPT(self, smtp, session, envelope, address, options) -> str:  # noqa: N802
        if self._take("drop_at_recipient"):
            smtp.transport.close()  # no answer: the session is gone before the message's DATA
            return "250 OK"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, smtp, session, envelope) -> str:  # noqa: N802 - aiosmtpd's name
        server = self.server
        message = message_from_bytes(envelope.original_content or envelope.content)
        with server.lock:
            if server.refuse_next > 0:
                server.refuse_next -= 1
                server.refused += 1
                return "451 4.3.0 Try again later"
            # Arrived in full: it counts as received whatever happens to the sender now.
            server.received.append(Received(list(envelope.rcpt_tos), message, str(session.peer)))
            held = server.hold is not None and server.hold(message)
            if held:
                server.hold = None
        if held:
            server.holding.set()
            while not server.release.is_set():
                await asyncio.sleep(0.02)
        return "250 Message accepted for delivery"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def mail_server() -> Iterator[MailServer]:
    logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd logs every command
    server = MailServer("127.0.0.1", _free_port())
    controller = Controller(_Handler(server), hostname=server.host, port=server.port)
    controller.start()
    try:
        yield server
    finally:
        server.release.set()
        controller.stop()


@pytest.fixture
def smtp(settings):
    """A real SMTP server, and Holdfast's email backend pointed at it."""
    with mail_server() as server:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST = server.host
        settings.EMAIL_PORT = server.port
        settings.EMAIL_TIMEOUT = 5
        yield server
