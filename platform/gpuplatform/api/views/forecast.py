"""POST /api/v1/forecast/: what if we changed something? (issue #15; scheduler/forecast/whatif.py)

The live cluster is forecast as it is and with the listed changes applied, in memory; NOTHING is written
(no job, quota, node or event changes: tests/api/test_forecast_api.py counts every table's rows).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.throttling import UserRateThrottle
from rest_framework.views import APIView

from ...inputs import INT64_MAX
from ...models import Job
from ...scheduling.forecast import WhatIfDenied, what_if_live
from ..filters import id_range_messages
from ..serializers.base import Serializer
from ..serializers.fields import FiniteFloatField, count_field, quota_field, weight_field
from ..serializers.jobs import GpusPerTaskField, TierField

# Bounds on one what-if's work (new-user trial 11, F11: 50 add_nodes changes of 10,000 nodes ran past 10
# minutes and grew the web process to 3.5 GB; one of them took 25.8 s). Both forecasts of a what-if grow with
# the hypothetical cluster, so the nodes a request adds are capped in all, not per change.
MAX_CHANGES = 20  # changes per what-if
MAX_ADDED_NODES = 512  # nodes all of a what-if's add_nodes changes add together (a change's `count` at most this)

REQUIRED = {
    "submit": ("queue", "tasks"),
    "set_quota": ("queue", "flavor"),
    "set_weight": ("queue", "weight"),
    "drain_nodes": ("nodes",),
    "add_nodes": ("count", "gpus"),
    "set_priority": ("job", "priority"),
    "cancel": ("job",),
}
# the fields each kind takes: `kind`, its REQUIRED ones, then its optional ones (any other is refused naming the kind)
KIND_FIELDS = {kind: ("kind", *req, *{
    "submit": ("id", "gpus_per_task", "min_available", "priority", "time_limit", "topology_mode", "highest_tier",
               "flavors", "gpu_fraction", "gpu_memory_mib", "mig_profile", "mig_count", "cpu_milli", "memory_mib",
               "preemptible", "interruptible"),
    "set_quota": ("guarantee", "quota", "limit"), "add_nodes": ("flavor", "domain")}.get(kind, ()))
    for kind, req in REQUIRED.items()}


def not_of_kind(kind: str) -> str:
    """A field the change's kind does not take, and what that kind takes instead."""
    return f"not a field of kind {kind} (a {kind} change takes {', '.join(KIND_FIELDS[kind][1:])})"


class ChangeSerializer(Serializer):
    """One change. `kind` says which; each kind needs its own fields (REQUIRED) and takes no others'
    (KIND_FIELDS; a key no kind has is refused by the strict base)."""

    kind = serializers.ChoiceField(choices=list(REQUIRED))
    id = serializers.CharField(required=False, max_length=100, help_text="submit: the hypothetical job's name")
    queue = serializers.CharField(required=False, max_length=200)
    tasks = serializers.IntegerField(required=False, min_value=1, max_value=4096)
    # the submit change's role fields are job submission's (JobRoleSerializer's fields; its rules,
    # job_rules.check_roles, are applied by scheduling.forecast.submit_roles)
    gpus_per_task = GpusPerTaskField(required=False, help_text="submit: whole GPUs per task (default 1), or a "
                                                               "fraction of one GPU from 0.001 to 0.999")
    gpu_fraction = FiniteFloatField(required=False, help_text="submit: a share of one GPU per task, in (0, 1)")
    gpu_memory_mib = count_field(required=False, help_text="submit: GPU memory per task on one shared GPU")
    mig_profile = serializers.CharField(required=False, max_length=32, help_text="submit: MIG profile, e.g. 1g.18gb")
    mig_count = count_field(required=False, help_text="submit: MIG instances per task (default 1)")
    cpu_milli = count_field(required=False)
    memory_mib = count_field(required=False)
    preemptible = serializers.BooleanField(required=False)
    interruptible = serializers.BooleanField(required=False, help_text="submit: as on job submission (must be "
                                                                       "preemptible)")
    min_available = serializers.IntegerField(required=False, min_value=1, max_value=4096)
    priority = serializers.IntegerField(required=False, min_value=-2**31, max_value=2**31 - 1)
    # time_limit and highest_tier: submission's rules (job_rules.check_placement_and_limit, applied by
    # scheduling.forecast.check_submit_changes), not bounds of their own (new-user trial 11, F5)
    time_limit = serializers.IntegerField(required=False, help_text="seconds, 1 to 366 days as on submission")
    topology_mode = serializers.ChoiceField(required=False, choices=Job.TopologyMode.choices)
    highest_tier = TierField(required=False, help_text="a tier this cluster has, by number or name, as on "
                                                       "submission")
    flavors = serializers.ListField(child=serializers.CharField(max_length=64), required=False, max_length=16)
    flavor = serializers.CharField(required=False, max_length=64)
    guarantee = quota_field("guarantee", required=False)  # the quota API's rule (fields.quota_field)
    quota = quota_field("quota", required=False)
    limit = quota_field("limit", required=False, allow_null=True)
    weight = weight_field(required=False)
    # drain_nodes' nodes: the bounds in a sentence naming the change (new-user trial 25, F4: "nodes": [] read DRF's
    # "Ensure this field has at least 1 elements.")
    nodes = serializers.ListField(child=serializers.CharField(max_length=200), required=False, min_length=1,
                                  max_length=10000, error_messages={
                                      "min_length": "drain_nodes needs at least one node: give at least one node "
                                                    "name in nodes",
                                      "max_length": "drain_nodes takes at most {max_length} nodes per change"})
    count = serializers.IntegerField(required=False, min_value=1, max_value=MAX_ADDED_NODES,
                                     help_text=f"add_nodes: nodes to add; at most {MAX_ADDED_NODES} in all the "
                                               f"request's add_nodes changes")
    gpus = serializers.IntegerField(required=False, min_value=1, max_value=64)
    domain = serializers.CharField(required=False, max_length=200)
    # a job id: a BigAutoField's range, in the API's words for an id past it (filters.id_range_messages: a 20-digit
    # id is "no job has an id that large", as ?job= says; new-user trial 24, F5)
    job = serializers.IntegerField(required=False, min_value=1, max_value=INT64_MAX,
                                   error_messages=id_range_messages("job"))

    def to_internal_value(self, data):
        # which fields the kind takes is checked before any field's type: {"kind": "submit", "job": {...}} read
        # "job: must be a whole number, not an object", as if a job id were what it lacked, while "job": 5 read
        # "not a field of kind submit" (new-user trial 27). A key no kind has is left to the strict base's
        # "unknown field" (which lists every field).
        if isinstance(data, Mapping):
            kind = data.get("kind")
            if isinstance(kind, str) and kind in KIND_FIELDS and all(k in self.fields for k in data):
                extra = sorted(k for k in data if k not in KIND_FIELDS[kind])
                if extra:
                    raise serializers.ValidationError({f: [not_of_kind(kind)] for f in extra})
        return super().to_internal_value(data)

    def validate(self, attrs):
        kind = attrs["kind"]
        missing = [f for f in REQUIRED[kind] if f not in attrs]
        if missing:
            raise serializers.ValidationError({f: [f"required for kind {kind}"] for f in missing})
        if kind == "set_quota" and not {"guarantee", "quota", "limit"} & set(attrs):
            raise serializers.ValidationError({"quota": ["set_quota needs guarantee, quota or limit"]})
        if kind == "drain_nodes":  # a node named twice: a typo or a script's doubled list (trial 18a)
            twice = sorted(n for n, times in Counter(attrs["nodes"]).items() if times > 1)
            if twice:
                raise serializers.ValidationError({"nodes": [
                    f"drain_nodes names {', '.join(repr(n) for n in twice[:5])}{', ...' if len(twice) > 5 else ''} "
                    f"more than once: name each node once"]})
        extra = sorted(set(attrs) - set(KIND_FIELDS[kind]))  # (to_internal_value refuses these first)
        if extra:
            raise serializers.ValidationError({f: [not_of_kind(kind)] for f in extra})
        return attrs


class WhatIfSerializer(Serializer):
    # at least one change: a what-if of none is the forecast as it is (each job's estimated_start), with nothing
    # to compare (a new-user trial read {"changes": []} as a question and its answer as evictions it avoided)
    changes = ChangeSerializer(many=True, allow_empty=False, max_length=MAX_CHANGES, error_messages={
        "max_length": f"at most {MAX_CHANGES} changes per what-if (ask several what-ifs)",
        "empty": "give at least one change (without one the what-if is the forecast as it is: each pending job's "
                 "estimated_start on the jobs API)"})

    def validate(self, attrs):
        added = 0
        for i, ch in enumerate(attrs["changes"]):
            if ch["kind"] == "add_nodes":
                added += ch["count"]
                if added > MAX_ADDED_NODES:
                    raise serializers.ValidationError({f"changes[{i}].count": [
                        f"the what-if's add_nodes changes would add {added} nodes; at most {MAX_ADDED_NODES} in "
                        f"all"]})
        return attrs


class WhatIfThrottle(UserRateThrottle):
    """What-if runs per user (two forecasts each): rate REST_FRAMEWORK DEFAULT_THROTTLE_RATES["what-if"]."""

    scope = "what-if"


class WhatIfView(APIView):
    """What if? Forecast every pending job's start before and after a list of changes; nothing is written.

    Changes (`kind`): `submit` a hypothetical job (queue, tasks, gpus_per_task, ...); `set_quota` (queue,
    flavor, guarantee / quota / limit); `set_weight` (queue, weight); `drain_nodes` (nodes); `add_nodes`
    (count, gpus, flavor, domain); `set_priority` (job, priority); `cancel` (job). Team members may ask about
    their own teams' jobs and hypothetical submissions to their queues; quotas, weights and nodes are for
    platform admins (403 naming the change). Answer: per job you can see (and the hypothetical ones) the
    estimated start and P90 before and after, and `why` a job's start moves (cause, the job it is about, words:
    scheduler.forecast.whatif.explain); per queue the mean wait before and after and its change (s); the evictions
    the change would cause (whose job, its queue, for whom, and whether for the change's own job or a knock-on) and
    those it avoids; `written` is always false. Non-admins see only the queues the
    queues API shows them (access.visible_queues); the others are counted in `hidden_queues`, other teams'
    evictions in `hidden_evictions`, and another team's job an eviction makes room for reads `beneficiary: null`.
    """

    permission_classes = [IsAuthenticated]
    throttle_classes = [WhatIfThrottle]

    @extend_schema(request=WhatIfSerializer, responses={200: {"type": "object"}}, examples=[OpenApiExample(
        "a hypothetical job and a quota change", value={"changes": [
            {"kind": "submit", "queue": "vision", "tasks": 2, "gpus_per_task": 8},
            {"kind": "set_quota", "queue": "vision", "flavor": "H100", "quota": 64}]}, request_only=True)])
    def post(self, request):
        from scheduler.forecast.whatif import WhatIfError

        ser = WhatIfSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        changes = [dict(c) for c in ser.validated_data["changes"]]
        try:
            answer = what_if_live(request.user, changes)
        except WhatIfDenied as exc:
            return Response({"detail": f"changes[{exc.index}]: {exc.message}"}, status=status.HTTP_403_FORBIDDEN)
        except WhatIfError as exc:
            return Response({f"changes[{exc.index}].{exc.field}": [exc.message]}, status=status.HTTP_400_BAD_REQUEST)
        return Response(answer)
