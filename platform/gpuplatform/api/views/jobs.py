import logging
import re

from django.db import DatabaseError
from django.db.models import Prefetch
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.generics import get_object_or_404
from rest_framework.response import Response
from rest_framework.throttling import UserRateThrottle

from ... import access, clock, execution, queries, services
from ...inputs import blank_params, whole_number
from ...models import Job, JobRole, Membership, Queue, Task
from ...services.base import unknown_queue
from ..filters import JobFilterSet
from ..idempotency import IdempotentCreateMixin
from ..pagination import KeysetPagination
from ..permissions import JobPermission
from ..serializers import (
    JobCancelSerializer, JobSerializer, JobSubmitSerializer, JobUpdateSerializer, LogQuerySerializer,
)
from .base import atomic

log = logging.getLogger("gpuplatform.api.jobs")


class JobSubmitThrottle(UserRateThrottle):
    """Job submissions per user (rate: REST_FRAMEWORK DEFAULT_THROTTLE_RATES["job-submit"])."""

    scope = "job-submit"


TASK_BRACKETS = re.compile(r"^(.+)\[([0-9]+)\]$")  # worker[1]: how failed_task and a diagnosis name a task


def read_job_log(job: Job, params) -> dict:
    """The logs answer for `job` from the query `params` (LogQuerySerializer: task, attempt, offset, limit);
    also what a federation worker serves its manager (federation/worker_api.py). Raises ValidationError
    naming `task` or `attempt`."""
    # Any of them sent empty is refused, as every query parameter is (inputs.EMPTY_MESSAGE; InputGuardMiddleware
    # answers it first), not read as left out: `?task=$T` with T unset read the first task's log (new-user trial 19,
    # F17), `?offset=$O` the log from its start (trial 20, F2). Numbers in ASCII digits (QueryIntegerField).
    empty = blank_params(params) if hasattr(params, "getlist") else {}
    if empty:
        raise services.ValidationError({name: messages[0] for name, messages in empty.items()})
    q = LogQuerySerializer(data=params)
    q.is_valid(raise_exception=True)
    d = q.validated_data
    tasks = Task.objects.filter(job=job).select_related("role").order_by("role_id", "index")
    key = d["task"].strip()
    if not key:
        task = tasks.first()
    elif whole_number(key) is not None:
        task = tasks.filter(pk=whole_number(key)).first() if len(key) < 19 else None
    else:
        # role-index (the tasks list's `name`, worker-1) or role[index] (the job's failed_task and diagnosis.task,
        # worker[1]): the same task, so either spelling a job shows finds it (new-user trial 13, F8)
        bracketed = TASK_BRACKETS.match(key)
        role, _, index = (bracketed.group(1), "", bracketed.group(2)) if bracketed else key.rpartition("-")
        number = whole_number(index)
        task = tasks.filter(role__name=role, index=number).first() if number is not None and len(index) < 10 else None
    if task is None:
        raise services.ValidationError({"task": f"job {job.pk} has no task {key!r} (give its id, role-index or "
                                                f"role[index], e.g. worker-0 or worker[0])"})
    if d["attempt"] is not None and d["attempt"] > job.attempts:
        raise services.ValidationError({"attempt": f"job {job.pk} has had attempts 0 to {job.attempts} only"})
    return execution.read_log(task, attempt=d["attempt"], offset=d["offset"], limit=d["limit"])


# the response header with the cluster's clock (JobViewSet.finalize_response; gpuctl reads it)
CLUSTER_TIME_HEADER = "X-Cluster-Time"


class JobViewSet(IdempotentCreateMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Jobs (gangs of one or more roles). You see your teams' jobs only (platform admins: all). Members and
    team admins submit and cancel their team's jobs; team admins change priorities. A pending job shows why
    it waits (`pending_reason`), its `position` in its queue and, when known, an `estimated_start`."""

    serializer_class = JobSerializer
    permission_classes = [JobPermission]
    filterset_class = JobFilterSet
    ordering_fields = ["submitted_at", "priority", "state", "name", "id"]
    pagination_class = KeysetPagination  # cursor pages: each job once while jobs are submitted
    keyset_ordering = ["-submitted_at", "-id"]

    # On a federation manager (FEDERATION_ROLE = "manager", which has no nodes) this endpoint is the
    # federation's front door: submit, list, read, cancel and logs act on FederatedJobs exactly as
    # /api/v1/federation/jobs/ does (same service, same validation, same Idempotency-Key handling).
    def _federated(self, action: str):
        from ...federation.api import FederatedJobViewSet

        view = FederatedJobViewSet(request=self.request, args=self.args, kwargs=self.kwargs,
                                   format_kwarg=getattr(self, "format_kwarg", None), action=action)
        view.headers = {}
        return view

    def finalize_response(self, request, response, *args, **kwargs):
        """Every answer carries the cluster's clock (CLUSTER_TIME_HEADER, ISO 8601): a pending job's estimated start
        counted from it reads as the pages count it (clock.now()), so gpuctl and the jobs page agree between two
        forecasts (new-user re-check 24, R1: gpuctl counted from the forecast's time, `estimated_at`, and showed
        "in about 60 s" for 25 s while the page counted down)."""
        response = super().finalize_response(request, response, *args, **kwargs)
        response[CLUSTER_TIME_HEADER] = clock.now().isoformat()
        return response

    def list(self, request, *args, **kwargs):
        from ...federation.manager import is_manager

        if is_manager():
            return self._federated("list").list(request, *args, **kwargs)
        return super().list(request, *args, **kwargs)

    def retrieve(self, request, *args, **kwargs):
        from ...federation.manager import is_manager

        if is_manager():
            return self._federated("retrieve").retrieve(request, *args, **kwargs)
        return super().retrieve(request, *args, **kwargs)

    def get_throttles(self):
        return [JobSubmitThrottle()] if self.action == "create" else super().get_throttles()

    def get_queryset(self):
        return (access.visible_jobs(self.request.user)
                .select_related("team", "queue", "submitter")
                .prefetch_related(Prefetch("roles", queryset=JobRole.objects.order_by("id")),
                                  Prefetch("tasks", queryset=Task.objects.select_related("node", "role")
                                           .order_by("role_id", "index")
                                           .only("id", "job_id", "node__name", "role__name", "index", "state", "pid",
                                                 "started_at", "ended_at", "exit_code", "exit_signal",
                                                 "end_message")),
                                  "attempt_records")
                .annotate(position=queries.pending_queue_position())
                .order_by("-submitted_at", "-id"))

    def _job_data(self, pk: int) -> dict:
        """The job as it is now (after a change), in the list's shape."""
        return JobSerializer(self.get_queryset().get(pk=pk)).data

    def _team_for(self, user, team, queue_name: str):
        """The team a submission is for: the body's, else the queue's, else the user's only submit-team."""
        if team is not None:
            return team
        queue = Queue.objects.filter(name=queue_name).select_related("team").first()
        if queue is None:
            raise services.ValidationError({"queue": unknown_queue(queue_name)})
        if queue.team is not None:
            return queue.team
        mine = list(Membership.objects.filter(user=user, role__in=access.SUBMIT_ROLES).select_related("team")[:2])
        if len(mine) == 1:
            return mine[0].team
        raise services.ValidationError({"team": "name the team (slug) this job is for"})

    @extend_schema(request=JobSubmitSerializer, responses={201: JobSerializer})
    def create(self, request):
        """Submit a job (send `Idempotency-Key` to make a retry safe). Refused with 400 naming the field: unknown / closed / non-leaf / other team's
        queue, bad role shape (tasks < 1, min_available above tasks, no GPU and no CPU), unknown tier,
        or a job that can never fit this cluster. On a federation manager: submitted to the federation
        (answer: the FederatedJob, as POST /api/v1/federation/jobs/)."""
        from ...federation.manager import is_manager

        if is_manager():
            from ...federation.api import submit_response

            return submit_response(request)
        body = JobSubmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        team = self._team_for(request.user, d["team"], d["queue"])
        if not access.can_submit(request.user, team.pk):
            raise PermissionDenied("only members and admins of the team (or platform admins) may submit its jobs")
        roles = [{k: v for k, v in r.items() if v is not None or k != "min_available"} for r in d["roles"]]
        with atomic():
            job = services.submit_job(team=team, queue=d["queue"], name=d["name"], roles=roles, priority=d["priority"],
                                      preemptible=d["preemptible"], interruptible=d["interruptible"],
                                      topology_mode=d["topology_mode"],
                                      highest_tier=d["highest_tier"], preferred_tier=d["preferred_tier"],
                                      time_limit_seconds=d["time_limit_seconds"], submitter=request.user,
                                      command=d["command"], env=d["env"], working_dir=d["working_dir"],
                                      image=d["image"], max_restarts=d["max_restarts"],
                                      completion_role=d["completion_role"], external_id=d["external_id"],
                                      numa=d["numa"], subgroups=[dict(g) for g in d["subgroups"] or ()],
                                      migratable=d["migratable"],
                                      min_run_before_move_seconds=d["min_run_before_move_seconds"],
                                      checkpoint_grace_seconds=d["checkpoint_grace_seconds"])
        try:
            data = self._job_data(job.pk)
        except DatabaseError:
            # Committed, but re-reading it failed (the database went away just now): answer from what was
            # committed rather than a 500 that would make the client submit it again.
            log.warning("job %s committed; re-reading it failed", job.pk, exc_info=True)
            data = {"id": job.pk, "name": job.name, "team": team.slug, "queue": d["queue"], "state": job.state,
                    "submitted_at": job.submitted_at, "detail": "submitted; the full record is not readable right now"}
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=JobUpdateSerializer, responses={200: JobSerializer})
    def partial_update(self, request, pk=None):
        """Change the job's priority (team admins and platform admins). On a federation manager: a 400 on
        `priority` (a federated job's priority is given at submission; its copy runs at it on its member), not the
        404 "No Job matches" for a job GET had just shown (new-user trial 17, F15)."""
        from ...federation.manager import is_manager

        if is_manager():
            self._federated("retrieve").get_object()  # 404 for a job the user may not see, as GET
            raise services.ValidationError({"priority": "a federated job's priority is set at submission and cannot "
                                                        "be changed at the manager (cancel it and submit it again)"})
        # The job as GET finds it (404 for one the user may not see), then the body, then JobPermission (the team's
        # admins or platform admins): a body that is no priority change ({"name": ...}, a priority that is not a
        # whole number in range) is the same 400 for a member as for an admin, and the 403 is for a valid priority
        # change the user may not make (new-user trial 24, F7: a member's unknown field was that 403)
        job = get_object_or_404(self.filter_queryset(self.get_queryset()),
                                **{self.lookup_field: self.kwargs[self.lookup_url_kwarg or self.lookup_field]})
        body = JobUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        self.check_object_permissions(request, job)
        services.set_job_priority(job, body.validated_data["priority"], actor=request.user)
        return Response(self._job_data(job.pk))

    @extend_schema(request=JobCancelSerializer, responses={200: JobSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel a pending or running job; its GPUs are released. 400 (field `state`) if it already ended.
        On a federation manager: cancels the FederatedJob (and its worker's copy)."""
        from ...federation.manager import is_manager

        if is_manager():
            return self._federated("cancel").cancel(request, pk=pk)
        job = self.get_object()
        body = JobCancelSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.cancel_job(job, actor=request.user, reason=body.validated_data["reason"])
        return Response(self._job_data(job.pk))

    @extend_schema(parameters=[LogQuerySerializer], responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["get"], filterset_class=None, pagination_class=None)
    def logs(self, request, pk=None):
        """A task's combined stdout/stderr as its node agent sent it: at most 64 KiB from byte `offset`
        (`next_offset` continues), of `attempt` (default: the current one). Kept per task attempt: 1 MiB
        (TASK_LOG_MAX_BYTES), oldest output trimmed first (`trimmed`). `complete` once the task has ended
        and everything stored was served; `state` is the task's state now (`pending`: not placed yet, no log
        to expect). With nothing stored, `note` says why (not started yet, no output yet, or no process runs
        the task: a simulated job or node) and `expect_output` is false when nothing will ever come.
        400 naming `task` for a task the job does not have.
        On a federation manager: the FederatedJob's logs, proxied from its worker."""
        from ...federation.manager import is_manager

        if is_manager():
            return self._federated("logs").logs(request, pk=pk)
        return Response(read_job_log(self.get_object(), request.query_params))
