"""API viewsets split by topic; each is queryset + serializer + filterset, writes go through services."""
from .cluster import DomainViewSet, NodeViewSet
from .jobs import JobViewSet
from .metrics import ClusterMetricsViewSet, EventViewSet, SchedulerCycleViewSet
from .queues import QueueViewSet, QuotaViewSet
from .rules import DiagnosisRuleViewSet, HealthRuleViewSet
from .reschedule import FragmentationAdviceViewSet, ShapeCheckViewSet
from .tenancy import MembershipViewSet, MeView, TeamViewSet
from .utilization import UtilizationView

__all__ = [
    "ClusterMetricsViewSet", "DiagnosisRuleViewSet", "DomainViewSet", "FragmentationAdviceViewSet", "HealthRuleViewSet", "EventViewSet", "JobViewSet", "MeView", "MembershipViewSet",
    "NodeViewSet", "QueueViewSet", "QuotaViewSet", "SchedulerCycleViewSet", "ShapeCheckViewSet", "TeamViewSet", "UtilizationView",
]
