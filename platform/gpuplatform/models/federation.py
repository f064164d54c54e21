"""Federation (issue #22, DESIGN section 15): the manager's member clusters and the jobs it places on them.

Only an instance configured as a manager (FEDERATION_ROLE = "manager") fills these tables; a worker keeps
its jobs in `Job` as always (a federated job's copy carries `external_id` "fed:<manager job id>:g<generation>").
"""
from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q

__all__ = ["MemberCluster", "FederatedJob"]


class MemberCluster(models.Model):
    """A worker cluster the manager dispatches to: where its API is, the service token the manager uses there
    (stored encrypted with FEDERATION_TOKEN_KEY, federation/secrets.py; never shown back), labels such as
    {"region": "eu", "data-site": "lyon"}, the cost of one GPU-hour, and what the last sync saw."""

    class State(models.TextChoices):
        NEW = "new", "new"  # never synced
        HEALTHY = "healthy", "healthy"
        UNREACHABLE = "unreachable", "unreachable"  # the last sync failed; not yet lost
        REFUSED = "refused", "refused"  # the last sync was answered 401 / 403: the manager's token for it is wrong
        LOST = "lost", "lost"  # unreachable for WORKER_LOST_SECONDS: its jobs were moved

    name = models.SlugField(max_length=64, unique=True)
    api_url = models.URLField(max_length=300, help_text="the worker's base address, e.g. https://gpu-eu.example:8000")
    token_encrypted = models.TextField(blank=True, editable=False)
    labels = models.JSONField(default=dict, blank=True, help_text='{"region": "eu", "data-site": "lyon"}')
    cost_per_gpu_hour = models.FloatField(default=0.0, validators=[MinValueValidator(0.0)])
    enabled = models.BooleanField(default=True, help_text="dispatch new jobs here (a disabled cluster is still synced)")
    state = models.CharField(max_length=16, choices=State.choices, default=State.NEW)
    summary = models.JSONField(default=dict, blank=True, help_text="the last sync's summary (scheduler.core.federation.summarize)")
    last_sync_at = models.DateTimeField(null=True, blank=True, help_text="last successful sync")
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    unreachable_since = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    sync_bytes = models.PositiveIntegerField(default=0, help_text="size of the last summary, bytes")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.CheckConstraint(condition=Q(cost_per_gpu_hour__gte=0), name="membercluster_cost_ge_0")]

    def __str__(self) -> str:
        return self.name

    def set_token(self, raw: str) -> None:
        from ..federation.secrets import encrypt

        self.token_encrypted = encrypt(raw)

    def token(self) -> str:
        from ..federation.secrets import decrypt

        return decrypt(self.token_encrypted) if self.token_encrypted else ""


class FederatedJob(models.Model):
    """A job submitted to the manager. At most one live copy on one member at a time: `cluster`, `remote_id`
    and `generation` name it (external_id "fed:<id>:g<generation>" on the worker); `placements` lists every
    copy ever made with its outcome; a copy marked `fenced` is stopped when its worker answers again."""

    class State(models.TextChoices):
        PENDING = "pending", "pending"  # at the manager, waiting to be placed
        DISPATCHING = "dispatching", "dispatching"  # a create was sent (or is about to be); retried with its key
        DISPATCHED = "dispatched", "dispatched"  # pending on its worker
        RUNNING = "running", "running"
        SUCCEEDED = "succeeded", "succeeded"
        FAILED = "failed", "failed"
        CANCELLED = "cancelled", "cancelled"
        LOST = "lost", "lost"  # was running on a lost worker and is not restartable: waits for it to return

    LIVE = ("dispatching", "dispatched", "running", "lost")
    ENDED = ("succeeded", "failed", "cancelled")

    name = models.CharField(max_length=200)
    team = models.ForeignKey("gpuplatform.Team", on_delete=models.PROTECT, related_name="federated_jobs")
    queue = models.CharField(max_length=100)
    # PROTECT, as Job.submitter (migration 0034_user_history_protect): who submitted it is history, kept
    submitter = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                  related_name="federated_jobs")
    spec = models.JSONField(help_text="the worker's job submission body (POST /api/v1/jobs/), without external_id")
    gpus = models.PositiveIntegerField(default=0)
    task_gpus = models.PositiveIntegerField(default=0)
    flavors = models.JSONField(default=list, blank=True)
    highest_tier = models.PositiveIntegerField(null=True, blank=True)
    clusters = models.JSONField(default=list, blank=True, help_text="allowed member names ([] = any)")
    cluster_selector = models.JSONField(default=dict, blank=True, help_text="labels a member must have")
    data_site = models.CharField(max_length=100, blank=True)
    restartable = models.BooleanField(default=False, help_text="may be restarted elsewhere when its worker is lost")
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING, db_index=True)
    cluster = models.ForeignKey(MemberCluster, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs")
    remote_id = models.BigIntegerField(null=True, blank=True)
    remote_state = models.CharField(max_length=16, blank=True)
    generation = models.PositiveIntegerField(default=0)
    decision = models.JSONField(default=dict, blank=True, help_text="the last dispatch's scores and rejections")
    placements = models.JSONField(default=list, blank=True)
    reason = models.CharField(max_length=500, blank=True, help_text="why it waits at the manager")
    submitted_at = models.DateTimeField(auto_now_add=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [models.Index(fields=["team", "state"], name="fedjob_team_state")]

    def __str__(self) -> str:
        return f"{self.pk}:{self.name}"

    @property
    def external_id(self) -> str:
        return f"fed:{self.pk}:g{self.generation}"

    @property
    def idempotency_key(self) -> str:
        return f"fed-{self.pk}-g{self.generation}"
