from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from .auth_throttle import ThrottledLoginView
from .prometheus import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("gpuplatform.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),  # OpenAPI 3 (YAML; ?format=json)
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("metrics", metrics_view, name="metrics"),  # Prometheus
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),  # brute-force lock-out (auth_throttle.py)
    path("accounts/", include("django.contrib.auth.urls")),  # login, logout (POST), password change
    path("", include("frontend.urls")),
]

handler500 = "gpuplatform.inputs.server_error"  # a lost database -> 503 JSON + Retry-After (inputs.py)
