"""The rescheduling advisor: GET the moves that would free a domain for jobs blocked by fragmentation
(scheduling/advice.py), and POST `act/` to ask the owners' jobs to checkpoint and move (platform admins;
services.request_moves, audited)."""
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from ... import access, services
from ...models import Job
from ...scheduling.advice import fragmentation_advice
from ..filters import refuse_unknown_params
from ..serializers.base import Serializer
from ..serializers.jobs import GpusPerTaskField, TierField


class AdviceMoveSerializer(Serializer):
    job = serializers.IntegerField()
    name = serializers.CharField()
    gpus = serializers.IntegerField(help_text="GPUs the job holds")
    to = serializers.CharField(help_text="the domain of its new place")


class AdviceSerializer(Serializer):
    beneficiary = serializers.IntegerField(help_text="the pending job that would start")
    name = serializers.CharField()
    gpus = serializers.IntegerField(help_text="GPUs it needs at once")
    waiting_seconds = serializers.FloatField()
    domain = serializers.CharField(help_text="the domain the moves free for it")
    tier = serializers.IntegerField()
    moves = AdviceMoveSerializer(many=True)
    message = serializers.CharField()


class MoveRequestSerializer(Serializer):
    beneficiary = serializers.IntegerField(min_value=1, max_value=2**62, help_text="the pending job's id")
    jobs = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=2**62), min_length=1,
                                 max_length=16, help_text="ids of the running jobs to move (from the advice)")


class MoveDoneSerializer(Serializer):
    job = serializers.IntegerField()
    gpus = serializers.IntegerField()
    to = serializers.CharField()
    deadline = serializers.DateTimeField(help_text="when its checkpoint grace ends and it restarts on its new place")


class MoveResultSerializer(Serializer):
    beneficiary = serializers.IntegerField()
    domain = serializers.CharField()
    moves = MoveDoneSerializer(many=True)


class FragmentationAdviceViewSet(viewsets.GenericViewSet):
    """Rescheduling advice (docs/rescheduling.md)."""

    permission_classes = [IsAuthenticated]
    serializer_class = AdviceSerializer
    pagination_class = None
    queryset = Job.objects.none()  # the schema's model; the advice is computed, not read from a table

    @extend_schema(responses={200: AdviceSerializer(many=True)})
    def list(self, request):
        """Moves of running jobs that are not migratable which would let a job blocked by fragmentation
        alone start: "moving jobs 812, 907 would free rack r12 for job 1033 (64 GPUs, waiting 3 h)"."""
        refuse_unknown_params(request, ())  # it reads none: ?foo= is a 400 naming it, as on the lists (trial 10, F21)
        return Response(AdviceSerializer(fragmentation_advice(), many=True).data)

    @extend_schema(request=MoveRequestSerializer, responses={200: MoveResultSerializer})
    @action(detail=False, methods=["post"])
    def act(self, request):
        """Ask the jobs to checkpoint and move (platform admins). 400 naming the field when the
        beneficiary is not pending, a job is not running, or the moves no longer free a domain for it."""
        if not access.is_platform_admin(request.user):
            raise PermissionDenied("only platform admins may move other teams' jobs")
        body = MoveRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        out = services.request_moves(beneficiary=d["beneficiary"], jobs=d["jobs"], actor=request.user)
        return Response(MoveResultSerializer(out).data)


class ShapeRoleSerializer(Serializer):
    name = serializers.CharField(max_length=64, required=False, default="worker")
    tasks = serializers.IntegerField(min_value=1, max_value=4096)
    gpus_per_task = GpusPerTaskField(help_text="whole GPUs per task, or a share of one GPU (submission's rule; a "
                                               "share strands nothing and gets no advice)")
    min_available = serializers.IntegerField(min_value=1, max_value=4096, required=False, allow_null=True, default=None)
    flavor = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class ShapeCheckSerializer(Serializer):
    queue = serializers.CharField(max_length=100, help_text="leaf queue name")
    topology_mode = serializers.ChoiceField(choices=Job.TopologyMode.choices, default="none")
    highest_tier = TierField(required=False, allow_null=True, default=None,
                             help_text="a tier number or name this cluster has, as on submission")
    roles = ShapeRoleSerializer(many=True, min_length=1, max_length=64)


class ShapeSuggestionSerializer(Serializer):
    tasks = serializers.IntegerField()
    gpus_per_task = serializers.IntegerField()


class ShapeStartSerializer(Serializer):
    asked = serializers.CharField(allow_null=True, help_text='"now", epoch seconds, or null (unknown)')
    suggested = serializers.CharField(allow_null=True)


class ShapeNoEstimateSerializer(Serializer):
    asked = serializers.CharField(allow_null=True, help_text="why estimated_start.asked is null (null when it is not)")
    suggested = serializers.CharField(allow_null=True)


class ShapeAdviceSerializer(Serializer):
    role = serializers.CharField()
    node_gpus = serializers.IntegerField()
    stranded_per_node = serializers.IntegerField()
    stranded = serializers.IntegerField(help_text="GPUs stranded on the nodes the role fills")
    suggested = ShapeSuggestionSerializer()
    message = serializers.CharField()
    estimated_start = ShapeStartSerializer()
    no_estimate = ShapeNoEstimateSerializer()


class ShapeCheckViewSet(viewsets.GenericViewSet):
    """Shape steering before a submit (docs/rescheduling.md)."""

    permission_classes = [IsAuthenticated]
    serializer_class = ShapeCheckSerializer
    queryset = Job.objects.none()  # the schema's model; nothing is read
    pagination_class = None

    @extend_schema(request=ShapeCheckSerializer, responses={200: ShapeAdviceSerializer(many=True)})
    def create(self, request):
        """For each role whose shape strands GPUs on its nodes (6 GPUs per task on 8-GPU nodes strand 2 per
        node), the nearest shape that packs and the estimated start of both; [] when every role packs."""
        from ...models import Queue
        from ...scheduling.advice import shape_check

        from ... import fit_check
        from ...job_rules import check_placement_and_limit, check_roles, resolve_tier
        from ... import queries

        body = ShapeCheckSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        # The roles by job submission's own rules (min_available within tasks, unique names, ...) and its never-fits
        # refusal: a shape submission would refuse is a 400 naming the field, not advice on it (new-user trial 10,
        # F21: min_available 9 of 3 tasks was answered with advice)
        roles, errors = check_roles([{k: v for k, v in r.items() if v is not None} for r in d["roles"]])
        # the job's tier by submission's rules too: a name resolved, a tier this cluster has (new-user trial 16, F7:
        # 99 was "at most 32" here, "no such tier in this cluster" on submission, and 1..32767 in docs/api.md)
        highest_tier, tier_errors = resolve_tier(d["highest_tier"], "highest_tier")
        errors.update(tier_errors or check_placement_and_limit(
            topology_mode=d["topology_mode"], highest_tier=highest_tier, preferred_tier=None, time_limit_seconds=None,
            tiers=queries.cluster_tiers()))
        if errors:
            raise serializers.ValidationError(errors)
        why = fit_check.refusal_errors(roles, topology_mode=d["topology_mode"], highest_tier=highest_tier,
                                       given=d["roles"])
        if why:  # keyed by the field at fault, as on submission
            raise serializers.ValidationError(why)
        queue = Queue.objects.filter(name=d["queue"]).only("team_id").first()
        if queue is None:
            raise serializers.ValidationError({"queue": f"unknown queue {d['queue']!r}"})
        # Another team's queue is not the asker's to probe (its estimated starts read that team's quota and
        # jobs): 403, as job submission answers a queue of a team one is not in (new-user trial 10, F4).
        if queue.team_id is not None and not access.visible_queues(request.user).filter(pk=queue.pk).exists():
            raise PermissionDenied("only members of the queue's team (or platform admins) may check shapes on it")
        out = shape_check(roles=roles, queue=d["queue"], topology_mode=d["topology_mode"], highest_tier=highest_tier)
        for a in out:
            a["estimated_start"] = {k: (None if v is None else str(v)) for k, v in a["estimated_start"].items()}
        return Response(ShapeAdviceSerializer(out, many=True).data)
