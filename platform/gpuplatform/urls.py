from django.contrib import admin
from django.urls import include, path
from csp.decorators import csp_update
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView

from .auth_throttle import ThrottledLoginView
from .federation.views import federation_page
from .prometheus import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("gpuplatform.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),  # OpenAPI 3 (YAML; ?format=json)
    # The split view serves Swagger UI's start-up script as a file (no inline script: the CSP holds).
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    # Redoc's page starts with a small inline script: allowed on that page only.
    path("api/redoc/", csp_update({"script-src": ["'unsafe-inline'"]})(SpectacularRedocView.as_view(url_name="api-schema")),
         name="api-redoc"),
    path("metrics", metrics_view, name="metrics"),  # Prometheus
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),  # brute-force lock-out (auth_throttle.py)
    path("accounts/", include("django.contrib.auth.urls")),  # login, logout (POST), password change
    path("federation/", federation_page, name="federation"),  # issue #22: member clusters and federated jobs
    path("", include("frontend.urls")),
]

handler404 = "gpuplatform.inputs.page_not_found"  # JSON {"detail": ...} under /api/ (inputs.py)
handler403 = "gpuplatform.inputs.permission_denied_page"  # the 403 page with its reason (inputs.py)
handler500 = "gpuplatform.inputs.server_error"  # a lost database -> 503 JSON + Retry-After (inputs.py)
