from rest_framework import serializers

from ... import access
from ...event_visibility import redacted
from ...gpu_request import as_gpus
from ...models import ClusterSample, Event, SchedulerCycle
from .base import ModelSerializer, Serializer


class EventSerializer(ModelSerializer):
    actor = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    queue = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    node = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)

    class Meta:
        model = Event
        fields = ["id", "time", "kind", "actor", "job", "queue", "node", "cycle", "message", "data"]
        read_only_fields = fields

    def to_representation(self, instance):
        """Other teams' jobs named in the event read "a job of team X" (gpuplatform/event_visibility.py)."""
        out = super().to_representation(instance)
        visible = self.context.get("visible_team_ids", ...)
        if visible is ...:
            request = self.context.get("request")
            visible = access.visible_team_ids(request.user) if request is not None else set()
            self.context["visible_team_ids"] = visible  # once per response, not per event
        out["message"], out["data"] = redacted(out["message"], out["data"], visible)
        return out


class SchedulerCycleSerializer(ModelSerializer):
    timings = serializers.DictField(child=serializers.FloatField(), read_only=True,
                                    help_text="phase -> milliseconds (snapshot, enqueue, allocate, backfill, ...)")

    class Meta:
        model = SchedulerCycle
        fields = ["number", "started_at", "clock", "duration_ms", "timings", "binds", "evictions", "pending",
                  "stale_skipped", "error"]
        read_only_fields = fields


class ClusterSampleSerializer(ModelSerializer):
    largest_runnable = serializers.DictField(child=serializers.IntegerField(), read_only=True,
                                             help_text="tier -> most GPUs one job could get inside one domain")

    class Meta:
        model = ClusterSample
        fields = ["time", "cycle", "schedulable_gpus", "allocated_gpus", "held_gpus", "free_gpus", "allocation_rate",
                  "fragmentation_rate", "largest_runnable", "by_group", "domain_completeness", "pending_jobs",
                  "running_jobs", "sharing"]
        read_only_fields = fields


class GpuEquivalentsField(serializers.FloatField):
    """A GPU-equivalent count: an integer when whole (105), else a number with at most 3 decimals (103.5)."""

    def to_representation(self, value):
        return as_gpus(value)


class QueueUsageSerializer(Serializer):
    queue = serializers.CharField()
    team = serializers.CharField(allow_null=True)
    used = GpuEquivalentsField(help_text="GPU-equivalents allocated now (subtree): a 0.25 share counts 0.25")
    guarantee = serializers.IntegerField()
    quota = serializers.IntegerField()
    limit = serializers.IntegerField(allow_null=True)
    pending_demand = GpuEquivalentsField(help_text="GPU-equivalents requested by pending jobs (subtree)")
    pending_jobs = serializers.IntegerField()
    running_jobs = serializers.IntegerField()


class ClusterMetricsSerializer(Serializer):
    sample = ClusterSampleSerializer(allow_null=True, help_text="the latest cycle's cluster sample: the cluster as "
                                                                "cycle `sample.cycle` left it at `sample.time`")
    cycle = SchedulerCycleSerializer(allow_null=True, help_text="the latest scheduling cycle")
    queues = QueueUsageSerializer(many=True, help_text="live usage of the queues you may see, read at `queues_time`")
    queues_time = serializers.DateTimeField(help_text="the cluster clock when `queues` was read: jobs submitted, "
                                                      "started or ended since `sample.time` are in `queues`, not in "
                                                      "`sample`, so their sums may differ from it by those")
