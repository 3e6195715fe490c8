"""``GET /metrics``: Prometheus text for this host's processes and the desk's state.

Open in development; with ``METRICS_TOKEN`` set (required in production) it answers only
``Authorization: Bearer <METRICS_TOKEN>``, compared in constant time, and ``401`` otherwise.
``METRICS_ENABLED=0`` answers ``404``. Never cached. What it exports and why: see
``reconciliation.metrics`` (what processes do) and ``reconciliation.scrape`` (the database).
"""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST

from reconciliation.scrape import bearer_ok, exposition


@never_cache
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    if not settings.METRICS_ENABLED:
        raise Http404("Metrics are off (METRICS_ENABLED=0).")
    if not bearer_ok(request.headers.get("Authorization", ""), settings.METRICS_TOKEN):
        return HttpResponse(
            "Send Authorization: Bearer <METRICS_TOKEN>.\n",
            status=401,
            content_type="text/plain; charset=utf-8",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    return HttpResponse(exposition(database=True), content_type=CONTENT_TYPE_LATEST)
