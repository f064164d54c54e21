from django.db import models
from django.db.models import F, Q

__all__ = ["Queue", "Quota"]


class Queue(models.Model):
    """A node of the hierarchical queue tree (Volcano Queue / Kueue ClusterQueue+Cohort).

    Leaf queues belong to a team; inner queues belong to the platform. `weight` shares idle capacity
    among queues above their quota. `preemption_grace_seconds` is the checkpoint window a victim gets.

    Lifecycle (`state`): open -> closing -> closed. A queue asked to close while it still has pending or
    live jobs is `closing`: it takes no new jobs, its jobs are scheduled and run to their end, and it
    becomes `closed` when its last job ends (lifecycle.close_idle_queues). `draining` takes no new jobs
    and stays so until reopened.
    """

    class State(models.TextChoices):
        OPEN = "open", "open"
        CLOSING = "closing", "closing"  # no new jobs; its jobs run to their end, then it is closed
        CLOSED = "closed", "closed"  # no new jobs, and none left
        DRAINING = "draining", "draining"  # no new jobs; pending ones still scheduled

    name = models.CharField(max_length=100, unique=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    team = models.ForeignKey("gpuplatform.Team", null=True, blank=True, on_delete=models.PROTECT, related_name="queues")
    weight = models.FloatField(default=1.0)
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN)
    preemption_grace_seconds = models.PositiveIntegerField(default=30)
    idle_timeout_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="stop a job idle this long (its owner is told at marking); blank = never")
    recent_usage = models.JSONField(default=dict, blank=True,
                                    help_text="decayed average GPUs per flavor (SCHEDULER_USAGE_HALF_LIFE_SECONDS)")
    recent_usage_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(weight__gt=0), name="queue_weight_positive"),
            models.CheckConstraint(condition=~Q(parent=F("id")), name="queue_not_own_parent"),
        ]

    def __str__(self) -> str:
        return self.name


class Quota(models.Model):
    """Per queue and GPU flavor (GPU model): guarantee <= quota <= limit, in GPUs.

    guarantee: never reclaimed below. quota: the deserved (nominal) share. limit: the hard cap including
    borrowing; null means "the parent's limit" (no cap of its own).
    """

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="quotas")
    flavor = models.CharField(max_length=64)
    guarantee = models.PositiveIntegerField(default=0)
    quota = models.PositiveIntegerField(default=0)
    limit = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["queue__name", "flavor"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "flavor"], name="quota_unique_queue_flavor"),
            models.CheckConstraint(condition=Q(guarantee__lte=F("quota")), name="quota_guarantee_le_quota"),
            models.CheckConstraint(condition=Q(limit__isnull=True) | Q(quota__lte=F("limit")), name="quota_quota_le_limit"),
        ]

    def __str__(self) -> str:
        return f"{self.queue}/{self.flavor}: {self.guarantee}/{self.quota}/{self.limit}"
