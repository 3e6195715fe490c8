"""System checks of the order system (``python -m orders check``)."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import CheckMessage, Warning


def unsafe_switches_check(app_configs, **kwargs) -> list[CheckMessage]:
    """orders.W001 for every switch that makes this receiver break its contract (settings
    refuse them in production; elsewhere they start, so that tests can use them)."""
    return [
        Warning(
            f"{name} is on: this receiver does not honour the contract it claims in /capabilities.",
            hint="Only for tests of Holdfast's own guards; refused with DJANGO_ENV=production.",
            id="orders.W001",
        )
        for name in settings.UNSAFE_SWITCHES
        if getattr(settings, name)
    ]
