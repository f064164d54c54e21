from rest_framework import serializers

from ... import queries
from ...models import Job, JobRole, Task, Team
from .fields import INT32_MAX, count_field


class JobRoleSerializer(serializers.ModelSerializer):
    """A task group: `tasks` replicas of `gpus_per_task` GPUs; the gang needs `min_available` of them
    (default: all). `flavor`: allowed GPU models separated by '|' (blank = any)."""

    name = serializers.CharField(max_length=64, required=False)
    tasks = count_field(required=False, default=1)
    gpus_per_task = count_field(required=False, default=1)
    cpu_milli = count_field(required=False, default=0)
    memory_mib = count_field(required=False, default=0)
    min_available = count_field(required=False, allow_null=True)
    flavor = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    command = serializers.JSONField(required=False, default=None,
                                    help_text="argv list, or a string split with shlex; default: the job's command")
    env = serializers.JSONField(required=False, default=None, help_text="{NAME: value}, over the job's env")
    working_dir = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    image = serializers.CharField(max_length=300, required=False, allow_blank=True, default="",
                                  help_text="container image (needs a node agent with a container runtime)")

    class Meta:
        model = JobRole
        fields = ["name", "tasks", "gpus_per_task", "cpu_milli", "memory_mib", "min_available", "flavor",
                  "command", "env", "working_dir", "image"]


class TaskSerializer(serializers.ModelSerializer):
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


class JobSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    queue = serializers.SlugRelatedField(slug_field="name", read_only=True)
    submitter = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    roles = JobRoleSerializer(many=True, read_only=True)
    gpus = serializers.SerializerMethodField(help_text="GPUs requested (sum over roles of tasks x gpus_per_task)")
    nodes = serializers.SerializerMethodField(help_text="nodes the job's tasks run on")
    position = serializers.IntegerField(read_only=True, allow_null=True,
                                        help_text="1-based place among its queue's pending jobs in the order the "
                                                  "last scheduling cycle considered them; null unless pending, and "
                                                  "until the first cycle after submission")
    estimated_start = serializers.DateTimeField(read_only=True, allow_null=True,
                                                help_text="from the latest cycle's backfill reservation; null if "
                                                          "unknown")
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

    class Meta:
        model = Job
        fields = ["id", "name", "team", "queue", "submitter", "state", "priority", "preemptible", "topology_mode",
                  "highest_tier", "preferred_tier", "time_limit_seconds", "migratable", "min_run_before_move_seconds",
                  "checkpoint_grace_seconds", "attempts", "gpus", "roles",
                  "pending_reason", "never_fits", "position", "estimated_start", "reserved", "not_before",
                  "preempt_deadline", "placement_domain", "placement_tier", "nodes", "submitted_at", "started_at",
                  "finished_at", "simulated", "max_restarts", "restarts", "completion_role", "stop", "end_reason",
                  "failed_task", "exit_code", "exit_signal", "tasks"]
        read_only_fields = fields

    def get_stop(self, job) -> dict | None:
        if job.state != Job.State.PREEMPTING:
            return None
        return {"target": job.stop_target or "requeue", "reason": job.stop_reason,
                "deadline": job.preempt_deadline.isoformat() if job.preempt_deadline else None}

    def get_gpus(self, job) -> int:
        return sum(r.tasks * r.gpus_per_task for r in job.roles.all())

    def get_nodes(self, job) -> list[str]:
        return queries.node_names(job)


class JobSubmitSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    queue = serializers.CharField(max_length=100, help_text="leaf queue name")
    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all(), required=False,
                                        allow_null=True, default=None,
                                        help_text="team slug; default: the queue's team, or your only team")
    priority = serializers.IntegerField(default=0, min_value=-INT32_MAX, max_value=INT32_MAX)
    preemptible = serializers.BooleanField(default=True)
    topology_mode = serializers.CharField(default="none", max_length=8, help_text="none | soft | hard")
    highest_tier = count_field(required=False, allow_null=True, default=None, min_value=-32768, max_value=32767)
    preferred_tier = count_field(required=False, allow_null=True, default=None, min_value=-32768, max_value=32767)
    time_limit_seconds = count_field(required=False, allow_null=True, default=None)
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
    max_restarts = count_field(required=False, default=0, help_text="restarts of the whole gang after a task fails")
    completion_role = serializers.CharField(max_length=64, required=False, allow_blank=True, default="",
                                            help_text="the role whose tasks all exiting 0 ends the job succeeded "
                                                      "(blank: every role)")
    roles = JobRoleSerializer(many=True, max_length=64)


class LogQuerySerializer(serializers.Serializer):
    task = serializers.CharField(max_length=80, required=False, default="",
                                 help_text="task id or role-index (e.g. worker-0); default: the job's first task")
    attempt = count_field(min_value=0, required=False, allow_null=True, default=None)
    offset = serializers.IntegerField(min_value=0, max_value=2**62, required=False, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=65536, required=False, default=65536)


class JobUpdateSerializer(serializers.Serializer):
    priority = serializers.IntegerField(min_value=-INT32_MAX, max_value=INT32_MAX)


class JobCancelSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)
