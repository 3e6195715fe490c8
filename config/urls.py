from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from approvals.api import CaseWithProposalsViewSet, ProposalViewSet
from cases import live
from config import health, metrics
from reconciliation.api import ChangeKindViewSet

# No ``.json`` suffix routes: the API speaks JSON only, and suffixed @action routes were 500s.
router = DefaultRouter()
router.include_format_suffixes = False
# The kernel's case API (cases.api.CaseViewSet) with approvals' POST .../proposals/ added.
router.register("cases", CaseWithProposalsViewSet, basename="case")
router.register("proposals", ProposalViewSet, basename="proposal")
router.register("kinds", ChangeKindViewSet, basename="kind")

urlpatterns = [
    # Probes (config.health): unauthenticated, never cached, exempt from the HTTPS redirect.
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    # Prometheus (config.metrics): a bearer token in production.
    path("metrics", metrics.metrics, name="metrics"),
    path("", RedirectView.as_view(pattern_name="admin:index", permanent=False)),
    # Polled by open admin pages (cases.live); before the admin so its catch-all never sees them.
    path("admin/live/cases/<str:reference>/", live.case_live, name="live-case"),
    path("admin/live/queues/<str:name>/", live.queue_live, name="live-queue"),
    path("admin/", admin.site.urls),
    path("api/hooks/orders/", include("reconciliation.webhooks")),
    path("api/", include(router.urls)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # Swagger UI's init script is a file of its own (?script=), as the CSP asks.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
]

handler404 = "config.views.not_found"
handler500 = "config.views.server_error"
