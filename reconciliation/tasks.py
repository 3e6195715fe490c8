"""django-q2 entry points for reconciliation work: ids in, a service call, nothing clever.

Each is safe to run twice: it re-reads state and acts only through a claim or a service.
"""

from __future__ import annotations

from cases.claims import attempts_expire_leases
from reconciliation.apply import apply_case as _apply_case
from reconciliation.sources import source_check as _source_check


def source_check(case_id: int) -> str:
    return _source_check(case_id=case_id)


def apply_case(case_id: int) -> str:
    return _apply_case(case_id=case_id)


def reconcile_case(case_id: int) -> str:
    from reconciliation.settle import case_reconcile

    return case_reconcile(case_id=case_id)


def watchdog() -> int:
    return attempts_expire_leases()


def sweeper() -> str:
    """The cluster's long-lived sweep (see ``reconciliation.sweep``); a second one returns."""
    from reconciliation.sweep import sweeper_run

    return sweeper_run()
