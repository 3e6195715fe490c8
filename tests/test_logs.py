"""Log lines name what they are about: one JSON object per line (``LOG_FORMAT=json``) or text,
each carrying the case, operation, attempt, fencing token and worker while a worker holds them.

Here the formatters run in this process on a real apply against the live order system;
``tests/reconciliation/test_metrics_processes.py`` reads a real ``qcluster``'s JSON output.
"""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cases.logcontext import FIELDS, ContextFilter, log_context
from cases.models import Attempt
from config.logs import JsonFormatter, TextFormatter
from reconciliation.apply import apply_case

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def _captured(formatter: logging.Formatter) -> Iterator[io.StringIO]:
    """What the root logger writes while the block runs, through ``formatter`` and the
    context filter, as the configured console handler does."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def test_every_line_of_an_apply_is_json_naming_its_case_operation_attempt_token_and_worker(
    approved_case, live_orders
):
    case = approved_case()
    with _captured(JsonFormatter()) as stream:
        assert apply_case(case_id=case.pk) == "done"
        logging.getLogger("after").info("the worker let go of the case")

    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    attempt = Attempt.objects.get(case=case)
    about = {
        "case": case.reference,
        "operation": attempt.operation.key,
        "attempt": attempt.reference,
        "fencing_token": attempt.fencing_token,
        "worker": attempt.worker,
    }
    assert all({"time", "level", "logger", "message", *FIELDS} <= set(r) for r in records)
    during = [r for r in records if r["logger"] != "after"]
    sent = [r for r in during if "POST" in r["message"] and "/operations" in r["message"]]
    assert sent, during  # the order system's answer to the write is one of the lines
    ended = [r for r in during if r["message"] == f"{attempt.reference} ended: done"]
    assert len(ended) == 1
    for record in [*sent, *ended]:
        assert {name: record[name] for name in FIELDS} == about
    (after,) = [r for r in records if r["logger"] == "after"]
    assert after["case"] is None
    assert after["attempt"] is None
    assert after["worker"]  # this process, when no worker named itself


def test_text_lines_add_what_they_are_about_in_brackets():
    with _captured(TextFormatter()) as stream:
        with log_context(case="D-41", operation="DATE-41-1", attempt="D-41-a2", fencing_token=17):
            logging.getLogger("reconciliation.apply").info("D-41-a2 ended: done")
        logging.getLogger("reconciliation.apply").info("nothing due")

    first, second = stream.getvalue().splitlines()
    assert first.endswith(
        "INFO reconciliation.apply: D-41-a2 ended: done "
        "[case=D-41 operation=DATE-41-1 attempt=D-41-a2 fencing_token=17 worker="
        + first.rpartition("worker=")[2]
    )
    assert second.endswith("INFO reconciliation.apply: nothing due")


def test_an_unknown_log_format_stops_the_start():
    result = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={
            "PATH": "/usr/bin:/bin",
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "LOG_FORMAT": "xml",
            "DATABASE_URL": "sqlite:///:memory:",
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "LOG_FORMAT='xml'" in result.stderr
