from django.conf import settings
from django.db import models

__all__ = ["Event", "SchedulerCycle", "ClusterSample", "QueueSample"]


class Event(models.Model):
    """Append-only audit log: submissions, admissions, preemptions, quota changes, node transitions.

    Indexes (issue 16: a cycle writes one "admitted" Event per started job, 10,000 in the headline cycle, and
    each index is one more entry per row): `kind` by a plain index (Meta.indexes; `db_index=True` on PostgreSQL
    added a varchar_pattern_ops twin for LIKE, which nothing runs on kinds) of every kind but "admitted" (migration
    0025_e2eschema: the admissions, one per start, are read by job or down the time index); `actor`, `queue` and `node`,
    null on most events (every admission), only where set (partial indexes: `= x`, `IN (...)` and the foreign
    keys' checks use them).

    `job` has no foreign-key constraint in the database (migration 0023_e2e9, issue 16: the cycle's 10,000 admission
    Events were 10,000 row-by-row checks): the audit writer, the one writer of Events, checks the job ids of what it
    writes in one statement with the same lock (bulk.lock_keys: FOR KEY SHARE until the transaction ends); a job's
    deletion still sets it null (Django's on_delete). Nor do `actor`, `queue` and `node` (migration 0033_deferred_fk:
    PostgreSQL queued a deferred constraint's check for every row inserted, null or not, and ran the queue at the
    commit: three per admission Event, ~23 ms of the headline cycle's commit); the audit writer checks the ids it
    writes (none on an admission) with the same lock, and a deferred trigger on the user, queue and node tables refuses
    deleting a row an Event still names, as the constraint did (Django's SET_NULL runs first for a queue or node; a
    user an Event names is refused by Django's PROTECT before that: the account is deactivated instead)."""

    time = models.DateTimeField(db_index=True)
    kind = models.CharField(max_length=40)
    # PROTECT (migration 0034_user_history_protect): the audit log keeps who did what; an account an Event names is
    # deactivated, not deleted (Django's collector refuses first, the deferred trigger is the raw SQL's backstop)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                              db_index=False, db_constraint=False)
    job = models.ForeignKey("gpuplatform.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="events",
                            db_constraint=False)
    queue = models.ForeignKey("gpuplatform.Queue", null=True, blank=True, on_delete=models.SET_NULL, related_name="events",
                              db_index=False, db_constraint=False)
    node = models.ForeignKey("gpuplatform.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="events",
                             db_index=False, db_constraint=False)
    cycle = models.PositiveIntegerField(null=True, blank=True)
    message = models.TextField()
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-time", "-id"]
        indexes = [
            # every kind but "admitted" (migration 0025_e2eschema): one admission per started job, 10,000 rows in
            # the headline cycle, and nothing looks admissions up by kind alone (a job's are read by job, a listing
            # of them goes down the time index); `kind = 'x'` / `kind IN (...)` of any other kind uses it
            models.Index(fields=["kind"], condition=~models.Q(kind="admitted"), name="event_kind_not_admitted"),
            models.Index(fields=["actor"], condition=models.Q(actor__isnull=False), name="event_actor_set"),
            models.Index(fields=["queue"], condition=models.Q(queue__isnull=False), name="event_queue_set"),
            models.Index(fields=["node"], condition=models.Q(node__isnull=False), name="event_node_set"),
        ]

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%d %H:%M:%S} {self.kind}: {self.message}"


class SchedulerCycle(models.Model):
    """One scheduling cycle: when (wall and cluster clock), how long each phase took, what it decided."""

    number = models.PositiveIntegerField(unique=True)
    started_at = models.DateTimeField()
    clock = models.DateTimeField(help_text="the cluster clock the cycle ran at (simulated in the demo)")
    duration_ms = models.FloatField(default=0)
    timings = models.JSONField(default=dict, blank=True)
    binds = models.PositiveIntegerField(default=0)
    evictions = models.PositiveIntegerField(default=0)
    pending = models.PositiveIntegerField(default=0)
    stale_skipped = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-number"]


class ClusterSample(models.Model):
    """Per-cycle cluster metrics (DESIGN section 6) for the dashboards."""

    time = models.DateTimeField(db_index=True)
    cycle = models.PositiveIntegerField(null=True, blank=True)
    schedulable_gpus = models.PositiveIntegerField()
    allocated_gpus = models.PositiveIntegerField(help_text="bound to jobs (running, starting or stopping)")
    held_gpus = models.PositiveIntegerField(default=0, help_text="held for jobs not started (reservations, "
                                                                 "eviction beneficiaries): neither allocated nor free")
    held_at = models.JSONField(
        default=dict, blank=True,
        help_text="which GPUs held_gpus counts: {node name: [GPU indices]} (CycleResult.held), for the topology map")
    free_gpus = models.PositiveIntegerField()
    allocation_rate = models.FloatField()
    fragmentation_rate = models.FloatField()
    largest_runnable = models.JSONField(default=dict, help_text="tier -> GPUs")
    by_group = models.JSONField(
        default=dict, blank=True,
        help_text="per GPU flavor and node size ('H100 x8'): nodes, free_nodes, schedulable_gpus, free_gpus, "
                  "largest_runnable (top tier), fragmentation_rate (scheduler.core.metrics.metrics_by_group)")
    domain_completeness = models.FloatField()
    pending_jobs = models.PositiveIntegerField(default=0)
    running_jobs = models.PositiveIntegerField(default=0)
    sharing = models.JSONField(
        default=dict, blank=True,
        help_text="GPU sharing (scheduler.core.sharing.sharing_metrics): allocated_gpu_equivalents, shared_gpus, "
                  "fgd_fragmentation {flavor: GPUs unusable by the expected request mix}, mig_instances, mig_used; "
                  "{} for a cycle without shared, auto or MIG GPUs nor sharing jobs")

    class Meta:
        ordering = ["-time"]


class QueueSample(models.Model):
    """Per-cycle queue watermark: used and held vs guarantee / quota / limit and pending demand, in GPUs."""

    time = models.DateTimeField(db_index=True)
    queue = models.ForeignKey("gpuplatform.Queue", on_delete=models.CASCADE, related_name="samples")
    # GPU-equivalents (a 0.25 share counts 0.25, as against the quota: queries.queue_gpu_milli)
    used = models.FloatField(help_text="GPU-equivalents allocated to the subtree's jobs")
    guarantee = models.PositiveIntegerField()
    quota = models.PositiveIntegerField()
    limit = models.PositiveIntegerField(null=True, blank=True)
    pending_demand = models.FloatField(help_text="GPU-equivalents the subtree's pending jobs ask for")
    held = models.PositiveIntegerField(
        default=0, help_text="GPUs held (reserved) for the subtree's jobs that have not started, GPUs")
    fair_share = models.FloatField(null=True, blank=True, help_text="the engine's water-filled fair share, GPUs")

    class Meta:
        ordering = ["-time"]
