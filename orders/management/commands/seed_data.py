"""``python -m orders seed_data FILE``: upsert accounts, orders and slots from a JSON document.

The document is the body ``POST /_testing/seed`` takes (``{"accounts": [...], "orders": [...],
"slots": [...]}``, each list optional); ``-`` reads it from standard input. For rigs that run the
order system as deployed, with fault injection and the testing endpoints off (``make bench``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from orders.exceptions import Refused
from orders.services import testing_seed


class Command(BaseCommand):
    help = "Upsert accounts, orders and slots from a JSON document (the /_testing/seed body)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the JSON document, or - for standard input")

    def handle(self, *args, **options) -> None:
        if settings.PRODUCTION:
            raise CommandError("seed_data is test tooling: it refuses to run in production.")
        path = options["file"]
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text()
            data = json.loads(text)
        except (OSError, ValueError) as error:
            raise CommandError(f"Cannot read a JSON document from {path}: {error}") from None
        try:
            counts = testing_seed(data=data)
        except Refused as refusal:
            why = "; ".join(f"{name}: {text}" for name, text in (refusal.fields or {}).items())
            raise CommandError(why or refusal.detail) from None
        self.stdout.write(
            f"{counts['accounts']} accounts, {counts['orders']} orders, {counts['slots']} slots."
        )
