"""The customer's notification on its way to the mail server: one SMTP session kept by each
worker, and what a failed send means.

A worker tells a customer after every change it applies. Opening a session for each message
(connect, greeting, EHLO, and QUIT after it) cost more of the worker's time than building the
message; the session is kept between messages and checked with ``NOOP`` before each, so a
session the server closed meanwhile is opened again before anything of the message leaves.

A send that fails is one of two things, and the caller records which:

- ``NotSent``: nothing of the message was taken: no session could be opened, or the server
  answered and refused it (``cases.delivery.refusal``). Sending it again later is safe.
- ``MayHaveGone``: the message had begun to go and the server's answer never came (a timeout,
  a dropped connection): it may have been delivered, so it is not sent again.

Backends other than SMTP (the console's, the tests' in memory) keep no session: each message
gets its own, as Django's ``EmailMessage.send`` gives it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.core.mail.backends.smtp import EmailBackend as SmtpBackend

from cases.delivery import refusal


class NotSent(Exception):  # noqa: N818 - an outcome the caller records, named as it reads
    """The mail server took nothing of the message: sending it again is safe."""


class MayHaveGone(Exception):  # noqa: N818 - an outcome the caller records, named as it reads
    """The message began to go and no answer came: it may have been delivered."""


_kept = threading.local()


def _settings_key() -> tuple[Any, ...]:
    """What the kept session was opened for: other settings, another session."""
    return (
        os.getpid(),
        settings.EMAIL_BACKEND,
        settings.EMAIL_HOST,
        settings.EMAIL_PORT,
        settings.EMAIL_HOST_USER,
        settings.EMAIL_USE_TLS,
        settings.EMAIL_USE_SSL,
    )


def _drop() -> None:
    backend = getattr(_kept, "backend", None)
    _kept.backend = None
    if backend is not None:
        with contextlib.suppress(Exception):  # a session already broken closes as it can
            backend.close()


def _alive(backend: SmtpBackend) -> bool:
    """The kept session still answers (``NOOP``); nothing of a message is sent by asking."""
    session = backend.connection
    if session is None:
        return False
    try:
        return bool(session.noop()[0] == 250)
    except Exception:  # noqa: BLE001 - any failure: the session is gone
        return False


def _session(fresh: SmtpBackend) -> SmtpBackend:
    """The worker's open SMTP session; when it has none that answers, ``fresh`` (not open yet)
    is opened and kept. Raises ``NotSent`` when none can be opened."""
    key = _settings_key()
    kept: SmtpBackend | None = getattr(_kept, "backend", None)
    if kept is not None and getattr(_kept, "key", None) == key and _alive(kept):
        return kept
    _drop()
    try:
        fresh.open()
    except Exception as exc:
        raise NotSent(f"{type(exc).__name__}: {exc}") from exc
    _kept.backend, _kept.key = fresh, key
    return fresh


def send(message: EmailMessage) -> None:
    """Send ``message`` once; raises ``NotSent`` or ``MayHaveGone`` (see the module)."""
    backend = get_connection(fail_silently=False)
    if not isinstance(backend, SmtpBackend):
        try:
            backend.send_messages([message])
        except Exception as exc:
            raise NotSent(f"{type(exc).__name__}: {exc}") from exc
        return
    session = _session(backend)
    try:
        session.send_messages([message])
    except Exception as exc:
        _drop()
        words = f"{type(exc).__name__}: {exc}"
        if refusal(exc):
            raise NotSent(words) from exc
        raise MayHaveGone(words) from exc
