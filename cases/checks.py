"""System checks for settings that are valid one by one but unsafe together."""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings
from django.core.checks import Warning, register

# Work bounded only by the dispatcher's lease on the case's due time (the dispatcher moves it
# forward by the kind's ``lease_seconds``): nothing heartbeats for these kinds, so nothing
# renews that lease while the task waits on one call to the order system (their
# ``heartbeat_seconds`` is never read). An apply attempt is not here: it holds a lease of its
# own on the attempt row, renewed by a heartbeat before each step and every
# ``heartbeat_seconds`` during its calls to the order system (the write and the look before it,
# under ``keep_alive`` in the reconciliation app), so a short apply lease (the drills run 2 s)
# with long timeouts is fine. Its one unrenewed call, the restore check before the claim, may
# outlast the lease harmlessly: if the ready case is dispatched again meanwhile, the claim's
# compare-and-set lets only one of the two tasks start an attempt.
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


def unresolvable_paths(paths: Iterable[str]) -> list[str]:
    """The dotted paths among ``paths`` that do not name a callable, sorted, each once (the
    apps above the kernel check their own task paths with it)."""
    from django.utils.module_loading import import_string

    bad = []
    for path in sorted(set(paths)):
        try:
            if not callable(import_string(path)):
                bad.append(path)
        except ImportError:
            bad.append(path)
    return bad


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
        for path in unresolvable_paths(funcs)
    ]
