"""System checks for settings that are valid one by one but unsafe together."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Warning, register


@register()
def apply_lease_outlives_one_request(app_configs, **kwargs):
    """A worker heartbeats between steps, not during an HTTP call: one call to the order system
    must fit inside the apply lease, or a healthy but slow worker is taken for a missing one."""
    timeouts = settings.ORDER_SYSTEM_TIMEOUTS
    longest_call = timeouts["connect"] + timeouts["write"] + timeouts["read"]
    lease = settings.LEASES["apply"]["lease_seconds"]
    if longest_call >= lease:
        return [
            Warning(
                f"An order-system call may take {longest_call:g}s but the apply lease is "
                f"{lease:g}s: slow calls will be held as 'worker missing'.",
                hint="Raise APPLY_LEASE_SECONDS or lower the ORDER_SYSTEM_*_TIMEOUT settings.",
                id="holdfast.W001",
            )
        ]
    return []
