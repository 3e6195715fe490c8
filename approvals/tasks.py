"""django-q2 entry points for proposals and approvals. Each is safe to run twice."""

from __future__ import annotations

from approvals import services


def expire_approvals() -> int:
    return services.approvals_expire_due()
