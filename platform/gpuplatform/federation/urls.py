"""/api/v1/federation/...: the manager's clusters/ and jobs/, and the worker's member/ endpoints."""
from django.urls import path
from rest_framework.routers import DefaultRouter

from .api import FederatedJobViewSet, MemberClusterViewSet
from .worker_api import WorkerFederationViewSet, WorkerForecastView

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("clusters", MemberClusterViewSet, basename="federation-cluster")
router.register("jobs", FederatedJobViewSet, basename="federation-job")
router.register("member/jobs", WorkerFederationViewSet, basename="federation-member-job")

urlpatterns = [
    path("member/forecast/", WorkerForecastView.as_view(), name="federation-member-forecast"),
    path("member/summary/", WorkerFederationViewSet.as_view({"get": "summary"}), name="federation-member-summary"),
    *router.urls,
]
