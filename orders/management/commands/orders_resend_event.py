from django.core.management.base import BaseCommand, CommandError

from orders.models import OutboxEvent
from orders.outbox import event_resend


class Command(BaseCommand):
    help = "Send one outbox event again by hand, with the same event id and body."

    def add_arguments(self, parser) -> None:
        parser.add_argument("event_id")

    def handle(self, *args, event_id: str, **options) -> None:
        try:
            error = event_resend(event_id=event_id)
        except OutboxEvent.DoesNotExist:
            raise CommandError(f"No outbox event {event_id}.") from None
        if error is not None:
            raise CommandError(f"Event {event_id} was not accepted: {error}")
        self.stdout.write(f"Event {event_id} resent and accepted.")
