"""One bounded retry policy per kind of work, and one consecutive-failure counter per kind.

Kinds: ``apply`` (sending the approved change), ``source_check`` (reading the order),
``reconcile`` (settling a held case from evidence) and ``inbound`` (processing one stored order
event; its counter is the event row's own ``attempts``). Each policy names its bound (a setting,
with its default) and schedules the next try on the one backoff (``cases.backoff``).

A case keeps its counters in ``Case.retry_counts`` (``{kind: consecutive failures}``); a
failure of one kind never counts against another. ``Case.retry_count`` shows the count of the
kind that failed last (the step in progress), for the pages that show it. Only
``reconciliation.failures.transient_failure_record`` raises a counter; a kind's success (or a
person asking for a fresh try) resets it with :func:`retries_reset`, saved with its write.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Final

from django.conf import settings

from cases.backoff import next_retry_at
from cases.models import Case


@dataclass(frozen=True)
class RetryPolicy:
    """How often one kind of work is tried again after a transient failure: up to ``limit``
    consecutive failures (the setting ``limit_setting``, ``default_limit`` when unset), each
    next try on the bounded exponential backoff. The failure that reaches the limit gives the
    work to a person. ``names_next_check``: the give-up still names the next permitted check
    (the apply); otherwise nothing is scheduled until a person asks. ``withdraws_proposals``:
    giving up withdraws the case's open proposal (the source check: a proposal resting on an
    order that could not be read is void)."""

    kind: str
    limit_setting: str
    default_limit: int
    names_next_check: bool = False
    withdraws_proposals: bool = False

    @property
    def limit(self) -> int:
        return int(getattr(settings, self.limit_setting, self.default_limit))

    def gives_up(self, failures: int) -> bool:
        """The ``failures``-th consecutive failure is the last one tried automatically."""
        return failures >= self.limit

    def next_try_at(self, failures: int, *, retry_after: float | None = None) -> dt.datetime:
        """When to try again after ``failures`` consecutive failures (never sooner than the
        other system's ``Retry-After``)."""
        return next_retry_at(failures, retry_after=retry_after)


APPLY: Final = RetryPolicy("apply", "ATTEMPT_LIMIT", 5, names_next_check=True)
SOURCE_CHECK: Final = RetryPolicy(
    "source_check", "SOURCE_CHECK_ATTEMPT_LIMIT", 5, withdraws_proposals=True
)
RECONCILE: Final = RetryPolicy("reconcile", "RECONCILE_ATTEMPT_LIMIT", 10)
INBOUND: Final = RetryPolicy("inbound", "INBOUND_ATTEMPT_LIMIT", 10)

POLICIES: Final[dict[str, RetryPolicy]] = {
    p.kind: p for p in (APPLY, SOURCE_CHECK, RECONCILE, INBOUND)
}


def retry_policy(kind: str) -> RetryPolicy:
    """The policy of ``kind`` (``KeyError`` for a kind that has none)."""
    return POLICIES[kind]


def retry_failures(case: Case, kind: str) -> int:
    """Consecutive transient failures of ``kind`` on ``case`` so far."""
    return int((case.retry_counts or {}).get(kind, 0))


def retries_count_one_more(case: Case, kind: str) -> dict[str, Any]:
    """Count one more failure of ``kind`` on ``case`` (in memory) and return the field values
    to save with the write that records it."""
    failures = retry_failures(case, kind) + 1
    case.retry_counts = {**(case.retry_counts or {}), kind: failures}
    case.retry_count = failures
    return {"retry_counts": case.retry_counts, "retry_count": failures}


def retries_reset(case: Case, *kinds: str) -> dict[str, Any]:
    """``kinds`` succeeded (or a person asked for a fresh try): their counters start again.
    Returns the field values to save with that write (``apply_transition(**changes)`` or the
    fields of ``bump_and_save``); the case in memory already has them."""
    unknown = [kind for kind in kinds if kind not in POLICIES]
    if not kinds or unknown:
        raise ValueError(f"No retry policy for {unknown or 'no kind'}")
    case.retry_counts = {k: v for k, v in (case.retry_counts or {}).items() if k not in kinds}
    case.retry_count = 0
    return {"retry_counts": case.retry_counts, "retry_count": 0}
