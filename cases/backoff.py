"""One bounded retry policy: exponential backoff with jitter, never sooner than the server asked."""

from __future__ import annotations

import datetime as dt
import random

from django.conf import settings
from django.utils import timezone


def retry_delay(failures: int, *, retry_after: float | None = None, rng=random) -> float:
    """Seconds to wait after ``failures`` consecutive transient failures (1 = the first).

    ``base * 2**(failures-1)`` capped at the maximum, spread by ±jitter, and never below a
    ``Retry-After`` the other system sent.
    """
    base = settings.RETRY_BASE_SECONDS * (2 ** max(failures - 1, 0))
    delay = min(base, settings.RETRY_MAX_SECONDS)
    jitter = settings.RETRY_JITTER
    delay *= 1 + rng.uniform(-jitter, jitter)
    if retry_after is not None:
        delay = max(delay, retry_after)
    return max(delay, 0.0)


def next_retry_at(failures: int, *, retry_after: float | None = None) -> dt.datetime:
    return timezone.now() + dt.timedelta(seconds=retry_delay(failures, retry_after=retry_after))
