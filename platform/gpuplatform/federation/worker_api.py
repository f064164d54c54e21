"""The worker's side of federation: what a manager's scoped service token may do here (issue #22).

The manager's account on a worker is a user in the group `federation-managers` (FEDERATION_MANAGER_GROUP)
with its own API token; it has no team and no staff flag, so the rest of the API shows it nothing. These
endpoints (under /api/v1/federation/) are all it can use (client.py lists them):

- summary: scheduler.core.federation.summarize of the snapshot the cycle reads, plus the federated copies
  held here ({"id", "external_id", "state"} for every job whose external_id starts with "fed:" that is live,
  or ended in the last day) and the worker's clock;
- jobs create (Idempotency-Key honoured: a retried dispatch answers the first copy), list by external_id;
- withdraw: cancel only while the copy is still pending (row locked; the cycle's start is a compare-and-set
  on the state, so a withdrawal and a start never both win). 409 once it started;
- cancel: the usual cancel (stops a running copy too);
- forecast: the start a hypothetical submission would get (the what-if, scheduler/forecast/whatif.py).
"""
from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import access, services
from ..api.idempotency import IdempotentCreateMixin
from ..api.serializers import JobCancelSerializer, JobSubmitSerializer, LogQuerySerializer
from ..models import Job, Queue
from ..scheduling.forecast import shown_estimate

FEDERATION_MANAGER_GROUP = "federation-managers"
PREFIX = "fed:"


def issue_service_token(user) -> str:
    """A new API token for the manager's service account on this worker, shown once: give it to the
    manager. Issued by the platform's token service (services/tokens.py: stored hashed, expires in one
    year)."""
    return services.issue_api_token(user, ttl=timedelta(days=365), purpose="federation manager")[0]


def make_service_account(username: str = "federation-manager"):
    """The manager's account on this worker: in FEDERATION_MANAGER_GROUP, no team, not staff, no password.
    Returns (user, a new token)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    user, _ = get_user_model().objects.get_or_create(username=username)
    user.set_unusable_password()
    user.save()
    user.groups.add(Group.objects.get_or_create(name=FEDERATION_MANAGER_GROUP)[0])
    return user, issue_service_token(user)


class IsFederationManager(BasePermission):
    """A member of FEDERATION_MANAGER_GROUP (the manager's service account) or a platform admin."""

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and (
            access.is_platform_admin(user) or user.groups.filter(name=FEDERATION_MANAGER_GROUP).exists()))


def _job_row(job: Job) -> dict:
    return {"id": job.pk, "external_id": job.external_id, "state": job.state, "name": job.name,
            "queue": job.queue.name if job.queue_id else None, "pending_reason": job.pending_reason,
            "started_at": job.started_at, "finished_at": job.finished_at,
            "estimated_start": shown_estimate(job)["estimated_start"]}  # the API's (new-user trial 26, F6)


def _fed_job(pk) -> Job:
    job = Job.objects.select_related("queue").filter(pk=pk, external_id__startswith=PREFIX).first()
    if job is None:
        raise NotFound(f"no federated job {pk}")
    return job


def submit_kwargs(d: dict) -> dict:
    """JobSubmitSerializer's validated data -> services.submit_job keywords (the jobs API's mapping)."""
    roles = [{k: v for k, v in r.items() if v is not None or k != "min_available"} for r in d["roles"]]
    return dict(queue=d["queue"], name=d["name"], roles=roles, priority=d["priority"], preemptible=d["preemptible"],
                interruptible=d["interruptible"], topology_mode=d["topology_mode"], highest_tier=d["highest_tier"], preferred_tier=d["preferred_tier"],
                time_limit_seconds=d["time_limit_seconds"], command=d["command"], env=d["env"],
                working_dir=d["working_dir"], image=d["image"], max_restarts=d["max_restarts"],
                completion_role=d["completion_role"], external_id=d["external_id"], numa=d["numa"],
                subgroups=[dict(g) for g in d["subgroups"] or ()], migratable=d["migratable"],
                min_run_before_move_seconds=d["min_run_before_move_seconds"],
                checkpoint_grace_seconds=d["checkpoint_grace_seconds"])


class WorkerFederationViewSet(IdempotentCreateMixin, viewsets.ViewSet):
    """The manager's endpoints on a worker (module docstring)."""

    permission_classes = [IsFederationManager]
    lookup_value_regex = r"[0-9]{1,18}"

    @extend_schema(request=JobSubmitSerializer, responses={201: OpenApiTypes.OBJECT})
    def create(self, request):
        """Create the federated copy (external_id "fed:<id>:g<generation>" required). 400 names the field."""
        body = JobSubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        if not d["external_id"].startswith(PREFIX):
            raise services.ValidationError({"external_id": "a federated copy's external_id starts with 'fed:'"})
        queue = Queue.objects.filter(name=d["queue"]).select_related("team").first()
        if queue is None or queue.team is None:
            raise services.ValidationError({"queue": f"no team queue {d['queue']!r} on this cluster"})
        with transaction.atomic():
            job = services.submit_job(team=queue.team, submitter=request.user, **submit_kwargs(d))
        return Response(_job_row(Job.objects.select_related("queue").get(pk=job.pk)), status=status.HTTP_201_CREATED)

    @extend_schema(parameters=[OpenApiParameter("external_id", OpenApiTypes.STR, required=True)],
                   responses={200: {"type": "array", "items": {"type": "object"}}})
    def list(self, request):
        """The federated copies with `?external_id=` (exact)."""
        ext = request.query_params.get("external_id", "")
        if not ext.startswith(PREFIX):
            raise services.ValidationError({"external_id": "give the copy's external_id (fed:<id>:g<generation>)"})
        return Response([_job_row(j) for j in Job.objects.select_related("queue").filter(external_id=ext)])

    @extend_schema(request=None, responses={200: OpenApiTypes.OBJECT, 409: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"])
    def withdraw(self, request, pk=None):
        """Cancel the copy only while it is pending: 200 {"withdrawn": true}; 409 {"state": ...} once started."""
        with transaction.atomic():
            job = _fed_job(pk)
            state = Job.objects.select_for_update(no_key=True).filter(pk=job.pk).values_list("state", flat=True).first()
            if state == Job.State.CANCELLED:  # already withdrawn (a retried request): the same answer
                return Response({"withdrawn": True, "state": state})
            if state != Job.State.PENDING:
                return Response({"withdrawn": False, "state": [f"the job is {state}: only a pending copy is withdrawn"]},
                                status=status.HTTP_409_CONFLICT)
            services.cancel_job(job, actor=request.user, reason="withdrawn by the federation manager")
        return Response({"withdrawn": True, "state": Job.State.CANCELLED})

    @extend_schema(request=JobCancelSerializer, responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Stop the copy (pending or running). A copy that already ended answers as it is."""
        body = JobCancelSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        job = _fed_job(pk)
        if job.state not in Job.FINAL_STATES:
            with transaction.atomic():
                try:
                    services.cancel_job(job, actor=request.user, reason=body.validated_data["reason"])
                except services.ValidationError:
                    pass  # ended or ending meanwhile: answer its state
        return Response(_job_row(Job.objects.select_related("queue").get(pk=job.pk)))

    @extend_schema(parameters=[LogQuerySerializer], responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["get"])
    def logs(self, request, pk=None):
        """The copy's task logs, as GET /api/v1/jobs/<id>/logs/ answers them (the manager proxies them)."""
        from ..api.views.jobs import read_job_log

        return Response(read_job_log(_fed_job(pk), request.query_params))

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def summary(self, request):  # routed by urls.py as member/summary/
        """This cluster's state for the manager's sync (scheduler.core.federation.summarize) and its copies."""
        from gpuplatform import clock
        from gpuplatform.scheduling.store import build_snapshot
        from scheduler.core.federation import summarize

        now = clock.now()
        snapshot, _ = build_snapshot(now.timestamp())
        out = summarize(snapshot)
        since = timezone.now() - timedelta(days=1)
        out["jobs"] = [{"id": pk, "external_id": ext, "state": st} for pk, ext, st in
                       Job.objects.filter(Q(finished_at__isnull=True) | Q(finished_at__gte=since),
                                          external_id__startswith=PREFIX).values_list("id", "external_id", "state")]
        out["time"] = now.isoformat()
        return Response(out)


class WorkerForecastView(APIView):
    """POST {"queue", "tasks", "gpus_per_task", ...} (a what-if `submit`): {"start_s": seconds from now the
    forecast starts it, or null, "reason"}. Reads only."""

    permission_classes = [IsFederationManager]

    @extend_schema(request=OpenApiTypes.OBJECT, responses={200: OpenApiTypes.OBJECT})
    def post(self, request):
        from gpuplatform import clock
        from gpuplatform.scheduling.forecast import _engine_kwargs, build_estimator, estimate_fn
        from gpuplatform.scheduling.store import build_snapshot
        from scheduler.forecast.whatif import WhatIfError, what_if

        from gpuplatform.api.views.forecast import ChangeSerializer

        data = request.data if isinstance(request.data, dict) else {}
        ser = ChangeSerializer(data={**data, "kind": "submit", "id": "federation-probe"})
        ser.is_valid(raise_exception=True)  # the what-if API's own rules: unknown or wrong fields -> 400
        change = dict(ser.validated_data)
        now = clock.now().timestamp()
        snapshot, _ = build_snapshot(now)
        estimate, _ = estimate_fn(snapshot, build_estimator())
        try:
            out = what_if(snapshot, [change], estimate, **_engine_kwargs())
        except (WhatIfError, KeyError, TypeError, ValueError) as exc:
            field = getattr(exc, "field", "queue")
            raise services.ValidationError({field: getattr(exc, "message", str(exc))}) from exc
        f = out.after.get("federation-probe")
        start = None if f is None or f.start is None else max(0.0, f.start - now)
        return Response({"start_s": start, "reason": (f.reason if f is not None else "no estimate") or ""})
