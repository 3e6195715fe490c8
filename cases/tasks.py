"""django-q2 entry points for case housekeeping: ids in, a service call, nothing clever."""

from __future__ import annotations

from cases.dispatch import dispatch_due as _dispatch_due


def dispatch_due() -> int:
    return _dispatch_due()
