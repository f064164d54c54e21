"""The manager's REST API (/api/v1/federation/): member clusters and the jobs submitted to the federation.

- clusters/: every signed-in user lists them (name, address, labels, cost, state, capacity per flavor,
  the age of the last sync); platform admins add, change and remove them. `token` is write-only (stored
  encrypted, federation/secrets.py) and never returned.
- jobs/: submit (the body of POST /api/v1/jobs/ plus `clusters`, `cluster_selector`, `data_site`,
  `restartable`; Idempotency-Key honoured), list and read (your teams' jobs only; platform admins and ops:
  all), cancel (members and admins of the job's team). Each job shows where it went and why (`decision`:
  every candidate's score parts and every rejected cluster's reason) and its state, which follows the worker.
"""
from __future__ import annotations

import django_filters as df
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from .. import access
from ..api.filters import NamedFilter, StateFilter, StrictBooleanFilter
from ..api.idempotency import IdempotentCreateMixin
from ..api.permissions import IsPlatformAdminOrReadOnly
from ..api.serializers import LogQuerySerializer
from ..api.serializers.base import ModelSerializer, Serializer
from ..errors import ValidationError
from ..models import FederatedJob, MemberCluster, Queue, Team
from . import manager
from .secrets import masked


def submit_response(request) -> Response:
    """Submit `request.data` to the federation and answer 201 with the FederatedJob (Location: its
    /api/v1/federation/jobs/<id>/). Shared by POST /api/v1/federation/jobs/ and, on a manager, POST
    /api/v1/jobs/: the body is first checked by the jobs API's JobSubmitSerializer, so a bad field gets the
    same 400 shape ({"roles[0].tasks": [...]}) as on a worker, and an unknown key's 400 lists the fields a manager
    takes, the federation's included (manager.submit_serializer); then manager.submit_as (queue, team, rights).
    Idempotency-Key is the caller viewset's (IdempotentCreateMixin)."""
    body = request.data if isinstance(request.data, dict) else None
    if body is None:
        raise ValidationError({"body": "a JSON object"})
    manager.submit_serializer()(data={k: v for k, v in body.items()}).is_valid(raise_exception=True)
    job = manager.submit_as(user=request.user, body=dict(body))
    return Response(FederatedJobSerializer(job).data, status=status.HTTP_201_CREATED,
                    headers={"Location": f"/api/v1/federation/jobs/{job.pk}/"})


class MemberClusterSerializer(ModelSerializer):
    # the name's rule in its one wording (manager.cluster_name_error), for POST and PATCH / PUT alike; the model's
    # SlugField answered Django's slug or length words for some broken names, the rule's for others
    name = serializers.CharField(error_messages={"invalid": manager.CLUSTER_NAME_RULE,
                                                 "blank": manager.CLUSTER_NAME_RULE},
                                 help_text=manager.CLUSTER_NAME_RULE)
    token = serializers.CharField(write_only=True, required=False, max_length=500,
                                  help_text="the member's service token (write-only; stored encrypted)")
    token_status = serializers.SerializerMethodField()
    capacity = serializers.SerializerMethodField(help_text="per flavor {total, free} GPUs at the last sync")
    backlog = serializers.SerializerMethodField(help_text="{pending_jobs, pending_gpus, running_jobs} at the last sync")
    sync_age_s = serializers.SerializerMethodField(help_text="seconds since the last successful sync (null: never)")

    class Meta:
        model = MemberCluster
        fields = ["id", "name", "api_url", "token", "token_status", "labels", "cost_per_gpu_hour", "enabled",
                  "state", "capacity", "backlog", "last_sync_at", "sync_age_s", "last_error", "sync_bytes"]
        read_only_fields = ["id", "token_status", "state", "capacity", "backlog", "last_sync_at", "sync_age_s",
                            "last_error", "sync_bytes"]
        # (`name` is declared above, without the model's unique validator: a name taken is the service's rule, under
        # the name's lock; manager.name_taken: one wording however two creations meet, where the model's validator
        # here answered "member cluster with this name already exists.")

    def validate_name(self, value: str) -> str:
        error = manager.cluster_name_error(value)
        if error:
            raise serializers.ValidationError(error)
        return value

    def get_token_status(self, c) -> str:
        return masked(c.token_encrypted)

    def get_capacity(self, c) -> dict:
        return {f: {"total": v.get("total", 0), "free": v.get("free", 0)}
                for f, v in (c.summary or {}).get("flavors", {}).items()}

    def get_backlog(self, c) -> dict:
        s = c.summary or {}
        return {k: s.get(k, 0) for k in ("pending_jobs", "pending_gpus", "running_jobs")}

    def get_sync_age_s(self, c) -> float | None:
        return round((timezone.now() - c.last_sync_at).total_seconds(), 1) if c.last_sync_at else None


class MemberClusterFilterSet(df.FilterSet):
    """The member clusters' list filters. With a filterset the list gets the API's query-parameter rules
    (api.filters.KnownQueryParams, the first filter backend), as the federated jobs' list: an unknown parameter
    (`?foo=1`), a state that is none, a parameter given twice or a blank filter (`?name=`) is a 400 naming it
    (trial 18a, G15: every one of them answered 200 and the whole list)."""

    name = df.CharFilter(help_text="member cluster name")
    state = StateFilter(choices=MemberCluster.State.choices, help_text="repeat for several states")
    enabled = StrictBooleanFilter(help_text="true: clusters that get new jobs; false: disabled ones")

    class Meta:
        model = MemberCluster
        fields = ["name", "state", "enabled"]


class MemberClusterViewSet(IdempotentCreateMixin, viewsets.ModelViewSet):
    """Member clusters of this federation manager (read: signed-in users; write: platform admins)."""

    serializer_class = MemberClusterSerializer
    permission_classes = [IsPlatformAdminOrReadOnly]
    filterset_class = MemberClusterFilterSet  # name, state (repeatable), enabled
    queryset = MemberCluster.objects.order_by("name", "id")  # paginated like every list: {count, next, previous, results}

    def create(self, request, *args, **kwargs):
        ser = self.get_serializer(data=request.data)
        ser.is_valid(raise_exception=True)
        d = ser.validated_data
        if "token" not in d:
            raise ValidationError({"token": "required: the member's service token"})
        c = manager.register_cluster(name=d["name"], api_url=d["api_url"], token=d["token"],
                                     labels=d.get("labels") or {}, cost_per_gpu_hour=d.get("cost_per_gpu_hour", 0.0),
                                     enabled=d.get("enabled", True), actor=request.user)
        return Response(self.get_serializer(c).data, status=status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        partial = kwargs.pop("partial", False)
        c = self.get_object()
        ser = self.get_serializer(c, data=request.data, partial=partial)
        ser.is_valid(raise_exception=True)
        c = manager.update_cluster(c, actor=request.user, **ser.validated_data)
        return Response(self.get_serializer(c).data)

    def perform_destroy(self, instance):
        if instance.jobs.exists():
            raise ValidationError({"name": f"{instance.name} has federated jobs on record; disable it instead "
                                           f"(enabled: false) so no new job goes there"})
        from ..audit import record_event

        record_event("federation.cluster_removed", f"member cluster {instance.name} removed",
                     actor=self.request.user, data={"cluster": instance.name})
        instance.delete()


class FederatedJobSerializer(ModelSerializer):
    gpus = serializers.SerializerMethodField(
        help_text="GPU-equivalents, as a worker's jobs API counts them (gpu_request.gpu_equivalents): one task of half "
                  "a GPU is 0.5; a GPU-memory share counts 0 at the manager (its share depends on the member's GPU)")
    gpu_request = serializers.SerializerMethodField(
        help_text="what it asks for per role, as a worker shows it: '8', '1x0.5', '2x1g.18gb', '1x20000MiB'")
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    submitter = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = FederatedJob
        fields = ["id", "name", "team", "queue", "submitter", "state", "gpus", "gpu_request", "task_gpus", "flavors",
                  "clusters", "cluster_selector", "data_site", "restartable", "cluster", "remote_id", "remote_state",
                  "generation", "reason", "decision", "placements", "submitted_at", "dispatched_at", "started_at",
                  "finished_at", "spec"]
        read_only_fields = fields

    def get_gpus(self, job) -> float:
        return manager.job_gpu_figures(job)[0]

    def get_gpu_request(self, job) -> str:
        return manager.job_gpu_figures(job)[1]


class FederatedCancelSerializer(Serializer):
    reason = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)


class FederatedJobFilterSet(df.FilterSet):
    """The federated jobs' list filters. With a filterset the list gets the API's query-parameter rules
    (api.filters.KnownQueryParams, the first filter backend): an unknown parameter (`?foo=1`), a state that is
    none (`?state=bogus`), a queue, team or member cluster that names nothing, or a parameter given twice is a
    400 naming it, as on a worker (new-user trial 17, F15: each gave 200 and an unfiltered or empty list)."""

    state = StateFilter(choices=FederatedJob.State.choices, help_text="repeat for several states")
    queue = NamedFilter(field_name="queue", model=Queue, what="queue", help_text="queue name")
    team = NamedFilter(field_name="team__slug", model=Team, lookup="slug", what="team", help_text="team slug")
    cluster = NamedFilter(field_name="cluster__name", model=MemberCluster, what="member cluster",
                          help_text="member cluster name (where its copy is)")

    class Meta:
        model = FederatedJob
        fields = ["state", "queue", "team", "cluster"]


class FederatedJobViewSet(IdempotentCreateMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                          viewsets.GenericViewSet):
    """Jobs submitted to the federation (your teams' only; platform admins and ops: all)."""

    serializer_class = FederatedJobSerializer
    permission_classes = [IsAuthenticated]
    filterset_class = FederatedJobFilterSet  # state, queue, team (gpuctl list --team), cluster
    ordering_fields = ["submitted_at", "state", "name", "id"]

    def get_queryset(self):
        return manager.visible_federated_jobs(self.request.user).order_by("-submitted_at", "-id")

    @extend_schema(request={"application/json": {"type": "object"}}, responses={
        201: FederatedJobSerializer,
        # Idempotency-Key reused with another body ({"Idempotency-Key": [...]}), or not a manager ({"detail"})
        409: {"oneOf": [{"$ref": "#/components/schemas/FieldErrors"}, {"$ref": "#/components/schemas/Error"}]}})
    def create(self, request):
        """Submit: the jobs API's body plus `clusters`, `cluster_selector`, `data_site`, `restartable`.
        The team is the queue's. 400 names the field (a job no member cluster could ever hold: `roles`);
        403 for another team's queue; 409 on an instance that is not a federation manager (FEDERATION_ROLE)."""
        if not manager.is_manager():
            return Response({"detail": manager.NOT_MANAGER}, status=status.HTTP_409_CONFLICT)
        return submit_response(request)

    @extend_schema(parameters=[LogQuerySerializer], responses={200: {"type": "object"}, 503: {"type": "object"}})
    @action(detail=True, methods=["get"])
    def logs(self, request, pk=None):
        """The task logs of the job's copy, proxied from its worker (same query and answer as
        GET /api/v1/jobs/<id>/logs/). 400 `state` before it was placed; 503 while its worker does not answer."""
        from .client import MemberRefused, MemberUnreachable
        from .dispatch import client_for

        job = self.get_object()
        q = LogQuerySerializer(data=request.query_params)
        q.is_valid(raise_exception=True)
        if job.cluster is None or job.remote_id is None:
            raise ValidationError({"state": f"the job is {job.state} and has no copy on a cluster yet"})
        params = {k: v for k, v in q.validated_data.items() if v not in (None, "")}
        try:
            return Response(client_for(job.cluster).logs(job.remote_id, params))
        except MemberUnreachable as exc:
            return Response({"detail": f"cluster {job.cluster.name} does not answer: {exc}"},
                            status=status.HTTP_503_SERVICE_UNAVAILABLE)
        except MemberRefused as exc:
            return Response(exc.body if isinstance(exc.body, dict) else {"detail": str(exc.body)},
                            status=status.HTTP_400_BAD_REQUEST)

    @extend_schema(request=FederatedCancelSerializer, responses={200: FederatedJobSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel it here and stop the worker's copy (fenced if the worker is unreachable)."""
        job = self.get_object()
        if not access.can_submit(request.user, job.team_id):
            raise PermissionDenied("only members and admins of the job's team may cancel it")
        body = FederatedCancelSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        job = manager.cancel_federated_job(job, actor=request.user, reason=body.validated_data["reason"])
        return Response(FederatedJobSerializer(job).data)
