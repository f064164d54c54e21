from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q

__all__ = ["Domain", "Node", "Gpu", "lost_node_q"]


def lost_node_q(at: datetime, prefix: str = "") -> Q:
    """The nodes lost at `at`: not_ready, or silent beyond HEARTBEAT_TIMEOUT_SECONDS (their agent stopped reporting;
    failure detection has not run yet). A node that never sent a heartbeat (not monitored) is not judged silent.
    prefix: the lookup path to the node from the filtered model ("node__" for tasks)."""
    silent = at - timedelta(seconds=float(getattr(settings, "HEARTBEAT_TIMEOUT_SECONDS", 60)))
    return Q(**{f"{prefix}state": "not_ready"}) | Q(**{f"{prefix}last_heartbeat__lt": silent})


class Domain(models.Model):
    """A network performance domain (Volcano HyperNode): tier 1 = scale-up / NVLink domain, 2 = leaf, 3 = spine."""

    name = models.CharField(max_length=200, unique=True)
    tier = models.PositiveSmallIntegerField()
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")

    class Meta:
        ordering = ["tier", "name"]
        constraints = [models.CheckConstraint(condition=Q(tier__gte=1), name="domain_tier_ge_1")]

    def __str__(self) -> str:
        return f"{self.name} (tier {self.tier})"


class Node(models.Model):
    """A GPU server. `domain` is its lowest-tier domain. Only `ready` nodes take new work."""

    class State(models.TextChoices):
        READY = "ready", "ready"
        CORDONED = "cordoned", "cordoned"
        DRAINING = "draining", "draining"
        NOT_READY = "not_ready", "not ready"
        IN_REPAIR = "in_repair", "in repair"
        VALIDATING = "validating", "validating"

    name = models.CharField(max_length=200, unique=True)
    flavor = models.CharField(max_length=64, help_text="GPU model, e.g. H100")
    gpu_count = models.PositiveIntegerField()
    cpu_milli = models.PositiveBigIntegerField(default=0, help_text="CPU capacity in millicores (0 = unconstrained)")
    memory_mib = models.PositiveBigIntegerField(default=0, help_text="RAM in MiB (0 = unconstrained)")
    domain = models.ForeignKey(Domain, null=True, blank=True, on_delete=models.PROTECT, related_name="nodes")
    state = models.CharField(max_length=16, choices=State.choices, default=State.READY)
    labels = models.JSONField(default=dict, blank=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)  # null = never reported: not monitored
    resume_state = models.CharField(max_length=16, blank=True,
                                    help_text="state to return to when a not_ready node's heartbeat resumes")
    # When the node entered its state and why (services.node_states.transition writes both with the state, from the
    # move's reason: "no heartbeat for 60 s (last 2024-03-01T12:00:00+00:00)", an admin's cordon reason, what Slurm
    # reported): the API and the nodes page show them, e.g. for a not_ready node (trial 21, F11). Null / "" for a node
    # that has been in its state since it was loaded from a cluster file.
    state_since = models.DateTimeField(null=True, blank=True, help_text="when the node entered its state")
    state_reason = models.CharField(max_length=300, blank=True, help_text="why it entered its state")

    class Executor(models.TextChoices):
        SIMULATED = "simulated", "simulated (a bound task counts as running; nothing is started)"
        AGENT = "agent", "node agent (starts, watches and stops each task's processes)"
        SLURM = "slurm", "Slurm (the Slurm backend submits each gang as one Slurm job; slurmd runs it)"

    # executors that run real processes: a task bound there waits for its start report, a stop waits for its end
    PROCESS_EXECUTORS = ("agent", "slurm")

    executor = models.CharField(max_length=16, choices=Executor.choices, default=Executor.SIMULATED,
                                help_text="who runs the tasks bound here; a registering node agent sets 'agent'")
    address = models.CharField(max_length=200, blank=True,
                               help_text="address other nodes reach this one at (MASTER_ADDR); blank = its name")
    container_runtime = models.CharField(max_length=16, blank=True, help_text="docker | podman | blank (none)")
    clock_offset_seconds = models.FloatField(null=True, blank=True,
                                             help_text="node clock minus server clock at the last heartbeat")
    # Health (docs/diagnosis.md): why the node is out of service and since when (set by a health rule, the
    # repeat-offender rule or an admin; cleared when it is ready again), what validation found, and the
    # topology audit's mismatches between what the agent reports and what the platform holds.
    health_reason = models.CharField(max_length=300, blank=True)
    health_since = models.DateTimeField(null=True, blank=True)
    validation = models.JSONField(default=dict, blank=True)
    topology_mismatches = models.JSONField(default=list, blank=True)
    inventory = models.JSONField(default=dict, blank=True,
                                 help_text="what the agent last reported: GPU models, NVLink peers, NUMA nodes")
    # A hot spare (docs/diagnosis.md, "Spare nodes"): the scheduler places only interruptible jobs on it (Job.
    # interruptible); a gang that lost a node restarts on a spare of the same flavor at once, stopping them
    # (scheduler.core.spares, gpuplatform.scheduling.spares).
    spare = models.BooleanField(default=False,
                                help_text="hot spare: runs only interruptible jobs and the restart of a failed gang")

    class Meta:
        ordering = ["name"]
        indexes = [models.Index(fields=["state"])]

    def __str__(self) -> str:
        return self.name

    @property
    def out_of_service_reason(self) -> str:
        """Why the node takes no work, as the nodes page shows it ("" for a ready node with no health reason): a
        not_ready node's move reason (failure detection's "heartbeat missed: ...", Slurm's), else its health reason
        (a health rule's, an admin's), else the reason it entered its state."""
        if self.state == self.State.NOT_READY and self.state_reason:
            return self.state_reason
        return self.health_reason or (self.state_reason if self.state != self.State.READY else "")

    @property
    def out_of_service_since(self):
        """Since when the node takes no work (the time of out_of_service_reason), or None."""
        if self.state == self.State.NOT_READY and self.state_since:
            return self.state_since
        return self.health_since or (self.state_since if self.state != self.State.READY else None)


class Gpu(models.Model):
    class Health(models.TextChoices):
        HEALTHY = "healthy", "healthy"
        UNHEALTHY = "unhealthy", "unhealthy"

    # no index of its own: the unique (node, index) constraint's index leads with it (migration 0025_e2eschema)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus", db_index=False)
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=80, blank=True)
    numa_node = models.SmallIntegerField(null=True, blank=True)
    health = models.CharField(max_length=16, choices=Health.choices, default=Health.HEALTHY)
    health_reason = models.CharField(max_length=200, blank=True)

    class OutOfService(models.TextChoices):
        """Why the node's registration holds the GPU unhealthy (services/nodes.py), "" when it does not. Such a GPU
        stays unhealthy whatever its heartbeats say; only a registration that reports it usable again clears it, and
        failure detection names it as the cause of a requeue ("GPU out of service: ...")."""

        NO = "", "no (health as its agent reports)"
        NOT_REPORTED = "not_reported", "not reported at its node's last registration (kept for its history)"
        MIG_CHANGED = "mig_changed", "its MIG layout changed under a running job"

    out_of_service = models.CharField(max_length=16, choices=OutOfService.choices, default=OutOfService.NO,
                                      blank=True)

    # An admin's fence (services.nodes.set_gpu_fence, POST /api/v1/nodes/<name>/gpus/<index>/fence/): the GPU is not
    # offered to new jobs (the scheduler's snapshot counts it unhealthy) whatever its agent reports; a job running on
    # it keeps it, as on a cordoned node. `health` / `health_reason` stay the agent's last report (what an unfence
    # returns to); the API shows a fenced GPU's health as unhealthy with the fence reason.
    fenced = models.BooleanField(default=False, help_text="fenced by an admin: no new work, whatever its agent reports")
    fence_reason = models.CharField(max_length=200, blank=True, help_text="why an admin fenced it")

    class Sharing(models.TextChoices):
        """How the GPU takes work (scheduler/core/sharing.py, DESIGN section 12)."""

        EXCLUSIVE = "exclusive", "exclusive (whole-GPU tasks)"
        SHARED = "shared", "shared (fractions of memory and compute)"
        MIG = "mig", "MIG (its instances)"
        AUTO = "auto", "auto (whole while free of fractions, else shared)"

    sharing = models.CharField(max_length=16, choices=Sharing.choices, default=Sharing.EXCLUSIVE)
    memory_mib = models.PositiveIntegerField(default=0, help_text="GPU memory in MiB (0 = unknown)")

    class Meta:
        ordering = ["node_id", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_node_index")]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"

    @classmethod
    def usable(cls) -> Q:
        """The GPUs the platform offers new work: healthy as their agent reports and not fenced by an admin. The one
        condition of the apply's and the growths' re-checks and the hot-spare restart (~Gpu.usable(): unhealthy as
        the platform acts on it); the snapshot reads both columns and applies the same rule row by row."""
        return Q(health=cls.Health.HEALTHY, fenced=False)

    @property
    def effective_health(self) -> tuple[str, str]:
        """(health, reason) as the platform acts on it: a fenced GPU is unhealthy with its fence reason, else its
        agent's (or registration's) health."""
        if self.fenced:
            return self.Health.UNHEALTHY, self.fence_reason
        return self.health, self.health_reason


class MigInstance(models.Model):
    """One MIG GPU instance (with its compute instance) of a GPU in mode mig, as the agent reports it from
    NVML: `profile` as NVIDIA names it (1g.18gb, 3g.71gb, 7g.141gb on an H200), memory in MiB, compute
    slices (of 7), and the instance's own UUID (what CUDA_VISIBLE_DEVICES takes)."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="mig_instances")
    uuid = models.CharField(max_length=80, unique=True)
    profile = models.CharField(max_length=32)
    memory_mib = models.PositiveIntegerField(default=0)
    slices = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["gpu_id", "uuid"]

    def __str__(self) -> str:
        return f"{self.gpu}/{self.profile}/{self.uuid}"
