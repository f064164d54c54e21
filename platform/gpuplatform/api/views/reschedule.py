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
from ...scheduling.advice import fragmentation_advice


class AdviceMoveSerializer(serializers.Serializer):
    job = serializers.IntegerField()
    name = serializers.CharField()
    gpus = serializers.IntegerField(help_text="GPUs the job holds")
    to = serializers.CharField(help_text="the domain of its new place")


class AdviceSerializer(serializers.Serializer):
    beneficiary = serializers.IntegerField(help_text="the pending job that would start")
    name = serializers.CharField()
    gpus = serializers.IntegerField(help_text="GPUs it needs at once")
    waiting_seconds = serializers.FloatField()
    domain = serializers.CharField(help_text="the domain the moves free for it")
    tier = serializers.IntegerField()
    moves = AdviceMoveSerializer(many=True)
    message = serializers.CharField()


class MoveRequestSerializer(serializers.Serializer):
    beneficiary = serializers.IntegerField(min_value=1, max_value=2**62, help_text="the pending job's id")
    jobs = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=2**62), min_length=1,
                                 max_length=16, help_text="ids of the running jobs to move (from the advice)")


class MoveDoneSerializer(serializers.Serializer):
    job = serializers.IntegerField()
    gpus = serializers.IntegerField()
    to = serializers.CharField()
    deadline = serializers.DateTimeField(help_text="when its checkpoint grace ends and it restarts on its new place")


class MoveResultSerializer(serializers.Serializer):
    beneficiary = serializers.IntegerField()
    domain = serializers.CharField()
    moves = MoveDoneSerializer(many=True)


class FragmentationAdviceViewSet(viewsets.GenericViewSet):
    """Rescheduling advice (docs/rescheduling.md)."""

    permission_classes = [IsAuthenticated]
    serializer_class = AdviceSerializer
    pagination_class = None

    @extend_schema(responses={200: AdviceSerializer(many=True)})
    def list(self, request):
        """Moves of running jobs that are not migratable which would let a job blocked by fragmentation
        alone start: "moving jobs 812, 907 would free rack r12 for job 1033 (64 GPUs, waiting 3 h)"."""
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
