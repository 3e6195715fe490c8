"""``manage.py probe_order_system --order ORD-…``: verify the order system's safeguards live."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from reconciliation.client import OrderSystemClient
from reconciliation.models import CAPABILITIES
from reconciliation.probe import ProbeRefused, order_system_probe


class Command(BaseCommand):
    help = (
        "Probe the order system with live requests against a sandbox order (which the probe "
        "changes), record what it verifiably refuses, and print the resulting autonomy."
    )

    def add_arguments(self, parser):
        parser.add_argument("--order", required=True, help="The sandbox order id to probe with.")
        parser.add_argument(
            "--url", default=None, help="The order system's base URL (default ORDER_SYSTEM_URL)."
        )

    def handle(self, *args, order: str, url: str | None, **options):
        with OrderSystemClient(
            url or settings.ORDER_SYSTEM_URL, timeouts=settings.ORDER_SYSTEM_TIMEOUTS
        ) as client:
            try:
                profile = order_system_probe(sandbox_order_id=order, client=client)
            except ProbeRefused as exc:
                raise CommandError(str(exc)) from None

        self.stdout.write(f"Order system {profile.base_url}, sandbox order {order}")
        claimed = set(profile.claimed_but_unverified)
        for name in CAPABILITIES:
            ok = profile.verified[name]
            mark = self.style.SUCCESS("✓") if ok else self.style.ERROR("✗")
            summary = profile.evidence.get(name, {}).get("summary", "")
            note = " (claimed by /capabilities)" if name in claimed else ""
            self.stdout.write(f"  {mark} {name}: {summary}{note}")
        self.stdout.write(f"Autonomy: {profile.get_autonomy_display()} — {profile.reason}")
        self.stdout.write("Per kind of change:")
        for code, found in profile.evidence.get("kinds", {}).items():
            autonomy = profile.autonomy_of(code)
            mark = self.style.SUCCESS("✓") if found.get("verified") else self.style.ERROR("✗")
            self.stdout.write(f"  {mark} {code}: {autonomy.label} — {found.get('summary', '')}")
        self.stdout.write(profile.meaning)
        self.stdout.write(f"Recorded as profile #{profile.pk}.")
        if not profile.reachable:
            raise CommandError(f"The order system at {profile.base_url} did not answer.")
