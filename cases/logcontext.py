"""What a log line is about: the case, operation, attempt, fencing token and worker in hand.

A worker sets them where it takes a case or an attempt (``log_context``), and they are gone
when that block ends, so a line never names a case the worker has already let go. The logging
handlers' ``ContextFilter`` copies them onto every record: ``config.logs`` prints them as JSON
fields (``LOG_FORMAT=json``) or as a bracketed suffix (``text``).

Invariants: the fields live in a ``ContextVar``, so threads and requests never see each
other's; every record gets every field (``None`` when unknown, ``worker`` defaulting to this
process), so a JSON line always has the same keys; this module imports nothing of Holdfast.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

FIELDS = ("case", "operation", "attempt", "fencing_token", "worker")

_EMPTY: MappingProxyType[str, Any] = MappingProxyType({})
_CURRENT: ContextVar[MappingProxyType[str, Any]] = ContextVar("holdfast_log", default=_EMPTY)


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Name what the lines logged inside this block are about (``case``, ``operation``,
    ``attempt``, ``fencing_token``, ``worker``); the outer values come back when it ends."""
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"Unknown log context fields: {sorted(unknown)}")
    token = _CURRENT.set(MappingProxyType({**_CURRENT.get(), **fields}))
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current() -> dict[str, Any]:
    """The fields set now (only those set)."""
    return dict(_CURRENT.get())


_PROCESS: dict[int, str] = {}


def process_worker() -> str:
    """The worker a line comes from when no block named one: this host and process."""
    pid = os.getpid()
    label = _PROCESS.get(pid)
    if label is None:
        label = _PROCESS.setdefault(pid, f"{socket.gethostname()}:{pid}")
    return label


class ContextFilter(logging.Filter):
    """Puts every field of the current context on the record (``None`` when not set)."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = _CURRENT.get()
        for name in FIELDS:
            if not hasattr(record, name):
                setattr(record, name, fields.get(name))
        if record.worker is None:  # type: ignore[attr-defined]
            record.worker = process_worker()
        return True
