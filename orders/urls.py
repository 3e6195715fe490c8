from django.conf import settings
from django.urls import path, re_path

from orders import views

urlpatterns = [
    path("healthz", views.healthz),
    path("capabilities", views.capabilities),
    path("orders/<str:order_id>", views.order_detail),
    path("orders/<str:order_id>/operations", views.operation_create),
    path("orders/<str:order_id>/fence", views.fence),
    path("slots/<str:day>", views.slot_detail),
    path("operations/<str:operation_key>", views.operation_detail),
    path("search/operations", views.operation_search),
    path("fences/max", views.fences_max),
]

# Fault control and the testing endpoints (one deletes every row) exist outside production
# only; there they are still 404 unless ORDERS_FAULTS_ENABLED (see ``views.gated``).
if not settings.PRODUCTION:
    urlpatterns += [
        path("_faults/", views.fault_rules),
        path("_faults/search-lag", views.search_lag),
        path("_testing/reset", views.testing_reset),
        path("_testing/seed", views.testing_seed),
        path("_testing/accounts/<str:account_id>/access", views.testing_access),
        path("_testing/orders/<str:order_id>", views.testing_order),
        path("_testing/orders/<str:order_id>/state", views.testing_state),
        path("_testing/outbox", views.testing_outbox),
        path("_testing/outbox/<str:event_id>/resend", views.testing_resend),
    ]

urlpatterns += [
    # JSON, not Django's HTML page, for every unknown path (also with debug on).
    re_path(r"", views.not_found),
]

handler404 = views.not_found
handler500 = views.server_error
