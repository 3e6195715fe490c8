"""Small JSON endpoints an open admin page polls to notice that what it shows has changed.

A case answers with its version (every change bumps it); a queue answers with a digest that
changes whenever a member is added, removed or changes version. Both are read-only, scoped to
the caller's teams through the selectors, and never cached.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import wraps

from django.contrib import admin
from django.db.models import Count, Max, Sum
from django.http import JsonResponse
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from cases import selectors
from cases.exceptions import CaseNotFound
from cases.extensions import QUEUE_SOURCES
from cases.next_action import status_label

# The queues by name, in order: the kernel's own, then those the apps above it register
# (``cases.extensions.register_queue``; approvals adds "review"). A live view, not a copy.
QUEUES = QUEUE_SOURCES


def _error(code: str, detail: str, status: int) -> JsonResponse:
    return JsonResponse({"error": code, "detail": detail}, status=status)


def staff_json(view: Callable) -> Callable:
    """The admin site's own permission check (active staff), answered in JSON.

    ``admin_view`` would redirect to the HTML login page, which a poller cannot tell from an
    answer; a 401 lets the page stop trusting itself instead.
    """

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if not admin.site.has_permission(request):
            return _error("not_authenticated", "Log in to the admin as a staff user.", 401)
        return view(request, *args, **kwargs)

    return require_GET(never_cache(wrapped))


def case_state(case) -> dict:
    return {
        "reference": case.reference,
        "version": case.version,
        "status": case.status,
        # As the case page's heading names it (``next_action.status_label``).
        "status_display": status_label(case),
        "next_check_at": case.next_check_at.isoformat() if case.next_check_at else None,
        "updated_at": case.updated_at.isoformat(),
    }


def queue_state(user, name: str) -> dict:
    """Count and digest of a queue, computed by aggregates in SQL (no rows are loaded).

    Versions only grow and every member change bumps one, so a changed member raises the
    version sum; an added or removed member changes the count, the pk sum or both.
    """
    source = QUEUES[name]  # KeyError for a queue nobody registered
    prefix = source.case_lookup
    row = (
        source.rows(user)
        .order_by()
        .aggregate(
            count=Count("pk"),
            pks=Sum("pk"),
            versions=Sum(f"{prefix}version"),
            latest=Max(f"{prefix}updated_at"),
        )
    )
    latest = row["latest"].isoformat() if row["latest"] else ""
    raw = f"{name}:{row['count']}:{row['pks'] or 0}:{row['versions'] or 0}:{latest}"
    return {"count": row["count"], "digest": hashlib.sha256(raw.encode()).hexdigest()[:20]}


@staff_json
def case_live(request, reference: str):
    """GET /admin/live/cases/<reference>/: the case's version and status, for its open page."""
    try:
        case = selectors.case_get_for(request.user, reference)
    except CaseNotFound as exc:
        return _error("not_found", exc.detail, 404)
    return JsonResponse(case_state(case))


@staff_json
def queue_live(request, name: str):
    """GET /admin/live/queues/<name>/: the queue's count and digest, for its open list page."""
    if name not in QUEUES:
        return _error("not_found", f"No queue {name!r}; try one of {', '.join(QUEUES)}.", 404)
    return JsonResponse(queue_state(request.user, name))


def case_live_url(reference: str) -> str:
    return reverse("live-case", args=[reference])


def queue_live_url(name: str) -> str:
    return reverse("live-queue", args=[name])
