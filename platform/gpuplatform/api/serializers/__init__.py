"""API serializers split by topic. Serializers validate types and shapes; the domain rules (quota tree,
gang shape, queue state, ...) live in the services, whose ValidationError becomes a 400 naming the field."""
from .cluster import (
    DomainSerializer, DomainTreeSerializer, GpuSerializer, HeartbeatSerializer, NodeActionSerializer,
    NodeGpuSharingSerializer, NodeRegisterSerializer, NodeReportsSerializer, NodeSerializer, NodeSpareSerializer,
    NodeValidateSerializer,
    NodeValidationResultSerializer,
)
from .jobs import (
    JobCancelSerializer, JobRoleSerializer, JobSerializer, JobSubmitSerializer, JobUpdateSerializer, LogQuerySerializer,
    TaskSerializer,
)
from .metrics import (
    ClusterMetricsSerializer, ClusterSampleSerializer, EventSerializer, QueueUsageSerializer, SchedulerCycleSerializer,
)
from .queues import QueueCreateSerializer, QueueSerializer, QueueTreeSerializer, QueueUpdateSerializer, QuotaSerializer
from .tenancy import MembershipSerializer, TeamSerializer

__all__ = [
    "ClusterMetricsSerializer", "ClusterSampleSerializer", "DomainSerializer", "DomainTreeSerializer",
    "EventSerializer", "GpuSerializer", "HeartbeatSerializer", "JobCancelSerializer", "JobRoleSerializer",
    "JobSerializer", "JobSubmitSerializer", "JobUpdateSerializer", "LogQuerySerializer", "TaskSerializer", "MembershipSerializer", "NodeActionSerializer",
    "NodeGpuSharingSerializer", "NodeRegisterSerializer", "NodeReportsSerializer", "NodeSerializer", "NodeSpareSerializer",
    "NodeValidateSerializer",
    "NodeValidationResultSerializer", "QueueCreateSerializer", "QueueSerializer", "QueueTreeSerializer",
    "QueueUpdateSerializer", "QueueUsageSerializer", "QuotaSerializer", "SchedulerCycleSerializer", "TeamSerializer",
]
