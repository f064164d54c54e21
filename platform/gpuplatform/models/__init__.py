"""The platform's domain model, split by topic (see DESIGN.md section 4)."""
from .api import IdempotencyKey
from .agents import NodeAgentScope
from .cluster import Domain, Gpu, MigInstance, Node
from .diagnosis import Attempt, DiagnosisRule, HealthRule
from .federation import FederatedJob, MemberCluster
from .events import ClusterSample, Event, QueueSample, SchedulerCycle
from .queues import Quota, Queue
from .telemetry import GpuSample, GpuXid, IdleAllocation, TaskUtilization
from .tenancy import Membership, Team
from .workloads import Allocation, Job, JobRole, Task, TaskLog

__all__ = [
    "Allocation", "Attempt", "ClusterSample", "DiagnosisRule", "Domain", "Event", "FederatedJob", "MemberCluster", "Gpu",
    "GpuSample", "GpuXid", "MigInstance",
    "HealthRule", "IdempotencyKey", "IdleAllocation", "Job", "JobRole", "Membership", "Node", "NodeAgentScope",
    "Queue", "QueueSample", "Quota", "SchedulerCycle", "Task", "TaskLog", "TaskUtilization", "Team",
]
