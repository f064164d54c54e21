"""The platform's domain model, split by topic (see DESIGN.md section 4)."""
from .cluster import Domain, Gpu, Node
from .events import ClusterSample, Event, QueueSample, SchedulerCycle
from .queues import Quota, Queue
from .telemetry import GpuSample, GpuXid, IdleAllocation, TaskUtilization
from .tenancy import Membership, Team
from .workloads import Allocation, Job, JobRole, Task, TaskLog

__all__ = [
    "Allocation", "ClusterSample", "Domain", "Event", "Gpu", "GpuSample", "GpuXid", "IdleAllocation", "Job", "JobRole", "Membership", "Node",
    "Queue", "QueueSample", "Quota", "SchedulerCycle", "Task", "TaskLog", "TaskUtilization", "Team",
]
