"""The two log formats (``LOG_FORMAT``): ``json``, one object per line, and ``text``.

Both carry what ``cases.logcontext`` knows about the line: the case reference, operation key,
attempt, fencing token and worker. JSON lines always have every key (``null`` when the line is
about no case), so a log pipeline can index them without guessing; text lines add the known
ones in brackets after the message.
"""

from __future__ import annotations

import datetime as dt
import logging

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

from cases.logcontext import FIELDS

# Django's request logger adds the request object itself: its text is the request line,
# which ``message`` already says.
_SKIPPED = (*RESERVED_ATTRS, "request")


def _iso(record: logging.LogRecord) -> str:
    return dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds")


class JsonFormatter(_JsonFormatter):
    """``{"time", "level", "logger", "message", "case", "operation", "attempt",
    "fencing_token", "worker", …extras, "exc_info"?}`` on one line."""

    def __init__(self) -> None:
        super().__init__(
            ["asctime", "levelname", "name", "message", *FIELDS],
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            reserved_attrs=_SKIPPED,
        )

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - logging's name
        return _iso(record)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message [case=… operation=… attempt=… fencing_token=… worker=…]``;
    a traceback follows on the next lines, as usual."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - logging's name
        return _iso(record)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        line = super().formatMessage(record)
        if getattr(record, "case", None) is None:
            return line  # about no case: the worker alone would only add noise
        known = " ".join(
            f"{name}={getattr(record, name)}"
            for name in FIELDS
            if getattr(record, name, None) is not None
        )
        return f"{line} [{known}]"
