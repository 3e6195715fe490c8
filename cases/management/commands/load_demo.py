"""Load the demo: a team, one user per role, an account and a case per change kind (D-41 moves
a delivery date, D-42 changes a shipping address, D-43 cancels an order). Idempotent.

Development only: it prints a shared password and an API token, so it refuses to run under
production settings (``DJANGO_ENV=production``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone
from rest_framework.authtoken.models import Token

from cases.kernel import SYSTEM
from cases.models import CustomerAccount, Team
from cases.references import counter_raise_past
from cases.roles import ensure_roles
from cases.services import account_create, case_open

DEMO_PASSWORD = "holdfast-demo"  # noqa: S105 - a printed demo login, never a real secret
DEMO_USERS = [
    # username, role group, full name, staff (admin access)
    ("lead", "lead", "Lena Lead", True),
    ("backup", "lead", "Bo Backup", True),
    ("agent", "agent", "Ada Agent", True),
    ("approver", "approver", "Ari Approver", True),
    ("auditor", "auditor", "Aud Itor", True),
    ("operator", "operator", "Otto Operator", True),
    ("integration", "agent", "Order intake integration", False),
]
# Roles that run Holdfast rather than work a team's cases: their users join no team.
TEAMLESS_ROLES = {"operator"}
DEMO_ACCOUNT = "ACC-100"
DEMO_ORDER = "ORD-7731"
DEMO_REQUEST_KEY = "email-2026-11-30-northwind-delivery"
# The demo case of each change kind: (request key, order, kind, change or a function of today,
# the customer's note). The orders are the order system's demo orders (seed_demo).
DEMO_CASES: list[tuple[str, str, str, Callable[[dt.date], dict[str, Any]], str]] = [
    (
        DEMO_REQUEST_KEY,
        DEMO_ORDER,
        "delivery_date",
        lambda today: {"kind": "delivery_date", "delivery_date": next_friday(today).isoformat()},
        "Customer asked by email to move the delivery of order ORD-7731 to Friday.",
    ),
    (
        "email-2026-11-30-northwind-address",
        "ORD-7732",
        "shipping_address",
        lambda today: {
            "kind": "shipping_address",
            "address": {
                "name": "Dana Whitfield",
                "line1": "4 Quay Road",
                "city": "Bristol",
                "postal_code": "BS1 5TX",
                "country": "GB",
            },
        },
        "Customer moved offices: please send order ORD-7732 to the new address.",
    ),
    (
        "phone-2026-11-30-northwind-cancel",
        "ORD-7733",
        "order_cancellation",
        lambda today: {"kind": "order_cancellation", "reason_code": "customer_request"},
        "Customer called: order ORD-7733 was placed by mistake, please cancel it.",
    ),
]


def next_friday(after: dt.date) -> dt.date:
    day = after + dt.timedelta(days=7)
    return day + dt.timedelta(days=(4 - day.weekday()) % 7)


class Command(BaseCommand):
    help = (
        "Create the demo team, users (one per role), account ACC-100 and a case per change "
        "kind: D-41 (delivery date), D-42 (shipping address), D-43 (order cancellation)."
    )

    def handle(self, *args, **options):
        if settings.PRODUCTION:
            raise CommandError(
                "load_demo is demo tooling (a shared password, a printed API token): it refuses "
                "to run when DJANGO_ENV=production."
            )
        User = get_user_model()
        with transaction.atomic():
            ensure_roles()
            team, _ = Team.objects.get_or_create(name="Deliveries")
            users = {}
            for username, role, full_name, staff in DEMO_USERS:
                first, _, last = full_name.partition(" ")
                user, created = User.objects.get_or_create(
                    username=username,
                    defaults={
                        "first_name": first,
                        "last_name": last,
                        "is_staff": staff,
                        "email": f"{username}@example.com",
                    },
                )
                if created:
                    user.set_password(DEMO_PASSWORD)
                    user.save()
                elif user.email.endswith("@holdfast.example"):
                    # Demo databases loaded before staff mail existed: a deliverable address.
                    user.email = f"{username}@example.com"
                    user.save(update_fields=["email"])
                user.groups.add(Group.objects.get(name=role))
                if role not in TEAMLESS_ROLES:
                    team.members.add(user)
                users[username] = user
            team.default_owner = users["lead"]
            team.default_backup = users["backup"]
            team.save()
            account = CustomerAccount.objects.filter(reference=DEMO_ACCOUNT).first()
            if account is None:
                # Through the service, so the account's own trail starts with its creation.
                account = account_create(
                    account=CustomerAccount(
                        reference=DEMO_ACCOUNT,
                        # The order system's own name for ACC-100 (orders.services.DEMO_ACCOUNT).
                        name="Northwind Traders",
                        team=team,
                        verified=True,
                        email="orders@northwind.example",
                    ),
                    actor=SYSTEM,
                    reason="Demo account (load_demo)",
                )
            token, _ = Token.objects.get_or_create(user=users["integration"])
            # The running example is D-41: start numbering there on a fresh database.
            counter_raise_past(team, 40)
        out = self.stdout
        for request_key, order_id, kind, change, note in DEMO_CASES:
            case, created = case_open(
                actor=SYSTEM,
                account=account,
                request_key=request_key,
                order_id=order_id,
                kind=kind,
                change=change(timezone.localdate()),
                note=note,
            )
            out.write(
                f"Demo case: {case.reference} ({case.change_kind.label.lower()}, "
                f"{case.get_status_display()}){'' if created else ' — already there'}"
            )
        out.write(f"Demo logins (password for all: {DEMO_PASSWORD}):")
        for username, role, full_name, _staff in DEMO_USERS:
            out.write(f"  {username:<12} {role:<9} {full_name}")
        out.write(f"API token for integration: {token.key}")
