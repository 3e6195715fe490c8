from django.conf import settings
from django.core.management.base import BaseCommand

from orders.outbox import events_deliver_due


class Command(BaseCommand):
    help = "Run one pass of webhook delivery over the due outbox events."

    def handle(self, *args, **options) -> None:
        if not settings.ORDERS_WEBHOOK_URL:
            self.stdout.write("Webhook delivery is disabled (ORDERS_WEBHOOK_URL is empty).")
            return
        report = events_deliver_due()
        self.stdout.write(f"Delivered {report.delivered}, failed {report.failed}.")
