from django.conf import settings
from django.db import models
from django.db.models import F, Q

__all__ = ["Job", "JobRole", "Task", "Allocation", "TaskLog"]


class Job(models.Model):
    """A gang of one or more roles. The gang is satisfied when every role reaches its own min_available.

    `submitted_at` is the original submission time and survives requeues (ordering stays fair);
    `duration_seconds` is how long the workload runs once started, known only for replayed trace jobs
    (the demo's simulated workload); `time_limit_seconds` is the user's bound, used by backfill.

    Scheduling state written by the cycle (gpuplatform/scheduling/store.py and evict.py):
    `reserved` = GPUs held for this pending job (the beneficiary of evictions) as [[role, index, node,
    [gpu indices]], ...], null = nothing held; `preempt_deadline` = when a preempting job's GPUs are
    released (grace period for a checkpoint); `not_before` = requeue backoff; `reservation_start` = the
    backfill reservation's estimate (the cycle's); `bound_at` = when the gang was bound (the gang-start timeout runs
    from it); `started_at` = when every task reported running; `pending_reason` (words) with
    `pending_reason_code` (the engine's code for them), `pending_position` and `queue_position` = why a pending job
    waits and where it stands in the engine's order (the API and the pages read them, never recompute the order
    or the rule).

    Written by the forecast (gpuplatform/scheduling/forecast.py, scheduler.forecast): `estimated_start` and
    `estimated_start_p90` (every job running to its estimator's 90th percentile), `estimate_note` = the
    run-time estimator used or, when both are null, why there is no estimate; `estimated_at` = the cluster
    time of the snapshot the forecast started from.
    """

    class State(models.TextChoices):
        PENDING = "pending", "pending"
        ADMITTED = "admitted", "admitted"
        RUNNING = "running", "running"
        PREEMPTING = "preempting", "preempting"
        SUCCEEDED = "succeeded", "succeeded"
        FAILED = "failed", "failed"
        CANCELLED = "cancelled", "cancelled"

    class TopologyMode(models.TextChoices):
        NONE = "none", "none"
        SOFT = "soft", "soft (prefer)"
        HARD = "hard", "hard (require)"

    class NumaPolicy(models.TextChoices):
        PREFER = "prefer", "prefer (one NUMA node per task when one fits)"
        SINGLE = "single", "single (one NUMA node per task, or wait)"

    # The job state sets, defined once: live = bound to GPUs (admitted, running, or preempting in a stop's
    # grace period); active = live and not stopping (what eviction, a stop and the time limit act on).
    LIVE_STATES = (State.ADMITTED, State.RUNNING, State.PREEMPTING)
    ACTIVE_STATES = (State.ADMITTED, State.RUNNING)
    FINAL_STATES = (State.SUCCEEDED, State.FAILED, State.CANCELLED)
    # What a preempting job (a stop in its grace period) is shown as when it will end rather than wait in its
    # queue again, by its stop_target: gpuctl's STATE column says "cancelling" / "stopping (failed)", and the
    # jobs API's and the jobs page's `state` filter take these words (new-user trial 14, F12). `preempting`
    # still lists every preempting job. "recover": a gang broken by a fault, its survivors stopping before it is
    # requeued (execution.stops.stop_for_fault).
    STOPPING_WORDS = {"cancelling": ("cancelled",), "stopping": ("failed", "succeeded", "restart", "recover")}

    # no index of its own: the (team, state) index below leads with it (issue 16: one index entry less per job
    # row written, and the cycle rewrites 10,000 job rows when it starts them)
    team = models.ForeignKey("gpuplatform.Team", on_delete=models.PROTECT, related_name="jobs", db_index=False)
    queue = models.ForeignKey("gpuplatform.Queue", on_delete=models.PROTECT, related_name="jobs")
    # indexed only where set (the partial index below, migration 0025_e2eschema): null on every job a trace replay or
    # a benchmark submits, and the cycle rewrites every started job's row (one index entry less per start there).
    # PROTECT (migration 0034_user_history_protect, session 27): an account that submitted a job is deactivated, not
    # deleted (SET_NULL emptied it, and the job, its Events and ?submitter= lost who submitted it)
    submitter = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                  db_index=False)
    name = models.CharField(max_length=200)
    external_id = models.CharField(max_length=100, blank=True, help_text="id in an imported trace")
    priority = models.IntegerField(default=0)
    preemptible = models.BooleanField(default=True)
    # may be stopped at once, without a grace period (implies preemptible): it may run on hot spares, and is
    # stopped there and requeued whole when a failed gang restarts on the spare (docs/diagnosis.md, "Spare nodes")
    interruptible = models.BooleanField(default=False, help_text="may be stopped at once (no grace): runs on hot "
                                                                 "spares too")
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    topology_mode = models.CharField(max_length=8, choices=TopologyMode.choices, default=TopologyMode.NONE)
    highest_tier = models.PositiveSmallIntegerField(null=True, blank=True)
    preferred_tier = models.PositiveSmallIntegerField(null=True, blank=True)
    numa = models.CharField(max_length=8, choices=NumaPolicy.choices, default=NumaPolicy.PREFER,
                            help_text="prefer: each task's GPUs inside one NUMA node when one fits; single: always "
                                      "(kubelet's single-numa-node policy)")
    time_limit_seconds = models.PositiveIntegerField(null=True, blank=True)
    # rescheduling (scheduler/core/actions/reschedule.py, docs/rescheduling.md): the job checkpoints on SIGTERM
    # and resumes when restarted, so the scheduler may move it after it ran `min_run_before_move_seconds`,
    # giving it `checkpoint_grace_seconds` (null = its queue's grace period) to write its checkpoint
    migratable = models.BooleanField(default=False)
    min_run_before_move_seconds = models.PositiveIntegerField(default=0)
    checkpoint_grace_seconds = models.PositiveIntegerField(null=True, blank=True)
    duration_seconds = models.FloatField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    reserved = models.JSONField(null=True, blank=True, default=None)
    preempt_deadline = models.DateTimeField(null=True, blank=True)
    evicted_for = models.BigIntegerField(
        null=True, blank=True, help_text="while preempting for an eviction (preempt / reclaim): the id of the job the "
                                         "GPUs go to; the eviction is withdrawn if that job leaves first")
    not_before = models.DateTimeField(null=True, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)
    estimated_start_p90 = models.DateTimeField(null=True, blank=True)
    estimate_note = models.CharField(max_length=300, blank=True)
    estimated_at = models.DateTimeField(null=True, blank=True)
    reservation_start = models.DateTimeField(null=True, blank=True)
    bound_at = models.DateTimeField(null=True, blank=True)
    pending_reason = models.CharField(max_length=500, blank=True)
    pending_reason_code = models.CharField(
        max_length=40, blank=True, help_text="the code of the scheduling cycle's reason for pending_reason (its "
                                             "PendingReason.code, scheduler.core.snapshot.PENDING_CODES); blank "
                                             "before a cycle saw the job and whenever pending_reason is not a cycle's")
    pending_position = models.PositiveIntegerField(
        null=True, blank=True, help_text="1-based place among all pending jobs in the order the last scheduling "
                                         "cycle considered them; null unless pending (and until a cycle ran)")
    queue_position = models.PositiveIntegerField(
        null=True, blank=True, help_text="1-based place among its queue's pending jobs in that order")
    never_fits = models.BooleanField(default=False)
    placement_domain = models.CharField(max_length=200, blank=True)
    placement_tier = models.PositiveSmallIntegerField(null=True, blank=True)
    # Execution (docs/execution.md). simulated: no command, runs on the simulated clock for duration_seconds.
    simulated = models.BooleanField(default=False)
    warm_start = models.BooleanField(
        default=False, help_text="a replayed trace job the trace already had running when the replay began: it keeps "
                                 "its trace submit time but starts at the replay start, so wait figures leave it out")
    max_restarts = models.PositiveIntegerField(default=0)
    restarts = models.PositiveIntegerField(default=0, help_text="restarts used after task failures")
    completion_role = models.CharField(max_length=64, blank=True, help_text="blank = every role must succeed")
    stop_target = models.CharField(max_length=16, blank=True,
                                   help_text="while preempting: what the job ends as (requeue, restart, cancelled, "
                                             "failed, succeeded); blank = requeue")
    stop_reason = models.CharField(max_length=300, blank=True)
    end_reason = models.CharField(max_length=300, blank=True, help_text="why the job ended (or was last restarted)")
    failed_task = models.CharField(max_length=100, blank=True, help_text="role[index] of the first failing task")
    exit_code = models.SmallIntegerField(null=True, blank=True)
    exit_signal = models.SmallIntegerField(null=True, blank=True)
    excluded_nodes = models.JSONField(default=list, blank=True,
                                      help_text="node names later attempts avoid (an exclude_node diagnosis) unless "
                                                "nothing else fits")
    # Slurm backend (gpuplatform/slurm, docs/slurm.md): the Slurm job running this attempt ("" = none) and the
    # backend's record of it: {"attempt", "submitted_at", "term_at", "kill_at", "gpus": {node: [indices]}, ...}
    slurm_job_id = models.CharField(max_length=32, blank=True, help_text="Slurm job id of the current attempt")
    slurm = models.JSONField(default=dict, blank=True)
    submitted_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [models.Index(fields=["state", "queue"]), models.Index(fields=["team", "state"]),
                   models.Index(fields=["submitter"], condition=Q(submitter__isnull=False), name="job_submitter_set")]
        constraints = [
            models.CheckConstraint(condition=Q(duration_seconds__isnull=True) | Q(duration_seconds__gte=0),
                                   name="job_duration_non_negative"),
            models.CheckConstraint(
                condition=Q(highest_tier__isnull=True) | Q(preferred_tier__isnull=True) | Q(preferred_tier__lte=F("highest_tier")),
                name="job_preferred_tier_le_highest_tier"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def gpus_requested(self) -> int:
        return sum(r.tasks * r.gpus_per_task for r in self.roles.all())


class JobRole(models.Model):
    """A task group of a job (Volcano task / Kueue pod set). Units: GPUs, millicores, MiB."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="roles")
    name = models.CharField(max_length=64, default="worker")
    tasks = models.PositiveIntegerField()
    gpus_per_task = models.PositiveIntegerField(default=1)
    cpu_milli = models.PositiveIntegerField(default=0)
    memory_mib = models.PositiveIntegerField(default=0)
    min_available = models.PositiveIntegerField()
    flavor = models.CharField(max_length=200, blank=True, help_text="allowed GPU models separated by '|'; blank = any")
    group_size = models.PositiveIntegerField(null=True, blank=True,
                                             help_text="sub-group: tasks per group kept inside one domain of tier <= "
                                                       "group_highest_tier (e.g. a tensor-parallel group); null = none")
    group_highest_tier = models.PositiveSmallIntegerField(null=True, blank=True)
    group_mode = models.CharField(max_length=8, default="hard", help_text="hard: a group never spans its tier; "
                                                                            "soft: prefer, may spread")
    command = models.JSONField(default=list, blank=True, help_text="argv; empty = simulated (trace jobs)")
    env = models.JSONField(default=dict, blank=True, help_text="name -> value")
    working_dir = models.CharField(max_length=500, blank=True)
    image = models.CharField(max_length=300, blank=True, help_text="container image; blank = a plain process")
    # GPU sharing (DESIGN section 12): at most one set; gpus_per_task is 1 for a fraction, the instance count for MIG
    gpu_milli = models.PositiveSmallIntegerField(default=0, help_text="share of one GPU per task in thousandths (1..999; 0 = whole GPUs)")
    gpu_memory_mib = models.PositiveIntegerField(default=0, help_text="GPU memory per task in MiB on one shared GPU (0 = none)")
    mig_profile = models.CharField(max_length=32, blank=True, help_text="MIG profile per instance, e.g. 1g.18gb (blank = none)")

    class Meta:
        ordering = ["job_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["job", "name"], name="jobrole_unique_name"),
            models.CheckConstraint(condition=Q(tasks__gte=1), name="jobrole_tasks_ge_1"),
            models.CheckConstraint(condition=Q(min_available__gte=1) & Q(min_available__lte=F("tasks")),
                                   name="jobrole_min_available_le_tasks"),
            models.CheckConstraint(condition=Q(gpus_per_task__gt=0) | Q(cpu_milli__gt=0),
                                   name="jobrole_requests_something"),
            models.CheckConstraint(condition=Q(group_size__isnull=True) | (Q(group_size__gte=1)
                                                                            & Q(group_highest_tier__isnull=False)),
                                   name="jobrole_group_has_tier"),
            models.CheckConstraint(condition=Q(gpu_milli__lte=999), name="jobrole_gpu_milli_below_one"),
            models.CheckConstraint(condition=(Q(gpu_milli=0) | (Q(gpu_memory_mib=0) & Q(mig_profile="")))
                                   & (Q(gpu_memory_mib=0) | Q(mig_profile="")),
                                   name="jobrole_one_sharing_kind"),
        ]

    def __str__(self) -> str:
        return f"{self.job}/{self.name}"

    @property
    def flavors(self) -> tuple[str, ...]:
        return tuple(f for f in self.flavor.split("|") if f)


class Task(models.Model):
    """One replica of a role. bound = placed, not yet reported running by its node; releasing = a surplus
    task evicted gracefully (keeps its GPUs until `release_deadline`) while the job keeps running."""

    class State(models.TextChoices):
        PENDING = "pending", "pending"
        BOUND = "bound", "bound"
        RUNNING = "running", "running"
        RELEASING = "releasing", "releasing"
        SUCCEEDED = "succeeded", "succeeded"
        FAILED = "failed", "failed"
        RELEASED = "released", "released"

    # The task state sets, defined once: held = a live task of the gang on its node (its GPUs are its
    # own); on_node = also a surplus task being released (it keeps its GPUs until its deadline);
    # open = not ended yet.
    HELD_STATES = (State.BOUND, State.RUNNING)
    ON_NODE_STATES = (State.BOUND, State.RUNNING, State.RELEASING)
    OPEN_STATES = (State.PENDING, State.BOUND, State.RUNNING, State.RELEASING)

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="tasks")
    # no index of its own: the unique (role, index) constraint's index leads with it
    role = models.ForeignKey(JobRole, on_delete=models.CASCADE, related_name="task_set", db_index=False)
    index = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    # no foreign-key constraint (migration 0024_e2e10): the writers of a task's node check it in bulk
    # (gpuplatform.allocations.check_nodes, FOR KEY SHARE), and a deferred constraint trigger on the node table
    # refuses a node's delete while a task names it (Django's SET_NULL clears the node's tasks first)
    node = models.ForeignKey("gpuplatform.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="tasks",
                             db_constraint=False)
    release_deadline = models.DateTimeField(null=True, blank=True)
    release_for = models.BigIntegerField(
        null=True, blank=True, help_text="while releasing for an eviction: the id of the job its GPUs go to")
    # What the node agent reported for the job's current attempt (reset when the gang is requeued).
    pid = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.SmallIntegerField(null=True, blank=True)
    exit_signal = models.SmallIntegerField(null=True, blank=True)
    end_message = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["job_id", "role_id", "index"]
        constraints = [models.UniqueConstraint(fields=["role", "index"], name="task_unique_role_index")]


class Allocation(models.Model):
    """One GPU bound to one task, whole, as a fraction (gpu_milli > 0) or one of its MIG instances. The partial
    unique indexes make the database refuse a double binding of a whole GPU or of an instance; fractions on one
    GPU are checked by the engine (never over 1000 thousandths) under the cycle's single-flight lock.

    task and job have no foreign-key constraint in the database (migration 0023_e2e9, issue 16), nor gpu (0024_e2e10):
    the one writer, gpuplatform.allocations.write_allocations, checks them in bulk with the same lock (its docstring);
    job is always the task's job, so it is implied by the task's own foreign key; a GPU named by an allocation cannot
    be deleted (a deferred constraint trigger, PostgreSQL). Nor mig_instance (0033_deferred_fk: PostgreSQL queued its
    deferred check for every row inserted, null or not, and ran them at the commit): write_allocations checks the
    instances named, and the instance table has the same trigger. on_delete still applies (Django's)."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="allocations", db_constraint=False)
    # no foreign-key constraint either (migration 0024_e2e10): write_allocations checks the GPUs in bulk (FOR KEY
    # SHARE), and a deferred constraint trigger on the GPU table refuses a GPU's delete while an allocation names it
    gpu = models.ForeignKey("gpuplatform.Gpu", on_delete=models.PROTECT, related_name="allocations", db_constraint=False)
    # always the task's job (written with it by the cycle); no index of its own: (job, released_at) leads with it
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="allocations", db_index=False,
                            db_constraint=False)
    created_at = models.DateTimeField()
    released_at = models.DateTimeField(null=True, blank=True)
    # a fraction of the GPU (thousandths, memory MiB; 0 = the whole GPU) or one MIG instance of it
    gpu_milli = models.PositiveSmallIntegerField(default=0)
    gpu_memory_mib = models.PositiveIntegerField(default=0)
    # indexed only where set (the partial index below): null on every whole-GPU and fractional allocation. A MIG
    # instance the GPU no longer has (re-partitioned) is dropped at registration once no live allocation holds it
    # (services/nodes._sync_mig); a released allocation then keeps its GPU and times, without the instance
    mig_instance = models.ForeignKey("gpuplatform.MigInstance", null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="allocations", db_index=False, db_constraint=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["gpu"], condition=Q(released_at__isnull=True, gpu_milli=0,
                                                                  mig_instance__isnull=True),
                                    name="allocation_one_live_per_gpu"),
            # (mig_instance IS NOT NULL: the same rule, null never conflicts, without an entry per non-MIG row)
            models.UniqueConstraint(fields=["mig_instance"], condition=Q(released_at__isnull=True,
                                                                         mig_instance__isnull=False),
                                    name="allocation_one_live_per_mig_instance"),
        ]
        indexes = [models.Index(fields=["job", "released_at"]),
                   models.Index(fields=["mig_instance"], condition=Q(mig_instance__isnull=False),
                                name="allocation_mig_instance_set")]


class TaskLog(models.Model):
    """One chunk of a task attempt's combined stdout/stderr as the node agent sent it. `offset` is the byte
    offset in the attempt's output where `data` starts, `size` its length in bytes (UTF-8). At most
    TASK_LOG_MAX_BYTES are kept per (task, attempt): the oldest chunks go first."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="logs")
    attempt = models.PositiveIntegerField()
    offset = models.BigIntegerField()
    size = models.PositiveIntegerField()
    data = models.TextField()
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["task_id", "attempt", "offset"]
        constraints = [models.UniqueConstraint(fields=["task", "attempt", "offset"], name="tasklog_unique_chunk")]
