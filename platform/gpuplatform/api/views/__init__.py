"""API viewsets split by topic; each is queryset + serializer + filterset, writes go through services."""
from .cluster import DomainViewSet, NodeViewSet
from .jobs import JobViewSet
from .metrics import ClusterMetricsViewSet, EventViewSet, SchedulerCycleViewSet
from .queues import QueueViewSet, QuotaViewSet
from .reschedule import FragmentationAdviceViewSet, ShapeCheckViewSet
from .tenancy import MembershipViewSet, MeView, TeamViewSet

__all__ = [
    "ClusterMetricsViewSet", "DomainViewSet", "FragmentationAdviceViewSet", "EventViewSet", "JobViewSet", "MeView", "MembershipViewSet",
    "NodeViewSet", "QueueViewSet", "QuotaViewSet", "SchedulerCycleViewSet", "ShapeCheckViewSet", "TeamViewSet",
]
