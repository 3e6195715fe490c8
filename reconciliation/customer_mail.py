"""The customer's notification on its way to the mail server: one SMTP session kept by each
worker, and what a failed send means.

A worker tells a customer after every change it applies. Opening a session for each message
(connect, greeting, EHLO, and QUIT after it) cost more of the worker's time than building the
message, so the session is kept between messages. It is not asked whether it still answers
before each (a ``NOOP``: one more round trip a message): a session the server closed meanwhile
(or closes now, answering 421, as servers do after an idle timeout) fails before the message's
``DATA`` began, so nothing of the message went, and the message is sent at once over a new
session.

A send that fails is one of two things, and the caller records which:

- ``NotSent``: nothing of the message was taken: no session could be opened, the server
  answered and refused it (``cases.delivery.refusal``), or the session failed before the
  message's ``DATA`` began. Sending it again later is safe.
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


def _kept_session() -> SmtpBackend | None:
    """The worker's open SMTP session for the settings in force, if it keeps one."""
    kept: SmtpBackend | None = getattr(_kept, "backend", None)
    if kept is None or getattr(_kept, "key", None) != _settings_key() or kept.connection is None:
        return None
    return kept


def _opened(fresh: SmtpBackend) -> SmtpBackend:
    """``fresh`` (not open yet) opened and kept as the worker's session, the one it had
    dropped. Raises ``NotSent`` when it cannot be opened."""
    _drop()
    try:
        fresh.open()
    except Exception as exc:
        raise NotSent(f"{type(exc).__name__}: {exc}") from exc
    _note_data(fresh.connection)
    _kept.backend, _kept.key = fresh, _settings_key()
    return fresh


def _note_data(session: Any) -> None:
    """smtplib sends a message's content with the session's ``data``: the session notes when it
    began (``hf_data_began``), so that a failure before it is known to have taken nothing."""
    send_data = session.data

    def data(content: Any) -> Any:
        session.hf_data_began = True
        return send_data(content)

    session.data = data


class _Untaken(Exception):  # noqa: N818 - an outcome, named as it reads
    """The session failed before the message's ``DATA`` began: nothing of it went."""


def _send_on(backend: SmtpBackend, message: EmailMessage) -> None:
    """Send ``message`` over ``backend``'s open session; raises ``NotSent`` (refused),
    ``_Untaken`` (failed before ``DATA``) or ``MayHaveGone``, the session dropped."""
    session: Any = backend.connection  # open: the caller kept or opened it
    session.hf_data_began = False
    try:
        backend.send_messages([message])
    except Exception as exc:
        _drop()
        words = f"{type(exc).__name__}: {exc}"
        closing = getattr(exc, "smtp_code", None) == 421  # the server closes the session
        if not getattr(session, "hf_data_began", True) and (closing or not refusal(exc)):
            raise _Untaken(words) from exc
        if refusal(exc):
            raise NotSent(words) from exc
        raise MayHaveGone(words) from exc


def send(message: EmailMessage) -> None:
    """Send ``message`` once; raises ``NotSent`` or ``MayHaveGone`` (see the module)."""
    backend = get_connection(fail_silently=False)
    if not isinstance(backend, SmtpBackend):
        try:
            backend.send_messages([message])
        except Exception as exc:
            raise NotSent(f"{type(exc).__name__}: {exc}") from exc
        return
    kept = _kept_session()
    if kept is not None:
        try:
            _send_on(kept, message)
            return
        except _Untaken:
            pass  # the kept session had closed: nothing went; a new session takes the message
    try:
        _send_on(_opened(backend), message)
    except _Untaken as exc:
        raise NotSent(str(exc)) from exc
