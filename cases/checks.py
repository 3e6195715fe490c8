"""System checks for settings that are valid one by one but unsafe together."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Warning, register

# Work bounded by the dispatcher's lease on the case's due time (``cases.dispatch``), which
# nothing renews while the task waits on one call to the order system. An apply attempt is not
# here: it renews its lease every heartbeat, also during a call (``cases.claims.keep_alive``),
# so a short apply lease (a drill's 8 s) with long timeouts is fine.
UNRENEWED_CALLERS = ("source_check", "prepare", "reconcile")


@register()
def one_request_fits_every_unrenewed_lease(app_configs, **kwargs):
    """One call to the order system must fit inside the lease of the dispatched work that makes
    it, or a healthy but slow task is dispatched again while it still runs."""
    timeouts = settings.ORDER_SYSTEM_TIMEOUTS
    longest_call = timeouts["connect"] + timeouts["write"] + timeouts["read"]
    warnings = []
    for kind in UNRENEWED_CALLERS:
        lease = settings.LEASES[kind]["lease_seconds"]
        if longest_call >= lease:
            warnings.append(
                Warning(
                    f"An order-system call may take {longest_call:g}s but the {kind} lease is "
                    f"{lease:g}s: a slow {kind} task is dispatched again while it still runs.",
                    hint=f"Raise {kind.upper()}_LEASE_SECONDS or lower the "
                    "ORDER_SYSTEM_*_TIMEOUT settings.",
                    id="holdfast.W001",
                )
            )
    return warnings


def _unresolvable(paths) -> list[str]:
    from django.utils.module_loading import import_string

    bad = []
    for path in sorted(set(paths)):
        try:
            if not callable(import_string(path)):
                bad.append(path)
        except ImportError:
            bad.append(path)
    return bad


@register()
def every_dispatched_task_resolves(app_configs, **kwargs):
    """A task path the dispatcher enqueues must name a real function: a misspelt one fails only
    in a real worker (tests replace the enqueue), and the case then waits for nothing."""
    from django.core.checks import Error

    from cases.dispatch import TASK_FOR_STATUS

    return [
        Error(f"The task {path!r} does not resolve to a function.", id="holdfast.E002")
        for path in _unresolvable(func for func, _kind in TASK_FOR_STATUS.values())
    ]


@register("database")
def every_schedule_resolves(app_configs, databases=None, **kwargs):
    """Every django-q2 schedule names a real function (checked when a database is in reach, as
    ``migrate`` and ``check --database default`` do)."""
    from django.core.checks import Error
    from django.db import DatabaseError

    if not databases:
        return []
    from django_q.models import Schedule

    try:
        funcs = list(Schedule.objects.values_list("func", flat=True))
    except DatabaseError:
        return []  # not migrated yet
    return [
        Error(f"The schedule's task {path!r} does not resolve to a function.", id="holdfast.E003")
        for path in _unresolvable(funcs)
    ]
