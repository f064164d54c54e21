"""Every write of the platform (Zulip-style actions): plain functions, one transaction each, audited.

Each function validates first and raises `ValidationError` (a dict field -> rule broken) before writing
anything; any exception rolls the whole call back. Each writes one or more `Event` rows; side effects
(asking for a scheduling cycle) run only after commit. Views, the API, the admin, importers and tasks call
these and never `.save()` models themselves. Units: GPUs, millicores, MiB, seconds.

Cluster loading lives in `cluster_loader.py` and is re-exported here as `load_cluster_spec`.
"""
from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from . import clock, fit_check, quota_rules
from .audit import record_event
from .errors import ValidationError
from .job_rules import check_job
from .models import Allocation, Domain, Event, Job, JobRole, Membership, Node, Queue, Quota, Task, Team


def _raise_if(errors: dict[str, str]) -> None:
    if errors:
        raise ValidationError(errors)


def request_cycle_on_commit() -> None:
    """Ask for a scheduling cycle once the current transaction commits (never blocks or fails it)."""
    def _go() -> None:
        from .scheduling.tasks import request_cycle

        request_cycle()

    transaction.on_commit(_go)


# --- teams --------------------------------------------------------------------------------------------

@transaction.atomic
def create_team(name: str, *, slug: str | None = None, description: str = "", actor=None) -> Team:
    """Create a team. Raises ValidationError: name empty or taken, slug taken."""
    slug = slug or slugify(name)
    errors = {}
    if not name.strip():
        errors["name"] = "name must not be empty"
    elif Team.objects.filter(name=name).exists():
        errors["name"] = f"a team named {name!r} already exists"
    if not slug or Team.objects.filter(slug=slug).exists():
        errors["slug"] = f"slug {slug!r} is empty or taken"
    _raise_if(errors)
    team = Team.objects.create(name=name, slug=slug, description=description)
    record_event("team_created", f"team {name} created", actor=actor, data={"team": name})
    return team


@transaction.atomic
def add_member(team: Team, user, role: str = "member", *, actor=None) -> Membership:
    """Add `user` to `team` with `role` (member | admin | viewer), or change the role of an existing member."""
    _raise_if({} if role in Membership.Role.values else {"role": f"role must be one of {Membership.Role.values}"})
    membership, _ = Membership.objects.update_or_create(user=user, team=team, defaults={"role": role})
    record_event("member_added", f"{user} is {role} of {team.name}", actor=actor,
                 data={"team": team.name, "user": str(user), "role": role})
    return membership


# --- queues and quotas --------------------------------------------------------------------------------

def _resolve_queue(value, field: str) -> Queue | None:
    if value is None or isinstance(value, Queue):
        return value
    found = Queue.objects.filter(name=value).first() if isinstance(value, str) else Queue.objects.filter(pk=value).first()
    if found is None:
        raise ValidationError({field: f"unknown queue {value!r}"})
    return found


@transaction.atomic
def create_queue(name: str, parent=None, team: Team | None = None, weight: float = 1, quotas=None, *,
                 state: str = "open", actor=None) -> Queue:
    """Create a queue under `parent` (Queue, name or id; None = a root) with quotas
    {flavor: (guarantee, quota, limit or None)} in GPUs.

    Raises ValidationError: name empty/taken ("name"), unknown parent ("parent"), weight <= 0 ("weight"),
    bad state, quota rules per flavor ("quotas[<flavor>].<guarantee|quota|limit>"): negative,
    guarantee > quota, quota > limit, limit above the parent's limit, children's quotas above the parent's.
    """
    parent = _resolve_queue(parent, "parent")
    errors: dict[str, str] = {}
    if not name or not name.strip():
        errors["name"] = "name must not be empty"
    elif Queue.objects.filter(name=name).exists():
        errors["name"] = f"a queue named {name!r} already exists"
    if not isinstance(weight, (int, float)) or weight <= 0:
        errors["weight"] = "weight must be a positive number"
    if state not in Queue.State.values:
        errors["state"] = f"state must be one of {Queue.State.values}"
    if parent is not None and Job.objects.filter(queue=parent).exists():
        errors["parent"] = (f"queue {parent.name} has jobs: a queue that runs jobs cannot get child queues "
                            f"(its jobs would sit on an inner queue)")
    for flavor, triple in (quotas or {}).items():
        prefix = f"quotas[{flavor}]."
        if not isinstance(triple, (tuple, list)) or len(triple) != 3:
            errors[f"quotas[{flavor}]"] = "expected (guarantee, quota, limit)"
            continue
        bad = quota_rules.check_triple(prefix, *triple)
        if not bad:
            bad = quota_rules.check_against_tree(None, parent.pk if parent else None, flavor, triple[1], triple[2], prefix)
        errors.update(bad)
    _raise_if(errors)
    queue = Queue.objects.create(name=name, parent=parent, team=team, weight=weight, state=state)
    Quota.objects.bulk_create([Quota(queue=queue, flavor=f, guarantee=g, quota=q, limit=lim)
                               for f, (g, q, lim) in (quotas or {}).items()])
    record_event("queue_created", f"queue {name} created", actor=actor, queue=queue,
                 data={"parent": parent.name if parent else None, "team": team.name if team else None,
                       "weight": weight, "quotas": {f: list(t) for f, t in (quotas or {}).items()}})
    return queue


@transaction.atomic
def update_queue(queue: Queue, *, parent=..., weight: float | None = None, state: str | None = None,
                 actor=None) -> Queue:
    """Change a queue's parent (`...` = keep; None = make it a root), weight or state (open | closed | draining).
    Raises ValidationError: unknown parent, a parent change that makes a cycle ("parent"), weight <= 0,
    unknown state."""
    errors: dict[str, str] = {}
    changes: dict = {}
    if parent is not ...:
        parent = _resolve_queue(parent, "parent")
        if parent is not None and quota_rules.makes_cycle(queue.pk, parent.pk):
            errors["parent"] = f"making {parent.name} the parent of {queue.name} would create a cycle"
        elif parent is not None and Job.objects.filter(queue=parent).exists():
            errors["parent"] = f"queue {parent.name} has jobs: a queue that runs jobs cannot get child queues"
        changes["parent"] = parent.name if parent else None
    if weight is not None:
        if weight <= 0:
            errors["weight"] = "weight must be a positive number"
        changes["weight"] = weight
    if state is not None:
        if state not in Queue.State.values:
            errors["state"] = f"state must be one of {Queue.State.values}"
        changes["state"] = state
    _raise_if(errors)
    if parent is not ...:
        queue.parent = parent
    if weight is not None:
        queue.weight = weight
    if state is not None:
        queue.state = state
    queue.save()
    record_event("queue_updated", f"queue {queue.name} updated", actor=actor, queue=queue, data=changes)
    return queue


@transaction.atomic
def set_quota(queue: Queue, flavor: str, guarantee: int, quota: int, limit: int | None, actor=None) -> Quota:
    """Create or change `queue`'s quota for GPU `flavor` (GPUs). Raises ValidationError naming
    guarantee / quota / limit: negative, guarantee > quota, quota > limit, limit above the parent's,
    siblings' quotas summing above the parent's, quota below the children's sum, limit below a child's."""
    errors = {} if flavor else {"flavor": "flavor must not be empty"}
    errors.update(quota_rules.check_triple("", guarantee, quota, limit))
    if not errors:
        errors.update(quota_rules.check_against_tree(queue.pk, queue.parent_id, flavor, quota, limit))
    _raise_if(errors)
    old = Quota.objects.filter(queue=queue, flavor=flavor).values_list("guarantee", "quota", "limit").first()
    row, _ = Quota.objects.update_or_create(queue=queue, flavor=flavor,
                                            defaults={"guarantee": guarantee, "quota": quota, "limit": limit})
    record_event("quota_changed", f"quota of {queue.name}/{flavor}: {guarantee}/{quota}/{limit}", actor=actor,
                 queue=queue, data={"flavor": flavor, "old": list(old) if old else None,
                                    "new": [guarantee, quota, limit]})
    request_cycle_on_commit()
    return row


# --- jobs ---------------------------------------------------------------------------------------------

@transaction.atomic
def submit_job(*, team: Team, queue, name: str, roles: list[dict], priority: int = 0, preemptible: bool = True,
               topology_mode: str = "none", highest_tier: int | None = None, preferred_tier: int | None = None,
               time_limit_seconds: int | None = None, duration_seconds: float | None = None, submitter=None,
               submitted_at: datetime | None = None, external_id: str = "", command=None, env: dict | None = None,
               working_dir: str = "", image: str = "", max_restarts: int = 0, completion_role: str = "") -> Job:
    """Create a pending Job with its JobRoles and Task rows and ask for a scheduling cycle after commit.

    roles: [{name, tasks, gpus_per_task, cpu_milli, memory_mib, min_available (default tasks), flavor,
    command, env, working_dir, image}]; flavor is "H100" or "H100|A100" (blank = any). What the tasks run
    (docs/execution.md): `command` (argv list, or a string split with shlex), `env` {NAME: value},
    `working_dir` and `image` for the whole job, a role's own overriding them; `max_restarts` (restarts
    after a task failure), `completion_role` (blank = every role must exit 0). A job needs a command unless
    it is a replayed trace job (`duration_seconds` given): then it runs on the simulated clock and is
    `simulated`. Raises ValidationError naming the field: no command ("command", "roles[i].command"), bad
    env names or values ("env.NAME"), an image with no container runtime on any node ("image"), unknown,
    closed or draining queue, not a leaf queue, queue of another team; tasks < 1; gpus_per_task < 0;
    no GPU and no CPU request; min_available outside 1..tasks; duplicate role names; bad topology_mode;
    preferred_tier above highest_tier; a tier no domain of this cluster has ("no such tier in this cluster").
    A job that can never fit this cluster (the engine's own Capacity rule, fit_check.py) is refused
    ("roles"); one that fits the cluster but not its queue's limit is accepted and marked never_fits
    by the cycle. Bounds (job_rules.py): at most 4,096 tasks, 64 GPUs per task, priority within int32.
    """
    queue = _resolve_queue(queue, "queue")
    if queue is None:
        raise ValidationError({"queue": "queue is required"})
    tiers = set(Domain.objects.values_list("tier", flat=True).distinct())
    has_children = Queue.objects.filter(parent=queue).exists()
    roles = check_job(team=team, queue=queue, queue_has_children=has_children, name=name, roles=roles,
                      priority=priority, topology_mode=topology_mode, highest_tier=highest_tier,
                      preferred_tier=preferred_tier, time_limit_seconds=time_limit_seconds,
                      duration_seconds=duration_seconds, tiers=tiers, error_class=ValidationError,
                      command=command, env=env, working_dir=working_dir, image=image, max_restarts=max_restarts,
                      completion_role=completion_role or "",
                      container_runtimes=set(Node.objects.exclude(container_runtime="")
                                             .values_list("container_runtime", flat=True).distinct()))
    why = fit_check.never_fits(roles, topology_mode=topology_mode, highest_tier=highest_tier)
    if why:
        raise ValidationError({"roles": why if why.startswith("can never fit") else f"can never fit this cluster: {why}"})
    now = submitted_at or clock.now()
    job = Job.objects.create(team=team, queue=queue, submitter=submitter, name=name, external_id=external_id,
                             priority=priority, preemptible=preemptible, topology_mode=topology_mode,
                             highest_tier=highest_tier, preferred_tier=preferred_tier,
                             time_limit_seconds=time_limit_seconds, duration_seconds=duration_seconds,
                             simulated=not any(r["command"] for r in roles), max_restarts=max_restarts,
                             completion_role=completion_role or "",
                             submitted_at=now, pending_reason="waiting for the next scheduling cycle")
    role_rows = JobRole.objects.bulk_create([JobRole(job=job, **r) for r in roles])
    if any(r.pk is None for r in role_rows):  # backends without RETURNING
        role_rows = list(JobRole.objects.filter(job=job).order_by("id"))
    Task.objects.bulk_create([Task(job=job, role=r, index=i) for r in role_rows for i in range(r.tasks)])
    gpus = sum(r["tasks"] * r["gpus_per_task"] for r in roles)
    record_event("submitted", f"{name} submitted to {queue.name}: {gpus} GPUs", actor=submitter, job=job,
                 queue=queue, time=now, data={"roles": [{k: v for k, v in r.items() if k != "env"} for r in roles],
                                               "env_names": sorted({k for r in roles for k in r["env"]}),
                                               "max_restarts": max_restarts, "priority": priority, "gpus": gpus,
                                               "topology": [topology_mode, highest_tier, preferred_tier]})
    request_cycle_on_commit()
    return job


def _end_job(job: Job, state: str, at: datetime, actor, kind: str, message: str, task_state: str,
             reason: str = "") -> Job:
    from .lifecycle import end_job

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
    its GPUs released at once. Raises ValidationError("state") if the job already finished or is
    already ending. The job's state is read from the database (locked), never taken from `job`, which may
    be stale: a job that started since it was loaded must still get its stop."""
    from .execution import stop_job

    at = at or clock.now()
    text = f"{job.name} cancelled" + (f": {reason}" if reason else "")
    current = Job.objects.select_for_update().filter(pk=job.pk).values_list("state", flat=True).first()
    if current in (Job.State.ADMITTED, Job.State.RUNNING, Job.State.PREEMPTING) and not job.simulated:
        if stop_job(job.pk, at=at, target="cancelled", reason=text, kind="cancelled", actor=actor):
            job.refresh_from_db()
            request_cycle_on_commit()
            return job
        job.refresh_from_db()
        if job.state == Job.State.PREEMPTING:
            raise ValidationError({"state": f"job is already stopping (it ends as {job.stop_target})"})
    return _end_job(job, Job.State.CANCELLED, at, actor, "cancelled", text, Task.State.RELEASED)


@transaction.atomic
def finish_job(job: Job, state: str = "succeeded", at: datetime | None = None, *, actor=None) -> Job:
    """Mark a job succeeded or failed at `at` (default now) and release its GPUs (Allocation.released_at).
    Raises ValidationError: state not succeeded|failed ("state"), job not pending/running ("state")."""
    if state not in (Job.State.SUCCEEDED, Job.State.FAILED):
        raise ValidationError({"state": "state must be succeeded or failed"})
    task_state = Task.State.SUCCEEDED if state == Job.State.SUCCEEDED else Task.State.FAILED
    return _end_job(job, state, at or clock.now(), actor, state, f"{job.name} {state}", task_state)


# --- nodes --------------------------------------------------------------------------------------------

def _set_node_state(node: Node, state: str, allowed_from: tuple[str, ...], kind: str, actor, reason: str) -> Node:
    old = Node.objects.filter(pk=node.pk).values_list("state", flat=True).first()
    if old not in allowed_from:
        raise ValidationError({"state": f"node {node.name} is {old}; cannot {kind}"})
    Node.objects.filter(pk=node.pk).update(state=state)
    node.state = state
    record_event(kind, f"{node.name}: {old} -> {state}" + (f" ({reason})" if reason else ""), actor=actor,
                 node=node, data={"from": old, "to": state, "reason": reason})
    request_cycle_on_commit()
    return node


@transaction.atomic
def cordon_node(node: Node, *, actor=None, reason: str = "") -> Node:
    """Stop new work landing on a ready node; running work continues. Raises ValidationError("state")."""
    return _set_node_state(node, Node.State.CORDONED, (Node.State.READY,), "cordoned", actor, reason)


@transaction.atomic
def drain_node(node: Node, *, actor=None, reason: str = "", at: datetime | None = None) -> Node:
    """Mark a node draining (no new work) and evict every running gang with a task on it gracefully: it
    goes preempting with its queue's grace, then is requeued whole (lifecycle.py). The node stays
    unschedulable until uncordoned. Raises ValidationError("state") for a not_ready node."""
    from .lifecycle import evict_jobs_on_nodes

    node = _set_node_state(node, Node.State.DRAINING, (Node.State.READY, Node.State.CORDONED), "drained",
                           actor, reason)
    evict_jobs_on_nodes([node.pk], at=at or clock.now(), kind="evicted", actor=actor,
                        reason=f"node {node.name} is draining" + (f" ({reason})" if reason else ""))
    return node


@transaction.atomic
def uncordon_node(node: Node, *, actor=None, reason: str = "") -> Node:
    """Return a cordoned or draining node to ready. Raises ValidationError("state") otherwise."""
    return _set_node_state(node, Node.State.READY, (Node.State.CORDONED, Node.State.DRAINING), "uncordoned",
                           actor, reason)


from .cluster_loader import load_cluster_spec  # noqa: E402,F401  (re-export)


# --- API additions: membership removal and job priority -----------------------------------------------

@transaction.atomic
def remove_member(membership: Membership, *, actor=None) -> None:
    """Remove a user from a team. Their jobs stay (they belong to the team)."""
    team, user, role = membership.team, membership.user, membership.role
    Membership.objects.filter(pk=membership.pk).delete()
    record_event("member_removed", f"{user} is no longer {role} of {team.name}", actor=actor,
                 data={"team": team.name, "user": str(user), "role": role})


@transaction.atomic
def set_job_priority(job: Job, priority: int, *, actor=None) -> Job:
    """Change a pending or live job's priority (the order inside its queue; preemption uses it).
    Raises ValidationError: priority not a whole number ("priority"), job finished ("state")."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise ValidationError({"priority": "priority must be a whole number"})
    old = job.priority
    if not Job.objects.filter(pk=job.pk).exclude(state__in=Job.FINAL_STATES).update(
            priority=priority, updated_at=timezone.now()):
        raise ValidationError({"state": f"job is {job.state}; a finished job's priority cannot change"})
    record_event("priority_changed", f"{job.name}: priority {old} -> {priority}", actor=actor, job=job,
                 queue=job.queue, data={"old": old, "new": priority})
    job.refresh_from_db()
    request_cycle_on_commit()
    return job


# --- queue deletion and task reports ----------------------------------------------------------------------

@transaction.atomic
def delete_queue(queue: Queue, *, actor=None) -> None:
    """Delete an empty leaf queue and its quotas. Raises ValidationError naming the rule: the queue has
    child queues ("children"), or jobs ("jobs": live or pending ones must finish or be cancelled first;
    finished ones keep the queue for the record: close it instead)."""
    errors: dict[str, str] = {}
    children = list(Queue.objects.filter(parent=queue).values_list("name", flat=True)[:5])
    if children:
        errors["children"] = f"queue {queue.name} has child queues ({', '.join(children)}); delete or move them first"
    live = Job.objects.filter(queue=queue).exclude(state__in=Job.FINAL_STATES).count()
    done = Job.objects.filter(queue=queue, state__in=Job.FINAL_STATES).count()
    if live:
        errors["jobs"] = (f"queue {queue.name} has {live} pending or running job(s); cancel them or let them "
                          f"finish first (close the queue to stop new submissions)")
    elif done:
        errors["jobs"] = (f"queue {queue.name} has {done} finished job(s) whose history refers to it; "
                          f"close the queue instead of deleting it")
    _raise_if(errors)
    name = queue.name
    record_event("queue_deleted", f"queue {name} deleted", actor=actor,
                 data={"queue": name, "parent": queue.parent.name if queue.parent_id else None})
    Quota.objects.filter(queue=queue).delete()
    queue.delete()
    request_cycle_on_commit()


from .lifecycle import report_task_running  # noqa: E402,F401  (re-export: a node reports a task running)
