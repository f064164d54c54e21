"""Jobs (models/workloads.py): submit, cancel, finish, change the priority. Binding, eviction and requeue
are the scheduling cycle's (gpuplatform/scheduling/), the shared job transitions lifecycle.py's and the
stops with a deadline execution/stops.py's."""
from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from .. import clock, fit_check, queries
from ..audit import record_event
from ..errors import ValidationError
from ..execution import stop_job
from ..gpu_request import gpu_equivalents, gpu_request, job_gpus
from ..job_rules import check_job, resolve_tier
from ..lifecycle import closed_ancestor, end_job
from ..models import Job, JobRole, Node, Queue, Task, Team
from ..names import control_character_error
from .base import lock_queue_tree, request_cycle_on_commit, resolve_queue
from ..wording import count

__all__ = ["submit_job", "cancel_job", "finish_job", "set_job_priority"]


def check_submit_priority(submitter, team: Team, priority) -> None:
    """A priority above 0 is a team admin's (or a platform admin's) to give, at submission as when changed
    later (api.permissions.JobPermission): a plain member submits at 0 or below, so resubmitting at a high
    priority cannot preempt a teammate's running gang that the member could not reprioritize. Jobs without a
    submitter (a replayed trace, the services' own callers) are not checked. Raises ValidationError naming
    "priority"."""
    from ..access import can_manage_team

    if submitter is None or not isinstance(priority, int) or priority <= 0:
        return
    if not can_manage_team(submitter, team.pk):
        raise ValidationError({"priority": f"a priority above 0 is given by a team admin of {team.name}; "
                                           f"members submit at priority 0 or lower (got {priority})"})


@transaction.atomic
def submit_job(*, team: Team, queue, name: str, roles: list[dict], priority: int = 0, preemptible: bool = True,
               topology_mode: str = "none", highest_tier: int | None = None, preferred_tier: int | None = None,
               time_limit_seconds: int | None = None, duration_seconds: float | None = None, submitter=None,
               submitted_at: datetime | None = None, external_id: str = "", command=None, env: dict | None = None,
               working_dir: str = "", image: str = "", max_restarts: int = 0, completion_role: str = "",
               warm_start: bool = False, numa: str = "prefer", subgroups: list[dict] | None = None,
               migratable: bool = False, min_run_before_move_seconds: int = 0,
               checkpoint_grace_seconds: int | None = None, interruptible: bool = False) -> Job:
    """Create a pending Job with its JobRoles and Task rows and ask for a scheduling cycle after commit.

    roles: [{name, tasks, gpus_per_task, cpu_milli, memory_mib, min_available (default tasks), flavor,
    command, env, working_dir, image}]; flavor is "H100" or "H100|A100" (blank = any). What the tasks run
    (docs/execution.md): `command` (argv list, or a string split with shlex), `env` {NAME: value},
    `working_dir` and `image` for the whole job, a role's own overriding them; `max_restarts` (restarts
    after a task failure), `completion_role` (blank = every role must exit 0). A job needs a command unless
    it is a replayed trace job (`duration_seconds` given): then it runs on the simulated clock and is
    `simulated`; `warm_start` marks a trace job already running when a replay began (left out of waits). Placement (DESIGN sections 4-5): `numa` "prefer" | "single" (every task's GPUs inside one
    NUMA node, or wait); a role's sub-group `group_size` + `group_highest_tier` (each group of that many
    tasks inside one domain of that tier; a role's `highest_tier` = one group of all its tasks; its
    `topology_mode` hard | soft), also given as the job's `subgroups` [{role, group_size,
    group_highest_tier, topology_mode}]; every tier may be a number or a name ("tier-2", "nvlink", "leaf",
    "spine"; job_rules.resolve_tier). Roles may name different flavors (a heterogeneous job). Raises ValidationError naming the field: no command ("command", "roles[i].command"), bad
    env names or values ("env.NAME"), an image with no container runtime on any node ("image"), unknown,
    closed or draining queue, not a leaf queue, queue of another team; tasks < 1; gpus_per_task < 0;
    no GPU and no CPU request; min_available outside 1..tasks; duplicate role names; bad topology_mode;
    preferred_tier above highest_tier; a tier no domain of this cluster has ("no such tier in this cluster").
    A job that can never fit this cluster (the engine's own Capacity rule, fit_check.py) is refused naming
    the field at fault ("roles[0].gpus_per_task", "roles[0].tasks", ...: fit_check.refusal_errors); one that fits the cluster but not its queue's limit is accepted and marked never_fits
    by the cycle. Bounds (job_rules.py): at most 4,096 tasks, 64 GPUs per task, priority within int32.
    Rescheduling (docs/rescheduling.md): `migratable` (the job checkpoints on SIGTERM and resumes when
    restarted: the scheduler may move it to defragment the cluster) after `min_run_before_move_seconds`
    (0..7 days) of running, with `checkpoint_grace_seconds` (1..1 day; None = the queue's grace period) to
    write its checkpoint; refused with ValidationError naming the field. `interruptible`: the job may be
    stopped at once, without a grace period, so it may also run on hot spares (docs/diagnosis.md, "Spare
    nodes"); it must be preemptible ("interruptible": must be true or false; not with preemptible false).
    Holds the queue tree's lock shared (lock_queue_tree): a close or move of its queue waits for it, or it for them.
    """
    bad_external_id = control_character_error("external_id", external_id)
    if bad_external_id:
        raise ValidationError({"external_id": bad_external_id})
    check_migration(migratable, min_run_before_move_seconds, checkpoint_grace_seconds, preemptible=preemptible)
    check_interruptible(interruptible, preemptible)
    check_submit_priority(submitter, team, priority)
    lock_queue_tree(shared=True)  # the queue's state and children read below stay so until this job is committed
    queue = resolve_queue(queue, "queue")
    if queue is None:
        raise ValidationError({"queue": "queue is required"})
    try:
        queue.refresh_from_db(fields=["state", "parent"])  # as of the lock (a close committed since it was loaded)
    except Queue.DoesNotExist:
        raise ValidationError({"queue": f"unknown queue {queue.name!r} (deleted)"}) from None
    tiers = queries.cluster_tiers()  # the engine's tiers: a domainless node is tier 1 (local mode: 1 and 2)
    has_children = Queue.objects.filter(parent=queue).exists()
    highest_tier, tier_errors = resolve_tier(highest_tier, "highest_tier")
    preferred_tier, preferred_errors = resolve_tier(preferred_tier, "preferred_tier")
    if tier_errors or preferred_errors:
        raise ValidationError({**tier_errors, **preferred_errors})
    given = roles
    roles = check_job(numa=numa, subgroups=subgroups, closed_ancestor=closed_ancestor(queue.pk), team=team, queue=queue, queue_has_children=has_children, name=name, roles=roles,
                      priority=priority, topology_mode=topology_mode, highest_tier=highest_tier,
                      preferred_tier=preferred_tier, time_limit_seconds=time_limit_seconds,
                      duration_seconds=duration_seconds, tiers=tiers, error_class=ValidationError,
                      command=command, env=env, working_dir=working_dir, image=image, max_restarts=max_restarts,
                      completion_role=completion_role or "",
                      container_runtimes=set(Node.objects.exclude(container_runtime="")
                                             .values_list("container_runtime", flat=True).distinct()))
    # keyed by the field at fault ("roles[0].gpus_per_task", "roles[1].cpu_milli", "highest_tier"; fit_check.refusal_errors)
    why = fit_check.refusal_errors(roles, topology_mode=topology_mode, highest_tier=highest_tier, numa=numa,
                                   subgroups=subgroups, given=given if isinstance(given, (list, tuple)) else None)
    if why:
        raise ValidationError(why)
    now = submitted_at or clock.now()
    job = Job.objects.create(team=team, queue=queue, submitter=submitter, name=name, external_id=external_id,
                             priority=priority, preemptible=preemptible, topology_mode=topology_mode,
                             highest_tier=highest_tier, preferred_tier=preferred_tier,
                             time_limit_seconds=time_limit_seconds, duration_seconds=duration_seconds, numa=numa,
                             simulated=not any(r["command"] for r in roles), max_restarts=max_restarts,
                             completion_role=completion_role or "", warm_start=bool(warm_start), migratable=migratable,
                             min_run_before_move_seconds=min_run_before_move_seconds,
                             checkpoint_grace_seconds=checkpoint_grace_seconds, interruptible=interruptible,
                             submitted_at=now, pending_reason="waiting for the next scheduling cycle")
    role_rows = JobRole.objects.bulk_create([JobRole(job=job, **r) for r in roles])
    if any(r.pk is None for r in role_rows):  # backends without RETURNING
        role_rows = list(JobRole.objects.filter(job=job).order_by("id"))
    Task.objects.bulk_create([Task(job=job, role=r, index=i) for r in role_rows for i in range(r.tasks)])
    # GPU-equivalents, as the API's `gpus` (2 x 0.5 = 1; a GPU-memory share at its share of the largest shared GPU)
    gpus = job_gpus(job) if any(r.gpu_memory_mib for r in role_rows) else gpu_equivalents(role_rows)
    request = gpu_request(role_rows)
    what = count(gpus, "GPU") if all(p.isdigit() for p in request.split("+")) else f"{gpus} GPU-equivalents ({request})"
    record_event("submitted", f"{name} submitted to {queue.name}: {what}", actor=submitter, job=job,
                 queue=queue, time=now, data={"roles": [{k: v for k, v in r.items() if k != "env"} for r in roles],
                                               "env_names": sorted({k for r in roles for k in r["env"]}),
                                               "max_restarts": max_restarts, "priority": priority, "gpus": gpus,
                                               "topology": [topology_mode, highest_tier, preferred_tier],
                                               "numa": numa,
                                               "migratable": [migratable, min_run_before_move_seconds,
                                                              checkpoint_grace_seconds]})
    request_cycle_on_commit()
    return job


MAX_MIN_RUN_BEFORE_MOVE = 7 * 86400  # seconds
MAX_CHECKPOINT_GRACE = 86400  # seconds


def check_migration(migratable, min_run_before_move_seconds, checkpoint_grace_seconds, *, preemptible=True) -> None:
    """The rescheduling fields' rules. Raises ValidationError naming each bad field: among them a migratable job
    that is not preemptible (the scheduler moves a job by preempting it: such a job was accepted and never moved;
    trial 16, F7)."""
    errors = {}
    if not isinstance(migratable, bool):
        errors["migratable"] = "migratable must be true or false"
    elif migratable and preemptible is False:
        errors["migratable"] = ("a migratable job must be preemptible: the scheduler moves a job by preempting it "
                                "(its checkpoint on SIGTERM, then a restart elsewhere), and preemptible=false keeps "
                                "it where it runs: drop preemptible=false or migratable=true")
    m = min_run_before_move_seconds
    if isinstance(m, bool) or not isinstance(m, int) or not 0 <= m <= MAX_MIN_RUN_BEFORE_MOVE:
        errors["min_run_before_move_seconds"] = (f"min_run_before_move_seconds must be a whole number of seconds "
                                                 f"from 0 to {MAX_MIN_RUN_BEFORE_MOVE}")
    g = checkpoint_grace_seconds
    if g is not None and (isinstance(g, bool) or not isinstance(g, int) or not 1 <= g <= MAX_CHECKPOINT_GRACE):
        errors["checkpoint_grace_seconds"] = (f"checkpoint_grace_seconds must be a whole number of seconds from 1 "
                                              f"to {MAX_CHECKPOINT_GRACE}, or null for the queue's grace period")
    if errors:
        raise ValidationError(errors)


def check_interruptible(interruptible, preemptible) -> None:
    """The `interruptible` field's rules: a boolean, and only on a preemptible job (a job stopped at once is
    also one that may be preempted). Raises ValidationError({"interruptible": ...})."""
    if not isinstance(interruptible, bool):
        raise ValidationError({"interruptible": "interruptible must be true or false"})
    if interruptible and preemptible is False:
        raise ValidationError({"interruptible": "an interruptible job (stopped at once, no grace) must be "
                                                "preemptible: drop preemptible=false or interruptible=true"})


def _end_job(job: Job, state: str, at: datetime, actor, kind: str, message: str, task_state: str,
             reason: str = "") -> Job:
    if not end_job(job.pk, state, at=at, kind=kind, message=message, reason=reason or message,
                   task_state=task_state, actor=actor):
        current = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first()
        raise ValidationError({"state": f"job is {current}, not pending or running"})
    job.refresh_from_db()
    request_cycle_on_commit()
    return job


@transaction.atomic
def cancel_job(job: Job, *, actor=None, reason: str = "", at: datetime | None = None) -> Job:
    """Cancel a pending or running job at `at` (default now). A job whose processes run on node agents is
    stopped with a deadline (execution.stop_job): preempting until its processes have exited or its
    queue's grace period is over, then cancelled with its GPUs released; any other job is cancelled and
    its GPUs released at once. A job already being cancelled (preempting toward cancelled) is returned as it
    is: a cancel repeated while the first one waits for the processes to exit is not an error and writes nothing.
    Raises ValidationError("state") if the job already finished or is already ending otherwise (failed,
    succeeded). The job's state is read from the database (locked), never taken from `job`, which may
    be stale: a job that started since it was loaded must still get its stop."""
    at = at or clock.now()
    # The stop's reason is the user's (or who asked), never "<name> cancelled: ..." again: the request is a
    # `cancel_requested` Event, the end one `cancelled` Event "<name> cancelled: <why>" (new-user report 7, F6:
    # one cancel wrote two `cancelled` Events reading "burst3 cancelled: burst3 cancelled: my reason").
    username = getattr(actor, "username", "") if actor is not None else ""
    why = reason or (f"requested by {username}" if username else "requested")
    text = f"{job.name} cancelled: {why}"
    current = Job.objects.select_for_update(no_key=True).filter(pk=job.pk).values_list("state", flat=True).first()
    if current in Job.LIVE_STATES and not job.simulated:
        if stop_job(job.pk, at=at, target="cancelled", reason=why, kind="cancel_requested", actor=actor):
            job.refresh_from_db()
            request_cycle_on_commit()
            return job
        job.refresh_from_db()
        if job.state == Job.State.PREEMPTING and job.stop_target == Job.State.CANCELLED:
            return job  # already being cancelled: the same request again changes nothing (no second Event)
        if job.state == Job.State.PREEMPTING:
            raise ValidationError({"state": f"job is already stopping (it ends as {job.stop_target})"})
    return _end_job(job, Job.State.CANCELLED, at, actor, "cancelled", text, Task.State.RELEASED, reason=why)


@transaction.atomic
def finish_job(job: Job, state: str = "succeeded", at: datetime | None = None, *, actor=None) -> Job:
    """Mark a job succeeded or failed at `at` (default now) and release its GPUs (Allocation.released_at).
    Raises ValidationError: state not succeeded|failed ("state"), job not pending/running ("state")."""
    if state not in (Job.State.SUCCEEDED, Job.State.FAILED):
        raise ValidationError({"state": "state must be succeeded or failed"})
    task_state = Task.State.SUCCEEDED if state == Job.State.SUCCEEDED else Task.State.FAILED
    return _end_job(job, state, at or clock.now(), actor, state, f"{job.name} {state}", task_state)


@transaction.atomic
def set_job_priority(job: Job, priority: int, *, actor=None) -> Job:
    """Change a pending or live job's priority (the order inside its queue; preemption uses it). The priority it
    already has writes nothing (no Event, no cycle). Raises ValidationError: priority not a whole number ("priority"), job finished ("state")."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise ValidationError({"priority": "priority must be a whole number"})
    # The read-modify-write under the job's row lock: the old priority (the audit trail's "from") and the state
    # are the row's as locked, not the caller's copy, so concurrent changes queue up and their events chain
    # (0 -> 3 -> 1 ...; new-user trial 10, F12: two transitions "from 0" were written), and a cancel that
    # committed first makes this "job is cancelled", never the stale "job is pending" (new-user trial 9, F5).
    row = Job.objects.select_for_update().filter(pk=job.pk).values_list("priority", "state").first()
    old, state = row if row else (job.priority, "gone")
    if state in Job.FINAL_STATES or row is None:
        job.state = state
        raise ValidationError({"state": f"job is {job.state}; a finished job's priority cannot change"})
    if old == priority:  # nothing changes: no write, no event, no cycle (as a quota set to its values; trial 16, F10)
        job.refresh_from_db()
        return job
    Job.objects.filter(pk=job.pk).update(priority=priority, updated_at=timezone.now())
    record_event("priority_changed", f"{job.name}: priority {old} -> {priority}", actor=actor, job=job,
                 queue=job.queue, data={"old": old, "new": priority})
    job.refresh_from_db()
    request_cycle_on_commit()
    return job
