"""``manage.py worker_health``: the worker verdict of ``/readyz`` as an exit code.

Exit 0 when the verdict is ``ok``, 1 when it is ``stale`` or ``none`` (or the database does not
answer); one line of JSON on standard output either way. Usable as a container or systemd
health check on a worker host (``reconciliation.health`` says what counts as evidence).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand
from django.db import DatabaseError

from reconciliation.health import worker_health


class Command(BaseCommand):
    help = "Exit 0 when the django-q2 workers are alive (the /readyz worker verdict), else 1."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            health = worker_health()
        except DatabaseError as exc:
            self.stdout.write(json.dumps({"workers": "unknown", "error": type(exc).__name__}))
            sys.exit(1)
        self.stdout.write(json.dumps(health.as_dict()))
        if not health.ok:
            sys.exit(1)
