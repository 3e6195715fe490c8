from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from approvals.api import ProposalViewSet
from cases.api import CaseViewSet

router = DefaultRouter()
router.register("cases", CaseViewSet, basename="case")
router.register("proposals", ProposalViewSet, basename="proposal")

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="admin:index", permanent=False)),
    path("admin/", admin.site.urls),
    path("api/hooks/orders/", include("reconciliation.hooks")),
    path("api/", include(router.urls)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
]

handler404 = "config.views.not_found"
handler500 = "config.views.server_error"
