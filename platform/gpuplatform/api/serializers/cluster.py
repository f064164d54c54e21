import math
from datetime import timezone as dt_timezone

from django.core.validators import ProhibitNullCharactersValidator
from rest_framework import serializers

from scheduler.core.domain_tree import node_domain

from ...execution.reports import LOST_CAUSES
from ...models import Domain, Gpu, Node
from ...services.nodes import MAX_GPU_INDEX
from .base import ModelSerializer, Serializer
from .fields import count_field

MAX_EPOCH_SECONDS = 253402300799  # 9999-12-31T23:59:59Z, the last second a date-time holds


class EpochSecondsField(serializers.FloatField):
    """A number of epoch seconds: finite, 0 to MAX_EPOCH_SECONDS; never true / false (DRF takes them as 1.0 / 0.0), and
    never NaN or infinity (a string "nan" passes DRF's FloatField and its range checks)."""

    def to_internal_value(self, data):
        if isinstance(data, bool):
            self.fail("invalid")
        value = super().to_internal_value(data)
        if not math.isfinite(value) or not 0 <= value <= MAX_EPOCH_SECONDS:
            raise serializers.ValidationError(f"out of range: epoch seconds from 0 to {MAX_EPOCH_SECONDS}",
                                              code="out_of_range")
        return value


class DomainSerializer(ModelSerializer):
    parent = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    node_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Domain
        fields = ["id", "name", "tier", "parent", "node_count"]
        read_only_fields = fields


class DomainTreeSerializer(Serializer):
    name = serializers.CharField()
    tier = serializers.IntegerField()
    nodes = serializers.ListField(child=serializers.CharField())
    children = serializers.ListField(child=serializers.DictField(), help_text="the same shape, recursively")


class GpuSerializer(ModelSerializer):
    """A GPU. `health` / `health_reason` are as the platform acts on them: a GPU an admin fenced (`fenced`) is
    unhealthy with the fence reason whatever its agent reports (Gpu.effective_health)."""

    health = serializers.SerializerMethodField(help_text="healthy | unhealthy (a fenced GPU: unhealthy)")
    health_reason = serializers.SerializerMethodField(help_text="why it is unhealthy (a fenced GPU: the fence reason)")

    class Meta:
        model = Gpu
        fields = ["index", "uuid", "numa_node", "health", "health_reason", "fenced", "out_of_service", "sharing",
                  "memory_mib"]
        read_only_fields = fields

    def get_health(self, gpu) -> str:
        return gpu.effective_health[0]

    def get_health_reason(self, gpu) -> str:
        return gpu.effective_health[1]


class NodeSerializer(ModelSerializer):
    domain = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    gpus = GpuSerializer(many=True, read_only=True)
    allocated_gpus = serializers.SerializerMethodField(
        help_text="GPU-equivalents held by the node's live allocations: 1 per whole GPU (and per MIG instance), "
                  "the share per fraction or GPU-memory share (4 tasks x 0.5 on one GPU = 2, 2 x 0.8 = 1.6); "
                  "an integer when whole, else rounded to 3 decimals")
    scheduling_domain = serializers.SerializerMethodField(
        help_text="the tier-1 domain the scheduler places in: the node's domain, or node:<name> for a node "
                  "without one (it is a domain of its own)")

    class Meta:
        model = Node
        fields = ["id", "name", "flavor", "gpu_count", "cpu_milli", "memory_mib", "domain", "scheduling_domain",
                  "state", "state_since", "state_reason", "labels",
                  "executor", "address", "container_runtime", "last_heartbeat", "clock_offset_seconds",
                  "health_reason", "health_since", "validation", "topology_mismatches", "spare", "allocated_gpus",
                  "gpus"]
        read_only_fields = fields


    def get_allocated_gpus(self, node) -> float:
        total = float(getattr(node, "allocated_gpus", 0) or 0)
        return int(total) if total.is_integer() else round(total, 3)

    def get_scheduling_domain(self, node) -> str:
        return node.domain.name if node.domain_id else node_domain(node.name)


class NodeActionSerializer(Serializer):
    reason = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)


class GpuFenceSerializer(Serializer):
    """Fence a GPU (docs/operations.md, "Fencing one GPU"): `reason`, required, is what its health reason shows."""

    reason = serializers.CharField(max_length=200)


class NodeSpareSerializer(Serializer):
    """Mark a node a hot spare (true) or return it to ordinary use (false): docs/diagnosis.md, "Spare nodes"."""

    spare = serializers.BooleanField()


class NodeGpuSharingSerializer(Serializer):
    """Set GPUs' sharing mode (docs/concepts.md, "GPU sharing"): `sharing` exclusive (whole-GPU tasks only),
    shared (fractions only) or auto (whole while free of fractions, else shared); `gpus`: GPU indexes, each
    once (omitted: every GPU of the node not in MIG mode; an empty list is refused). MIG mode comes from the
    node agent, never from here."""

    sharing = serializers.ChoiceField(choices=["exclusive", "shared", "auto"])
    gpus = serializers.ListField(child=count_field(min_value=0, max_value=32767), required=False, min_length=1,
                                 max_length=128)

    def validate_gpus(self, value):
        if len(set(value)) != len(value):
            raise serializers.ValidationError(f"GPU index {next(g for g in value if value.count(g) > 1)} is given "
                                              f"twice")
        return value


class NodeValidateSerializer(Serializer):
    """Start validation (in_repair -> validating). `check_command`: an argv the operator's check runs on
    the node; with one, the node stays validating until a result is posted to .../validation/; without,
    its next heartbeat decides (every GPU visible and healthy, topology audit clean)."""

    check_command = serializers.ListField(child=serializers.CharField(max_length=500), required=False,
                                          default=list, max_length=64)


class NodeValidationResultSerializer(Serializer):
    passed = serializers.BooleanField()
    detail = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)


class GpuReportSerializer(Serializer):
    """One GPU as the node agent reports it. `ignored_fields`: inventory the agent sends (agent/inventory.py,
    GpuInventory) that the platform does not store; any other key is refused like everywhere else."""

    ignored_fields = ("ecc_uncorrected_aggregate", "retired_pages_dbe")

    index = count_field(min_value=0, max_value=MAX_GPU_INDEX)  # (services.nodes: NVML's 0..count-1)
    uuid = serializers.CharField(max_length=80, required=False, default="", allow_blank=True)
    numa_node = count_field(min_value=-32768, max_value=32767, required=False, allow_null=True, default=None)
    health = serializers.CharField(max_length=16, required=False, default="healthy")
    health_reason = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)
    # Health-rule signals and topology facts (docs/diagnosis.md); absent = not judged.
    model = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    pci_bus_id = serializers.CharField(max_length=64, required=False, default="", allow_blank=True)
    nvlink_peers = serializers.ListField(child=serializers.CharField(max_length=64), required=False, default=list,
                                         max_length=64)
    xids = serializers.ListField(child=count_field(min_value=0, max_value=100000), required=False, default=list,
                                 max_length=256)
    ecc_uncorrected_volatile = count_field(required=False, allow_null=True, default=None)
    row_remap_failure = serializers.BooleanField(required=False, allow_null=True, default=None)
    thermal_slowdown_seconds = serializers.FloatField(required=False, allow_null=True, default=None, min_value=0,
                                                      max_value=1e9)
    power_slowdown_seconds = serializers.FloatField(required=False, allow_null=True, default=None, min_value=0,
                                                    max_value=1e9)
    nvlink_down = count_field(required=False, allow_null=True, default=None, max_value=1024)
    # GPU sharing (DESIGN section 12): memory, and the MIG layout NVML reports (agent/inventory.py)
    memory_mib = count_field(required=False, allow_null=True, default=None, min_value=0)
    mig_mode = serializers.CharField(max_length=16, required=False, allow_null=True, default=None,
                                     help_text="enabled | disabled | null (not supported)")
    mig = serializers.ListField(child=serializers.DictField(), required=False, allow_null=True, default=None,
                                max_length=64, help_text="MIG instances: [{uuid, profile, memory_mib, slices}]")


class NodeRegisterSerializer(Serializer):
    name = serializers.CharField(help_text="only ASCII letters, digits, '.', '_' and '-', starting with a letter or "
                                           "digit; at most 200 characters (validate_name: the one name rule, names.py)")
    flavor = serializers.CharField(max_length=64, allow_blank=True)
    cpu_milli = count_field(default=0)
    memory_mib = count_field(default=0)
    labels = serializers.DictField(child=serializers.CharField(max_length=500, allow_blank=True), required=False,
                                   default=dict)
    gpus = GpuReportSerializer(many=True, max_length=1024)

    def validate_name(self, value):
        """The one name rule (names.py): every per-node URL (/api/v1/nodes/<name>/cordon/) must be able to name
        the node, and the agent's state directory is named after it (new-user trial 13, F2)."""
        from ...names import name_error

        message = name_error("node", value)
        if message:
            raise serializers.ValidationError(message)
        return value

    def validate_labels(self, value):
        """Label names: 1-200 characters, no NUL (PostgreSQL's jsonb cannot hold one)."""
        bad = [k for k in value if not k or len(k) > 200 or "\x00" in k]
        if bad:
            raise serializers.ValidationError(f"label names must be 1-200 characters without NUL: {bad[:3]!r}")
        return value

    address = serializers.CharField(max_length=200, required=False, default="", allow_blank=True,
                                    help_text="where other nodes reach this one (MASTER_ADDR); blank = its name")
    runtime = serializers.ChoiceField(choices=["", "docker", "podman"], required=False, default="",
                                      help_text="the agent's container runtime, if any")
    executor = serializers.ChoiceField(choices=["agent", "simulated"], required=False, allow_null=True, default=None,
                                       help_text="agent: this agent runs the tasks bound here (an executing agent "
                                                 "sends it); simulated: nothing runs; absent: keep the node's "
                                                 "(a new node is simulated: an inventory-only agent)")


class ProcessTextField(serializers.CharField):
    """Text a task's process or its agent produced (output, a lost task's message): NUL characters are let
    through for the service to replace (execution.append_log), and with `truncate` a longer text is cut
    instead of refused. A node agent drops a whole report answered 400, its exit events with it, so what a
    process printed must never make a report malformed: not a user's text (`user_text`: the API's text rule,
    fields.make_text_fields_strict, leaves it as printed, escapes and all)."""

    user_text = False

    def __init__(self, *, truncate: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.truncate = truncate
        self.validators = [v for v in self.validators if not isinstance(v, ProhibitNullCharactersValidator)]

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        return value[:self.truncate] if self.truncate is not None else value


class TaskReportSerializer(Serializer):
    """One report of a task's process (docs/execution.md)."""

    task = count_field(min_value=1)
    attempt = count_field(min_value=0)
    event = serializers.ChoiceField(choices=["started", "exited", "lost"])
    pid = count_field(min_value=0, required=False, allow_null=True, default=None)
    exit_code = count_field(min_value=0, max_value=255, required=False, allow_null=True, default=None)
    signal = count_field(min_value=1, max_value=128, required=False, allow_null=True, default=None)
    message = ProcessTextField(truncate=500, required=False, default="", allow_blank=True, trim_whitespace=False,
                               help_text="why a task was lost (kept to its first 500 characters)")
    cause = serializers.ChoiceField(choices=["", *LOST_CAUSES], required=False, default="", allow_blank=True,
                                    help_text="a lost report's known cause: agent_exited (the task's supervisor "
                                              "stopped it because its node agent exited; the platform's fault). "
                                              "Absent or '': unknown (agents before this field send none)")
    time = EpochSecondsField(required=False, allow_null=True, default=None,
                             help_text="an exited / lost report's time of the process's end on the node's clock, "
                                       "epoch seconds (the clock the heartbeat's `time` reads): the task's end, moved "
                                       "onto the server's clock by the node's clock offset and clamped to [the task's "
                                       "start, this report's arrival] (docs/execution.md). Absent or null: the "
                                       "arrival counts; ignored on a started report")

    def validate(self, attrs):
        if attrs["event"] == "exited" and (attrs["exit_code"] is None) == (attrs["signal"] is None):
            raise serializers.ValidationError({"exit_code": "an exited report has exactly one of exit_code and signal"})
        if attrs["cause"] and attrs["event"] != "lost":
            raise serializers.ValidationError({"cause": f"only a lost report has a cause, not {attrs['event']!r}"})
        return attrs


class LogChunkSerializer(Serializer):
    task = count_field(min_value=1)
    attempt = count_field(min_value=0)
    offset = serializers.IntegerField(min_value=0, max_value=2**62)
    data = ProcessTextField(max_length=70000, allow_blank=True, trim_whitespace=False,
                            help_text="the output from byte `offset`, UTF-8 text (at most 64 KiB of it is stored)")


class NodeReportsSerializer(Serializer):
    tasks = TaskReportSerializer(many=True, required=False, default=list, max_length=4096)
    logs = LogChunkSerializer(many=True, required=False, default=list, max_length=512)


class HeartbeatSerializer(Serializer):
    time = serializers.DateTimeField(required=False, allow_null=True, default=None,
                                     help_text="the node's clock when it sent this (ISO 8601); kept only as the "
                                               "node's clock offset: health is judged by the server's receive time")
    gpus = GpuReportSerializer(many=True, required=False, default=list, max_length=1024)

    def validate_time(self, value):
        """Stored in UTC (PostgreSQL refuses UTC offsets beyond +-15:59)."""
        if value is None:
            return value
        try:
            return value.astimezone(dt_timezone.utc)
        except (OverflowError, ValueError):
            raise serializers.ValidationError("date-time out of range") from None
