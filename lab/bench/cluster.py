"""The worker cluster the bench measures with: a real ``qcluster`` subprocess
(``Q_WORKERS=2``, plus the sweeper's worker) on the ORM broker of the bench database, and the
tasks it is given, enqueued in one transaction so that the cluster sees them all at once."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from lab.bench.postgres import backends_gone, database_name, database_url
from lab.bench.series import Skip

ROOT = Path(settings.BASE_DIR)
NOOP = "lab.bench.tasks.noop"
BARE = "lab.bench.tasks.bare_writes"
WORKERS = 2  # Q_WORKERS of every cluster (the settings add one for the sweeper)


# The customers' mail server of the run (``lab.bench.mailsink``), once it listens: every
# cluster and web server the bench starts sends the customers' notifications there.
MAIL_ENV: dict[str, str] = {}


def child_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **MAIL_ENV, **extra}
    env.pop("REDIS_URL", None)  # the ORM broker on the same database
    env["DATABASE_URL"] = database_url(database_name())
    env["HOLDFAST_STATE_DIR"] = str(settings.HOLDFAST_STATE_DIR)
    return env


def stop(process: subprocess.Popen[bytes], grace: float = 15) -> None:
    """SIGTERM once (django-q2 mishandles a second signal), then the rest of its session."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


@contextlib.contextmanager
def qcluster(log_dir: Path, name: str, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``qcluster`` (``Q_WORKERS=2``) on an empty ORM broker queue."""
    from django_q.models import OrmQ

    OrmQ.objects.all().delete()  # a task left by an interrupted run would run in the window
    log_path = log_dir / f"qcluster-{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and manage.py
            [sys.executable, "manage.py", "qcluster"],
            cwd=ROOT,
            env=child_env(Q_WORKERS=str(WORKERS), **env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        # The workers stop within a second of SIGTERM, but the sentinel then waits for the
        # sweeper's long-lived task (up to the task timeout): the rest is killed after 2 s.
        stop(process, grace=2)
        backends_gone()


def ormq_sequence() -> int:
    """How many tasks were ever enqueued on the ORM broker (its id sequence; no write)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce((SELECT last_value FROM pg_sequences WHERE schemaname = "
            "current_schema() AND sequencename = "
            "split_part(pg_get_serial_sequence('django_q_ormq', 'id'), '.', 2)), 0)"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def enqueue_many(func: str, args: list[tuple[Any, ...]]) -> list[int]:
    """Enqueue tasks in one transaction (so the cluster sees them all at once); their rows."""
    from django_q.models import OrmQ
    from django_q.tasks import async_task

    before = OrmQ.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    with transaction.atomic():
        for task_args in args:
            async_task(func, *task_args, group=func.rsplit(".", 1)[-1])
    return list(OrmQ.objects.filter(pk__gt=before).values_list("pk", flat=True))


def wait_acked(rows: list[int], timeout: float, process: subprocess.Popen[bytes]) -> int:
    """Wait until the ORM broker rows are gone (acknowledged); return the polls made."""
    from django_q.models import OrmQ

    deadline = time.monotonic() + timeout
    polls = 0
    while True:
        polls += 1
        if not OrmQ.objects.filter(pk__in=rows).exists():
            return polls
        if process.poll() is not None:
            raise Skip(f"the qcluster exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise Skip(f"tasks not done after {timeout:.0f}s")
        time.sleep(0.05)


def warm(process: subprocess.Popen[bytes]) -> None:
    """One no-op through the cluster: it is up and polling."""
    wait_acked(enqueue_many(NOOP, [()]), 60, process)
