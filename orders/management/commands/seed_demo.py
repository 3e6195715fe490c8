from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from orders.services import demo_seed


class Command(BaseCommand):
    help = "Create the demo data (ACC-100, ORD-7731, ORD-PROBE, 28 days of slots) if missing."

    def handle(self, *args, **options) -> None:
        if settings.PRODUCTION:
            raise CommandError(
                "seed_demo is demo tooling: it refuses to run when DJANGO_ENV=production."
            )
        demo_seed(today=timezone.localdate())
        self.stdout.write(
            "Demo data present: account ACC-100, order ORD-7731, sandbox order ORD-PROBE, "
            "slots for 28 days."
        )
