"""API routes: one DefaultRouter, kebab-case plural resource names under /api/v1/ (NetBox style)."""
from django.urls import include, path
from rest_framework.routers import DefaultRouter

from . import views
from .views.forecast import WhatIfView
from ..auth_throttle import RevokeAuthToken, ThrottledObtainAuthToken

app_name = "api"

router = DefaultRouter()
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
