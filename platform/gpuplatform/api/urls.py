"""API routes: one DefaultRouter, kebab-case plural resource names under /api/v1/ (NetBox style)."""
from django.urls import include, path
from rest_framework.routers import DefaultRouter
from rest_framework.settings import api_settings
from rest_framework.urlpatterns import format_suffix_patterns

from . import views
from .views.forecast import WhatIfView
from ..auth_throttle import RevokeAuthToken, ThrottledObtainAuthToken

app_name = "api"

# Endpoints outside the router's viewsets, listed by the API root too (GET /api/v1/ showed only the
# viewsets: new-user trial 7, F20): root key -> URL name (a name that does not resolve is left out).
EXTRA_ROOT = {"me": "me", "forecast": "forecast", "utilization": "utilization", "auth-token": "auth-token",
              "auth-token/revoke": "auth-token-revoke", "federation/clusters": "federation-cluster-list",
              "federation/jobs": "federation-job-list", "federation/member/jobs": "federation-member-job-list",
              "federation/member/forecast": "federation-member-forecast",
              "federation/member/summary": "federation-member-summary"}


class Router(DefaultRouter):
    # The format suffix routes (/jobs/1.json) take only the renderers' formats: with any suffix, an id that is not a
    # whole number (/jobs/1.5/) matched as id 1 with format "5" and was answered {"format": ["must be one of api,
    # json"]} (new-user trial 17b, F13); now it matches no route: 404.
    include_format_suffixes = False

    def get_urls(self):
        formats = sorted({renderer.format for renderer in api_settings.DEFAULT_RENDERER_CLASSES})
        return format_suffix_patterns(super().get_urls(), allowed=formats)

    def get_api_root_view(self, api_urls=None):
        root = {prefix: self.routes[0].name.format(basename=basename) for prefix, _, basename in self.registry}
        return self.APIRootView.as_view(api_root_dict={**root, **EXTRA_ROOT})


router = Router()
router.register("teams", views.TeamViewSet, basename="team")
router.register("memberships", views.MembershipViewSet, basename="membership")
router.register("queues", views.QueueViewSet, basename="queue")
router.register("quotas", views.QuotaViewSet, basename="quota")
router.register("domains", views.DomainViewSet, basename="domain")
router.register("nodes", views.NodeViewSet, basename="node")
router.register("jobs", views.JobViewSet, basename="job")
router.register("events", views.EventViewSet, basename="event")
router.register("diagnosis-rules", views.DiagnosisRuleViewSet, basename="diagnosis-rule")
router.register("health-rules", views.HealthRuleViewSet, basename="health-rule")
router.register("cluster-metrics", views.ClusterMetricsViewSet, basename="cluster-metrics")
router.register("scheduler-cycles", views.SchedulerCycleViewSet, basename="scheduler-cycle")
router.register("fragmentation-advice", views.FragmentationAdviceViewSet, basename="fragmentation-advice")
router.register("shape-check", views.ShapeCheckViewSet, basename="shape-check")

urlpatterns = [
    path("me/", views.MeView.as_view(), name="me"),
    path("forecast/", WhatIfView.as_view(), name="forecast"),
    path("auth-token/", ThrottledObtainAuthToken.as_view(), name="auth-token"),
    path("auth-token/revoke/", RevokeAuthToken.as_view(), name="auth-token-revoke"),
    path("utilization/", views.UtilizationView.as_view(), name="utilization"),
    path("federation/", include("gpuplatform.federation.urls")),
    *router.urls,
]
