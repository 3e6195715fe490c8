"""Load the D-41 demo: a team, one user per role, an account and case D-41. Idempotent.

Development only: it prints a shared password and an API token, so it refuses to run under
production settings (``DJANGO_ENV=production``).
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone
from rest_framework.authtoken.models import Token

from cases.fencing import counter_raise_to
from cases.kernel import SYSTEM
from cases.models import CustomerAccount, Team
from cases.roles import ensure_roles
from cases.services import case_intake

DEMO_PASSWORD = "holdfast-demo"  # noqa: S105 - a printed demo login, never a real secret
DEMO_USERS = [
    # username, role group, full name, staff (admin access)
    ("lead", "lead", "Lena Lead", True),
    ("backup", "lead", "Bo Backup", True),
    ("agent", "agent", "Ada Agent", True),
    ("approver", "approver", "Ari Approver", True),
    ("auditor", "auditor", "Aud Itor", True),
    ("integration", "agent", "Order intake integration", False),
]
DEMO_ACCOUNT = "ACC-100"
DEMO_ORDER = "ORD-7731"
DEMO_REQUEST_KEY = "email-2026-11-30-northwind-delivery"


def next_friday(after: dt.date) -> dt.date:
    day = after + dt.timedelta(days=7)
    return day + dt.timedelta(days=(4 - day.weekday()) % 7)


class Command(BaseCommand):
    help = "Create the demo team, users (one per role), account ACC-100 and case D-41."

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
                team.members.add(user)
                users[username] = user
            team.default_owner = users["lead"]
            team.default_backup = users["backup"]
            team.save()
            account, _ = CustomerAccount.objects.get_or_create(
                reference=DEMO_ACCOUNT,
                defaults={
                    "name": "Northwind Bakery",
                    "team": team,
                    "verified": True,
                    "email": "orders@northwind.example",
                },
            )
            token, _ = Token.objects.get_or_create(user=users["integration"])
            # The running example is D-41: start numbering there on a fresh database.
            counter_raise_to("case_number", 40)
        case, created = case_intake(
            actor=SYSTEM,
            account=account,
            request_key=DEMO_REQUEST_KEY,
            order_id=DEMO_ORDER,
            requested_date=next_friday(timezone.localdate()),
            note="Customer asked by email to move the delivery of order ORD-7731 to Friday.",
        )
        out = self.stdout
        out.write(
            f"Demo case: {case.reference} ({case.get_status_display()})"
            f"{'' if created else ' — already there'}"
        )
        out.write(f"Demo logins (password for all: {DEMO_PASSWORD}):")
        for username, role, full_name, _staff in DEMO_USERS:
            out.write(f"  {username:<12} {role:<9} {full_name}")
        out.write(f"API token for integration: {token.key}")
