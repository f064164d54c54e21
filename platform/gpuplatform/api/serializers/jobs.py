import math

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ... import queries
from ...gpu_request import gpu_request, job_gpus, shared_gpu_memory
from ...job_rules import (GPUS_PER_TASK_RULE, MAX_CPU_MILLI, MAX_GPUS_PER_TASK, MAX_MEMORY_MIB, MAX_MIG_INSTANCES,
                          MAX_RESTARTS, MAX_ROLES, MAX_TASKS_PER_JOB, MAX_TIME_LIMIT_SECONDS)
from ...models import Job, JobRole, Task, Team
from .base import ModelSerializer, Serializer
from .fields import INT32_MAX, FiniteFloatField, QueryIntegerField, count_field, named_field, text_input


@extend_schema_field({"oneOf": [{"type": "integer", "minimum": 1, "maximum": 32767},
                               {"type": "string", "maxLength": 32}], "nullable": True})
class TierField(serializers.Field):
    """A tier: a number (1 = scale-up / NVLink, 2 = leaf, 3 = spine, ...) or a name ("tier-2", "nvlink",
    "leaf", "spine"); names are resolved, and unknown ones refused naming the field, by the services
    (job_rules.resolve_tier)."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, str)):
            raise serializers.ValidationError("a tier is a number or a tier name such as 'tier-1'")
        if isinstance(data, int) and not -32768 <= data <= 32767:
            raise serializers.ValidationError("tier must be between 1 and 32767")
        if isinstance(data, str) and len(data) > 32:
            raise serializers.ValidationError("a tier name is at most 32 characters")
        return data

    def to_representation(self, value):
        return value


@extend_schema_field({"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0, "maximum": 1,
                                                         "exclusiveMinimum": True, "exclusiveMaximum": True}]})
class GpusPerTaskField(serializers.Field):
    """A whole number of GPUs, or a fraction of one GPU from 0.001 to 0.999 (the same as gpu_fraction); the service
    refuses anything else with a message naming gpus_per_task."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            if not text_input(self):  # a JSON body carries its own types: "2" is not a number there
                raise serializers.ValidationError(f"must be a JSON number, not a string ({data[:20]!r})")
            try:
                data = float(data) if "." in data else int(data)
            except ValueError:
                raise serializers.ValidationError(GPUS_PER_TASK_RULE)
        if isinstance(data, bool) or not isinstance(data, (int, float)) or not math.isfinite(data):
            raise serializers.ValidationError(GPUS_PER_TASK_RULE)
        if isinstance(data, float) and data.is_integer():
            data = int(data)
        if isinstance(data, int) and abs(data) > INT32_MAX:  # the service's rule, before a 32-bit column's
            # (new-user trial 12, F6: 1e308 was "must be at most 2147483647")
            raise serializers.ValidationError("gpus_per_task must not be negative" if data < 0 else
                                              f"gpus_per_task must be at most {MAX_GPUS_PER_TASK}")
        return data

    def to_representation(self, value):
        return value


GROUP_SIZE_RULE = f"group_size must be a whole number from 1 to {MAX_TASKS_PER_JOB}"  # job_rules._check_group's


class JobRoleSerializer(ModelSerializer):
    """A task group: `tasks` replicas of `gpus_per_task` GPUs; the gang needs `min_available` of them
    (default: all). `flavor`: allowed GPU models separated by '|' (blank = any); roles may name different
    flavors (a heterogeneous job). Sub-group: every `group_size` tasks inside one domain of tier <=
    `group_highest_tier` (`topology_mode` hard, the default, or soft); `highest_tier` on a role = all its
    tasks in one such domain. Tiers are numbers or names ("tier-1", "nvlink", "leaf", "spine").
    GPU sharing (exactly one kind per role): `gpu_fraction` (or `gpus_per_task` in (0, 1)) or `gpu_memory_mib`
    = one share of one GPU per task; `mig_profile` + `mig_count` = MIG instances per task. Fractions count as
    GPU-equivalents against the flavor's quota, MIG instances as resources "<flavor>/mig-<profile>"."""

    name = serializers.CharField(max_length=64, required=False)
    # a value beyond the column's 32 bits gets the service's rule too (job_rules.check_roles; new-user trial 22, G11)
    tasks = count_field(f"tasks must be at most {MAX_TASKS_PER_JOB}", "tasks must be at least 1", required=False,
                        default=1)
    gpus_per_task = GpusPerTaskField(required=False, default=1)
    gpu_fraction = FiniteFloatField(required=False, allow_null=True, default=None, write_only=True,
                                    help_text="a share of one GPU per task, in (0, 1); read back as gpu_milli")
    gpu_milli = serializers.IntegerField(read_only=True, help_text="share of one GPU per task in thousandths (0 = whole GPUs)")
    gpu_memory_mib = count_field(f"gpu_memory_mib must be a whole number of MiB from 1 to {MAX_MEMORY_MIB}",
                                 required=False, allow_null=True, default=None,
                                 help_text="GPU memory per task in MiB on one shared GPU (instead of gpu_fraction)")
    mig_profile = serializers.CharField(max_length=32, required=False, allow_blank=True, default="",
                                        help_text="MIG profile of the task's instances, e.g. 1g.18gb")
    mig_count = count_field(f"mig_count must be a whole number from 1 to {MAX_MIG_INSTANCES}",
                            required=False, allow_null=True, default=None, write_only=True,
                            help_text="MIG instances per task (default 1); read back as gpus_per_task")
    cpu_milli = count_field(f"cpu_milli must be at most {MAX_CPU_MILLI}", "cpu_milli must not be negative",
                            required=False, default=0)
    memory_mib = count_field(f"memory_mib must be at most {MAX_MEMORY_MIB}", "memory_mib must not be negative",
                             required=False, default=0)
    min_available = count_field(f"min_available must not exceed tasks (at most {MAX_TASKS_PER_JOB})",
                                "min_available must be at least 1", required=False, allow_null=True)
    flavor = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    command = serializers.JSONField(required=False, default=None,
                                    help_text="argv list, or a string split with shlex; default: the job's command")
    env = serializers.JSONField(required=False, default=None, help_text="{NAME: value}, over the job's env")
    working_dir = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    image = serializers.CharField(max_length=300, required=False, allow_blank=True, default="",
                                  help_text="container image (needs a node agent with a container runtime)")
    group_size = count_field(GROUP_SIZE_RULE, required=False, allow_null=True, default=None,
                             help_text="sub-group: tasks per group kept inside one domain of tier <= group_highest_tier")
    group_highest_tier = TierField(required=False, allow_null=True, default=None)
    group_mode = serializers.CharField(read_only=True, help_text="hard | soft")
    # no max_length on topology_mode: the choice rule (job_rules.TOPOLOGY_MODES) names the choices; "strictest"
    # was "no more than 8 characters" (new-user trial 12, F7)
    topology_mode = serializers.CharField(required=False, allow_null=True, default=None, write_only=True,
                                          help_text="the sub-group's mode: hard (default) | soft | none")
    highest_tier = TierField(required=False, allow_null=True, default=None, write_only=True,
                             help_text="shorthand: all the role's tasks inside one domain of this tier")

    class Meta:
        model = JobRole
        fields = ["name", "tasks", "gpus_per_task", "cpu_milli", "memory_mib", "min_available", "flavor",
                  "command", "env", "working_dir", "image", "group_size", "group_highest_tier", "group_mode",
                  "topology_mode", "highest_tier", "gpu_fraction", "gpu_milli", "gpu_memory_mib", "mig_profile",
                  "mig_count"]


class TaskSerializer(ModelSerializer):
    """One task of the job's current attempt as its node agent reported it (pid, start, end, exit code or
    signal); `name` is role-index, the `task` parameter of the logs endpoint takes it or the id."""

    name = serializers.SerializerMethodField()
    role = serializers.CharField(source="role.name", read_only=True)
    node = serializers.CharField(source="node.name", read_only=True, allow_null=True, default=None)

    class Meta:
        model = Task
        fields = ["id", "name", "role", "index", "state", "node", "pid", "started_at", "ended_at", "exit_code",
                  "exit_signal", "end_message"]
        read_only_fields = fields

    def get_name(self, task) -> str:
        return f"{task.role.name}-{task.index}"


class ShownEstimateTime(serializers.DateTimeField):
    """A job's estimate time as every page shows it (scheduling.forecast.shown_estimate: the last cycle's reservation
    over the forecast's, new-user trial 26, F6); read-only."""

    def get_attribute(self, job):
        from ...scheduling.forecast import shown_estimate

        return shown_estimate(job)[self.source]


class JobSerializer(ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    queue = serializers.SlugRelatedField(slug_field="name", read_only=True)
    submitter = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    roles = JobRoleSerializer(many=True, read_only=True)
    gpus = serializers.SerializerMethodField(
        help_text="GPU-equivalents requested: sum over roles of tasks x gpus_per_task for whole GPUs, tasks x "
                  "gpu_fraction for fractions (3 x 0.5 = 1.5), the bound shares of a gpu_memory_mib role (0 while "
                  "pending: its share depends on the GPU), MIG instances for a MIG role")
    gpu_request = serializers.SerializerMethodField(
        help_text="what the job asks for per role, joined with '+': '4' (whole GPUs), '3x0.5' (fractions of one "
                  "GPU), '2x20000MiB' (GPU memory on one shared GPU), '2x1g.18gb' (MIG instances)")
    nodes = serializers.SerializerMethodField(help_text="nodes the job's tasks run on")
    position = serializers.IntegerField(read_only=True, allow_null=True,
                                        help_text="1-based place among its queue's pending jobs in the order the "
                                                  "last scheduling cycle considered them; null unless pending, and "
                                                  "until the first cycle after submission")
    estimated_start = ShownEstimateTime(
        read_only=True, allow_null=True,
        help_text="pending jobs: the last scheduling cycle's reservation start when it holds GPUs for the job (the "
                  "time its pending_reason names), else when the forecast (the scheduling engine run forward from the "
                  "live cluster, docs/forecast.md) starts it with median run times; null = no estimate (see "
                  "estimate_note)")
    estimated_start_p90 = ShownEstimateTime(
        read_only=True, allow_null=True,
        help_text="the same when every job runs to its estimator's 90th percentile (a pessimistic start; a "
                  "reservation's start is already the latest); null when that is past the horizon")
    estimate_note = serializers.SerializerMethodField(
        help_text="which run-time estimator the job's own estimate came from, or, with no estimate, why (horizon "
                  "passed, can never start, ...); a pending job the forecast has not seen yet (just submitted or "
                  "requeued): \"estimate pending: the next forecast, within 60 s, gives one\"; a job the last "
                  "scheduling cycle holds GPUs for: \"reserved by the last scheduling cycle: ...\"")
    estimated_at = ShownEstimateTime(read_only=True, allow_null=True,
                                     help_text="cluster time of the snapshot the forecast ran from")
    reserved = serializers.JSONField(read_only=True, allow_null=True,
                                     help_text="GPUs held for this pending job until it starts: [[role, index, node, "
                                               "[gpu indices]], ...] (an eviction's beneficiary, or a starving job's "
                                               "drain reservation); null when none")
    not_before = serializers.DateTimeField(read_only=True, allow_null=True,
                                           help_text="requeue backoff after a failure: not scheduled before this time")
    preempt_deadline = serializers.DateTimeField(read_only=True, allow_null=True,
                                                 help_text="when a preempting job's GPUs are released (grace period)")
    stop = serializers.SerializerMethodField(help_text="while preempting: {target: requeue | restart | cancelled | "
                                                       "failed | succeeded, reason, deadline}; null otherwise")
    tasks = TaskSerializer(many=True, read_only=True)
    attempts = serializers.SerializerMethodField(
        help_text="every ended attempt: [{number, started_at, ended_at, outcome, failed, nodes, gpus, exit_code, "
                  "signal, failed_task, diagnosis, fault_at, recovered_at, recovery_seconds}] (docs/diagnosis.md); "
                  "diagnosis = {category, summary, evidence: [{task, source, line, offset, text}], action, rule, "
                  "node, task} or null; category one of cuda_oom, nccl_timeout, nccl_network, gpu_hardware, "
                  "cuda_error, nan_loss, host_oom, user_error, storage, platform (a platform fault or eviction), "
                  "cancelled (a cancel on request), unknown")
    attempt = serializers.IntegerField(source="attempts", read_only=True,
                                       help_text="the current attempt's number (0-based; the agents' `attempt`)")
    diagnosis = serializers.SerializerMethodField(help_text="the diagnosis of the last failed attempt, or null")
    pending_reason = serializers.SerializerMethodField(
        help_text="why it waits (pending) or was stopped; while no scheduling cycle runs (the scheduler is down) "
                  "a pending job's reason says so first")
    pending_reason_code = serializers.CharField(
        read_only=True, help_text="the scheduling cycle's code for pending_reason, stable for programs (docs/api.md, "
                                  "\"Why a job waits\": insufficient_gpus, never_fits_queue_limit, ...; a final one "
                                  "comes with never_fits true); \"\" before a cycle saw the job and when the reason "
                                  "is not a cycle's (a requeue's)")

    class Meta:
        model = Job
        fields = ["id", "name", "external_id", "team", "queue", "submitter", "state", "priority", "preemptible",
                  "interruptible", "topology_mode", "highest_tier", "preferred_tier", "numa", "time_limit_seconds",
                  "migratable", "min_run_before_move_seconds", "checkpoint_grace_seconds", "attempt", "attempts", "gpus",
                  "gpu_request", "roles", "pending_reason", "pending_reason_code", "never_fits", "position",
                  "estimated_start", "estimated_start_p90", "estimate_note", "estimated_at", "reserved", "not_before",
                  "preempt_deadline", "placement_domain", "placement_tier", "nodes", "submitted_at", "started_at",
                  "finished_at", "simulated", "max_restarts", "restarts", "completion_role", "stop", "end_reason",
                  "failed_task", "exit_code", "exit_signal", "tasks", "diagnosis", "excluded_nodes", "slurm_job_id"]
        read_only_fields = fields

    def _attempt_rows(self, job) -> list:
        return sorted(job.attempt_records.all(), key=lambda a: a.number)

    def get_attempts(self, job) -> list[dict]:
        return [{"number": a.number, "started_at": a.started_at, "ended_at": a.ended_at, "outcome": a.outcome,
                 "failed": a.failed, "nodes": a.nodes, "gpus": a.gpus, "exit_code": a.exit_code, "signal": a.signal,
                 "failed_task": a.failed_task, "diagnosis": a.diagnosis, "fault_at": a.fault_at,
                 "recovered_at": a.recovered_at, "recovery_seconds": a.recovery_seconds}
                for a in self._attempt_rows(job)]

    def get_pending_reason(self, job) -> str:
        if job.state != Job.State.PENDING:
            return job.pending_reason
        if "cycle_stall" not in self.context:  # once per response: a list's items share the context
            from gpuplatform.scheduling.liveness import cycle_stall

            self.context["cycle_stall"] = cycle_stall()
        stall = self.context["cycle_stall"]
        return f"{stall}; {job.pending_reason}" if stall else job.pending_reason

    def get_estimate_note(self, job) -> str:
        from gpuplatform.scheduling.forecast import shown_estimate

        return shown_estimate(job)["estimate_note"]

    def get_diagnosis(self, job) -> dict | None:
        failed = [a for a in self._attempt_rows(job) if a.failed and a.diagnosis]
        return failed[-1].diagnosis if failed else None

    def get_stop(self, job) -> dict | None:
        if job.state != Job.State.PREEMPTING:
            return None
        return {"target": job.stop_target or "requeue", "reason": job.stop_reason,
                "deadline": job.preempt_deadline.isoformat() if job.preempt_deadline else None}

    def get_gpus(self, job) -> float:
        return job_gpus(job, gpu_memory=self._shared_gpu_memory)

    def _shared_gpu_memory(self) -> int:
        """gpu_request.shared_gpu_memory, read once per response (a list shares its serializer's context)."""
        if "shared_gpu_memory" not in self.context:
            self.context["shared_gpu_memory"] = shared_gpu_memory()
        return self.context["shared_gpu_memory"]

    def get_gpu_request(self, job) -> str:
        return gpu_request(job.roles.all())

    def get_nodes(self, job) -> list[str]:
        return queries.node_names(job)


class SubgroupSerializer(Serializer):
    """A sub-group constraint given at job level: the named role's tasks in groups of `group_size`, each
    inside one domain of tier <= `group_highest_tier` (number or name)."""

    role = serializers.CharField(max_length=64)
    group_size = count_field(GROUP_SIZE_RULE)
    group_highest_tier = TierField()
    topology_mode = serializers.CharField(required=False, help_text="hard (default) | soft")


class JobSubmitSerializer(Serializer):
    name = serializers.CharField(max_length=200, help_text="only ASCII letters, digits, '.', '_' and '-', starting "
                                                           "with a letter or digit (the form's rule)")
    external_id = serializers.CharField(max_length=100, required=False, allow_blank=True, default="",
                                        help_text="your own id for this job (a CI run, a trace id); stored and "
                                                  "returned, filter with ?external_id=")
    queue = serializers.CharField(max_length=100, help_text="leaf queue name")
    team = named_field("team", "slug", Team.objects.all(), required=False, allow_null=True, default=None,
                       help_text="team slug; default: the queue's team, or your only team")
    priority = serializers.IntegerField(default=0, min_value=-INT32_MAX, max_value=INT32_MAX)
    preemptible = serializers.BooleanField(default=True)
    interruptible = serializers.BooleanField(default=False, help_text="the job may be stopped at once, without a "
                                                                      "grace period: it may also run on hot spares "
                                                                      "(must be preemptible)")
    topology_mode = serializers.CharField(default="none", help_text="none | soft | hard")
    highest_tier = TierField(required=False, allow_null=True, default=None,
                             help_text="tier number or name (tier-1, nvlink, leaf, spine)")
    preferred_tier = TierField(required=False, allow_null=True, default=None)
    numa = serializers.ChoiceField(choices=["prefer", "single"], default="prefer",
                                   help_text="prefer: each task's GPUs inside one NUMA node when one fits; single: "
                                             "always, or the job waits")
    time_limit_seconds = count_field(f"time_limit_seconds must be a whole number of seconds from 1 to "
                                     f"{MAX_TIME_LIMIT_SECONDS} (366 days)", required=False, allow_null=True,
                                     default=None)
    migratable = serializers.BooleanField(default=False, help_text="the job checkpoints on SIGTERM and resumes when "
                                                                   "restarted: the scheduler may move it to defragment")
    min_run_before_move_seconds = serializers.IntegerField(default=0, min_value=0, max_value=7 * 86400,
                                                           help_text="seconds it runs before it may be moved")
    checkpoint_grace_seconds = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=1,
                                                        max_value=86400, help_text="seconds to write its checkpoint "
                                                                                   "when moved (null: the queue's grace)")
    command = serializers.JSONField(required=False, default=None,
                                    help_text="what every task runs: argv list, or a string split with shlex "
                                              "(required unless every role has its own)")
    env = serializers.JSONField(required=False, default=None, help_text="{NAME: value} for every task")
    working_dir = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    image = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")
    max_restarts = count_field(f"max_restarts must be a whole number from 0 to {MAX_RESTARTS}",
                               required=False, default=0, help_text="restarts of the whole gang after a task fails")
    completion_role = serializers.CharField(max_length=64, required=False, allow_blank=True, default="",
                                            help_text="the role whose tasks all exiting 0 ends the job succeeded "
                                                      "(blank: every role)")
    roles = JobRoleSerializer(many=True, max_length=MAX_ROLES)
    subgroups = SubgroupSerializer(many=True, required=False, default=None, allow_null=True, max_length=64)


class LogQuerySerializer(Serializer):
    task = serializers.CharField(max_length=80, required=False, default="",
                                 help_text="task id, role-index (e.g. worker-0, the tasks' `name`) or role[index] "
                                           "(worker[0], as failed_task names it); default: the job's first task")
    # numbers in ASCII digits (QueryIntegerField); a parameter sent empty is refused before the view (docs/api.md)
    attempt = QueryIntegerField(min_value=0, max_value=INT32_MAX, required=False, allow_null=True, default=None)
    offset = QueryIntegerField(min_value=0, max_value=2**62, required=False, default=0)
    limit = QueryIntegerField(min_value=1, max_value=65536, required=False, default=65536)


class JobUpdateSerializer(Serializer):
    priority = serializers.IntegerField(min_value=-INT32_MAX, max_value=INT32_MAX)


class JobCancelSerializer(Serializer):
    reason = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)
