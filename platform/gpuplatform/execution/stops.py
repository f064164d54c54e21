"""A gang stopped with a deadline, and what it ends as (docs/execution.md).

Cancel, a failing task, the success of the completion role and the time limit all reuse the preemption
path: the job goes `preempting` with `preempt_deadline` = now + grace (its queue's
`preemption_grace_seconds` unless given) and `stop_target` = what it becomes afterwards:

| stop_target | afterwards                                                       |
| ----------- | ---------------------------------------------------------------- |
| "" / requeue| pending whole, no backoff (preempt, reclaim, drain)              |
| restart     | pending whole with backoff, restarts + 1 (a task failed, restarts left) |
| cancelled   | cancelled                                                        |
| failed      | failed (a task failed with no restart left, or the time limit)   |
| succeeded   | succeeded (every task of the completion role exited 0)           |
| recover     | pending whole with backoff, no restart spent (a node or GPU lost under it; stop_for_fault) |

Its GPUs stay held until its last process on a node agent has exited (reports.py) or the deadline has
passed (the release step, `expire_stops`), whichever comes first: node agents SIGTERM the processes at
once and SIGKILL them at the deadline. A job with no live task on a node agent (simulated jobs, tasks all
ended) skips the wait. Functions run inside the caller's transaction; each is a compare-and-set that
returns False and changes nothing when the job is no longer where it expected.

A fault under a gang (a task failed with restarts left: target restart; a node or GPU lost under it, or a node lost
before it started: `stop_for_fault`, target recover) is such a stop too, started in the request that reports the
fault, with the agents' stop grace (AGENT_STOP_GRACE_SECONDS) as deadline (trial 20, F10: the gang was requeued at
once, and the GPUs of its survivors on the healthy nodes, whose processes the agents were still stopping, were
counted free for other jobs and for quota). Tasks on a lost node (not_ready, or silent beyond
HEARTBEAT_TIMEOUT_SECONDS: its agent cannot report) are counted ended at once (`end_lost_tasks`), so a gang with no
survivor elsewhere is requeued at once, as before. The requeue's backoff counts from the fault, so waiting for the
survivors does not lengthen the recovery unless they outlive the backoff. A job with no process on a node agent
(simulated nodes, the trace replay) is requeued at once exactly as before: nothing to wait for.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import F, Max, Q
from django.utils import timezone

from django.conf import settings

from ..audit import record_event
from ..lifecycle import end_job, lock_jobs, requeue_job
from ..models import Event, Job, Node, Task
from ..models.cluster import lost_node_q

__all__ = ["STOP_TARGETS", "live_agent_tasks", "has_agent_tasks", "stop_job", "finalize_stop", "expire_stops",
           "enforce_time_limits", "stop_for_fault", "end_lost_tasks", "fault_grace_seconds"]

STOP_TARGETS = ("requeue", "restart", "cancelled", "failed", "succeeded")  # stop_job's; "recover": stop_for_fault
FAULT_KIND = "requeued_after_failure"  # the requeue Event of a recover stop (diagnosis: platform_cause)
FINAL_TARGETS = {"cancelled": Job.State.CANCELLED, "failed": Job.State.FAILED, "succeeded": Job.State.SUCCEEDED}


def live_agent_tasks(job_id):
    """Tasks of `job_id` whose processes may still exist on a node agent (bound, running, releasing)."""
    return Task.objects.filter(job_id=job_id, state__in=Task.ON_NODE_STATES, node__executor__in=Node.PROCESS_EXECUTORS,
                               job__simulated=False)


def has_agent_tasks(job_id) -> bool:
    """Did this attempt of the job place any task on a node agent (live or ended)?"""
    return Task.objects.filter(job_id=job_id, node__executor__in=Node.PROCESS_EXECUTORS, job__simulated=False).exists()


def stop_job(job_id, *, at: datetime, target: str, reason: str, kind: str, grace_seconds: float | None = None,
             actor=None, cycle: int | None = None, data: dict | None = None) -> bool:
    """Stop a live gang so that it ends as `target` (STOP_TARGETS). admitted / running -> preempting until
    at + grace (queue's grace when None), or straight to the end when no process of it runs on a node agent.
    A job already preempting toward a requeue or restart is turned toward a final target (cancelled, failed,
    succeeded) keeping the earlier deadline, and ended at once when none of its processes is left on a node
    agent. Returns False when the job is in none of these states."""
    if target not in STOP_TARGETS:
        raise ValueError(f"unknown stop target {target!r}")
    row = (Job.objects.filter(pk=job_id).values_list("state", "stop_target", "preempt_deadline", "name",
                                                     "queue__preemption_grace_seconds").first())
    if row is None:
        return False
    state, old_target, old_deadline, name, queue_grace = row
    grace = float(queue_grace if grace_seconds is None else grace_seconds)
    deadline = at + timedelta(seconds=grace)
    payload = {"target": target, "reason": reason, "deadline": deadline.isoformat(), **(data or {})}
    if state == Job.State.PREEMPTING:
        if target not in FINAL_TARGETS or old_target in FINAL_TARGETS:
            return False
        deadline = min(deadline, old_deadline) if old_deadline else deadline
        Job.objects.filter(pk=job_id, state=state).update(stop_target=target, stop_reason=reason[:300],
                                                         preempt_deadline=deadline, updated_at=timezone.now())
        record_event(kind, f"{name}: stopping, ends {target} ({reason})", actor=actor, job_id=job_id, time=at,
                     cycle=cycle, data={**payload, "deadline": deadline.isoformat(), "was": old_target or "requeue"})
        if not live_agent_tasks(job_id).exists():  # no process left to wait for (simulated nodes, all exited)
            finalize_stop(job_id, at=at, cycle=cycle)
        return True
    if state not in Job.ACTIVE_STATES:
        return False
    if not live_agent_tasks(job_id).exists():
        Job.objects.filter(pk=job_id, state=state).update(
            state=Job.State.PREEMPTING, stop_target=target, stop_reason=reason[:300], preempt_deadline=at,
            updated_at=timezone.now())
        record_event(kind, f"{name}: {reason}", actor=actor, job_id=job_id, time=at, cycle=cycle,
                     data={**payload, "deadline": at.isoformat()})
        return finalize_stop(job_id, at=at, cycle=cycle)
    if not Job.objects.filter(pk=job_id, state=state).update(
            state=Job.State.PREEMPTING, stop_target=target, stop_reason=reason[:300], preempt_deadline=deadline,
            updated_at=timezone.now()):
        return False
    record_event(kind, f"{name}: stopping until {deadline:%H:%M:%S}, then {target} ({reason})", actor=actor,
                 job_id=job_id, time=at, cycle=cycle, data=payload)
    return True


def finalize_stop(job_id, *, at: datetime, cycle: int | None = None) -> bool:
    """A preempting job whose processes are gone (or whose deadline passed) becomes what its stop_target
    says: requeued, restarted (with backoff), or ended with its GPUs released (finished_at `at`, or the last of its
    tasks' ended_at when that is later). False when not preempting."""
    row = Job.objects.filter(pk=job_id, state=Job.State.PREEMPTING).values_list(
        "stop_target", "stop_reason", "name", "restarts", "max_restarts", "preempt_deadline").first()
    if row is None:
        return False
    target, reason, name, restarts, max_restarts, deadline = row
    target = target or "requeue"
    if target == "requeue":
        return requeue_job(job_id, at=at, kind="requeued", reason=f"{reason or 'preempted'}: {_how_stopped(deadline, at)}",
                           backoff=False, from_states=(Job.State.PREEMPTING,), cycle=cycle)
    if target == "restart":
        fault_at, _ = _fault_stop(job_id, target)
        Job.objects.filter(pk=job_id).update(restarts=F("restarts") + 1, end_reason=reason[:300])
        return requeue_job(job_id, at=at, kind="restarted", backoff=True, from_states=(Job.State.PREEMPTING,),
                           reason=f"restart {restarts + 1} of {max_restarts}: {reason}", cycle=cycle,
                           data={"restarts": restarts + 1, "max_restarts": max_restarts}, backoff_from=fault_at)
    if target == "recover":
        return _requeue_recovered(job_id, at=at, reason=reason, deadline=deadline, cycle=cycle)
    state = FINAL_TARGETS[target]
    # a job does not finish before its last task ended: a cycle's clock, read before its release step, can be
    # behind the arrival of a report committed since (reports.py; new-user trial 26, F8)
    last = Task.objects.filter(job_id=job_id).aggregate(last=Max("ended_at"))["last"]
    at = max(at, last) if last is not None else at
    return end_job(job_id, state, at=at, kind=state if state != Job.State.CANCELLED else "cancelled",
                   message=f"{name} {state}: {reason}" if reason else f"{name} {state}", reason=reason,
                   task_state=Task.State.RELEASED, cycle=cycle, from_states=(Job.State.PREEMPTING,))


def fault_grace_seconds() -> float:
    """The deadline of a fault's stop: the agents' own stop grace (what a task no longer listed gets), not the
    queue's preemption grace: the gang is broken, its survivors have nothing to finish."""
    return float(getattr(settings, "AGENT_STOP_GRACE_SECONDS", 30.0))


def end_lost_tasks(job_id, at: datetime) -> list[str]:
    """Count the job's live tasks on a node agent (live_agent_tasks: a simulated task is left as it is) on a lost node
    (not_ready, or silent beyond HEARTBEAT_TIMEOUT_SECONDS: models.cluster.lost_node_q) ended now: `released`,
    ended_at = at, end_message naming the node. Their agent cannot report how they end, and their GPUs are out of
    the pool with their node. Returns their labels (role[index])."""
    rows = list(live_agent_tasks(job_id).filter(lost_node_q(at, "node__"))
                .values_list("id", "role__name", "index", "node__name", "node__state", "node__last_heartbeat"))
    by_node: dict[tuple, list[int]] = {}
    for tid, _, _, node, state, last in rows:
        by_node.setdefault((node, state, last), []).append(tid)
    for (node, state, last), ids in by_node.items():
        since = f"no heartbeat since {last:%H:%M:%S}" if last else "no heartbeat"
        message = (f"node {node} lost ({'not ready' if state == Node.State.NOT_READY else 'silent'}, {since}): "
                   "its process cannot be reported, counted ended")
        Task.objects.filter(pk__in=ids, state__in=Task.ON_NODE_STATES).update(
            state=Task.State.RELEASED, ended_at=at, end_message=message[:200], release_deadline=None)
    return [f"{role}[{index}]" for _, role, index, _, _, _ in rows]


def _end_tasks_on_failed_gpus(job_id, at: datetime) -> None:
    """Count ended the job's live tasks whose every GPU is unhealthy (a fatal XID, a GPU lost to NVML): no GPU of
    theirs can be offered to another job, so there is nothing to wait for (their agent stops the process when it
    finds the task no longer listed). A task with a healthy GPU left is waited for."""
    from ..models import Allocation, Gpu

    live = Allocation.objects.filter(job_id=job_id, released_at__isnull=True,
                                     task_id__in=live_agent_tasks(job_id).values("id"))
    if not live.filter(gpu__health=Gpu.Health.UNHEALTHY).exists():
        return
    healthy = set(live.exclude(gpu__health=Gpu.Health.UNHEALTHY).values_list("task_id", flat=True))
    rows = {}
    for tid, index, why in live.filter(gpu__health=Gpu.Health.UNHEALTHY).values_list("task_id", "gpu__index",
                                                                                       "gpu__health_reason"):
        if tid not in healthy:
            rows.setdefault(tid, []).append((index, why))
    for tid, gpus in rows.items():
        message = (f"its GPU{'s' if len(gpus) > 1 else ''} {', '.join(str(i) for i, _ in sorted(gpus))} failed "
                   f"({gpus[0][1][:80] or 'unhealthy'}): counted ended")
        Task.objects.filter(pk=tid, state__in=Task.ON_NODE_STATES).update(
            state=Task.State.RELEASED, ended_at=at, end_message=message[:200], release_deadline=None)


def stop_for_fault(job_id, *, at: datetime, reason: str, data: dict | None = None, spare_for=(), node=None,
                   actor=None, cycle: int | None = None, kind: str = FAULT_KIND, end_unstarted: str = "") -> str:
    """A fault under the live gang `job_id` (a node or GPU lost under it, a node lost before it started, the gang
    start timeout): it is requeued whole (Event `kind`, default requeued_after_failure; backoff, no restart spent,
    `reason` and `data` on the requeue's Event), once no process of it is left on a node agent (module docstring).
    Tasks on lost nodes are counted ended first (end_lost_tasks), so are tasks whose every GPU is unhealthy (nothing of
    theirs can be offered to another job), and with `end_unstarted` (their end message) so are
    the tasks never reported started (the gang start timeout: a start the agent did make after this finds its task
    no longer listed and stops it, as before). Then:

    - nothing left to wait for (all its tasks were on lost nodes, simulated nodes): requeued now, and restarted at
      once on a hot spare replacing `spare_for` (node names) when one fits (scheduling.spares) -> "requeued";
    - survivors on healthy nodes: preempting with stop_target "recover" until now + fault_grace_seconds() (an
      eviction's later deadline is shortened to it); agents SIGTERM them now, SIGKILL at the deadline; the gang is
      requeued (and tried on a spare) when the last one ends or at the deadline -> "stopping";
    - a gang already stopping toward an end, a restart or a recovery ends as its stop says, when its last process
      is gone -> "ended" when that is now, else "stopping".

    "" when the job is not live (stale). Call inside a transaction."""
    lock_jobs([job_id])
    row = (Job.objects.filter(pk=job_id, state__in=Job.LIVE_STATES)
           .values_list("state", "stop_target", "preempt_deadline", "name", "queue_id").first())
    if row is None:
        return ""
    state, target, old_deadline, name, queue_id = row
    end_lost_tasks(job_id, at)
    _end_tasks_on_failed_gpus(job_id, at)
    if end_unstarted:
        live_agent_tasks(job_id).filter(state=Task.State.BOUND).update(
            state=Task.State.RELEASED, ended_at=at, end_message=end_unstarted[:200])
    waiting = live_agent_tasks(job_id).exists()
    if state == Job.State.PREEMPTING and (target or "requeue") != "requeue":
        if not waiting and finalize_stop(job_id, at=at, cycle=cycle):
            return "ended"
        return "stopping"
    spare_for = sorted(set(spare_for))
    if not waiting:
        from ..scheduling import spares  # scheduling imports execution: here, not at the top

        placement = spares.placement_of(job_id) if spare_for else None
        if not requeue_job(job_id, at=at, kind=kind, backoff=True, reason=reason, data=data, node=node,
                           actor=actor, cycle=cycle):
            return ""
        if placement:
            spares.restart_on_spare(job_id, placement, spare_for, at=at, actor=actor)
        return "requeued"
    deadline = at + timedelta(seconds=fault_grace_seconds())
    if old_deadline is not None and state == Job.State.PREEMPTING:
        deadline = min(deadline, old_deadline)
    if not Job.objects.filter(pk=job_id, state=state).update(
            state=Job.State.PREEMPTING, stop_target="recover", stop_reason=reason[:300], preempt_deadline=deadline,
            evicted_for=None, updated_at=timezone.now()):
        return ""
    survivors = sorted(f"{r}[{i}] on {n}" for r, i, n in live_agent_tasks(job_id).values_list(
        "role__name", "index", "node__name"))
    record_event("stopping", f"{name}: {reason}; its processes still running ({', '.join(survivors)[:200]}) are "
                             f"stopped until {deadline:%H:%M:%S}, then the gang is requeued whole",
                 actor=actor, job_id=job_id, queue_id=queue_id, node=node, time=at, cycle=cycle,
                 data={"target": "recover", "reason": reason, "deadline": deadline.isoformat(), "was": state,
                       "survivors": survivors, "requeue": data or {}, "spare_for": spare_for, "kind": kind})
    return "stopping"


def _fault_stop(job_id, target: str) -> tuple[datetime | None, dict]:
    """(time, data) of the `stopping` Event that began the job's current stop toward `target` (restart, recover):
    the fault's time, and what stop_for_fault kept for the requeue. (None, {}) when there is none."""
    since = Job.objects.filter(pk=job_id).values_list("bound_at", flat=True).first()
    events = Event.objects.filter(job_id=job_id, kind="stopping", data__target=target)
    if since is not None:
        events = events.filter(time__gte=since)
    found = events.order_by("-pk").values_list("time", "data").first()
    return found if found is not None else (None, {})


def _requeue_recovered(job_id, *, at: datetime, reason: str, deadline: datetime | None, cycle: int | None) -> bool:
    """The end of a recover stop: the gang's survivors have ended (or the deadline passed); requeue it whole as a
    failure (backoff from the fault) and try a hot spare for the nodes stop_for_fault named."""
    from ..scheduling import spares

    fault_at, info = _fault_stop(job_id, "recover")
    spare_for = list(info.get("spare_for") or [])
    placement = spares.placement_of(job_id) if spare_for else None
    if not requeue_job(job_id, at=at, kind=info.get("kind") or FAULT_KIND, backoff=True, backoff_from=fault_at,
                       reason=f"{reason or 'fault'}{_others_stopped(info.get('survivors') or [], deadline, at)}",
                       from_states=(Job.State.PREEMPTING,), cycle=cycle, data=info.get("requeue") or {}):
        return False
    if placement:
        spares.restart_on_spare(job_id, placement, spare_for, at=at)
    return True


def _others_stopped(survivors: list, deadline: datetime | None, at: datetime) -> str:
    """What happened to a faulted gang's other tasks, for the requeue's reason: they were stopped with it (and, at
    or after the deadline, those still running were killed). "" when it had none. New-user trial 22, G7: "its other
    processes: every task exited 30 s before its grace period ended" left a user asking which grace period."""
    if not survivors:
        return ""
    names = ", ".join(survivors)
    names = names if len(names) <= 120 else f"{len(survivors)} tasks"
    killed = "" if deadline is not None and at < deadline else "; those still running at the stop's deadline were killed"
    return f"; the job's other tasks ({names}) were stopped with it{killed}"


def _how_stopped(deadline: datetime | None, at: datetime) -> str:
    """How a stop ended, for the requeue's reason: before its deadline, every process had exited (the job's SIGTERM
    handler checkpointed and quit: new-user trial 19, F1, where that read "grace period over"); at or after it, the
    grace period ran out (node agents SIGKILL what is left then)."""
    if deadline is not None and at < deadline:
        left = (deadline - at).total_seconds()
        return f"every task exited {left:.0f} s before its grace period ended"
    return "grace period over"


def _finalize_if_idle(job_id, *, at: datetime, cycle: int | None = None) -> bool:
    """Finalize a preempting job at once when it ran on node agents and none of its processes is left."""
    if has_agent_tasks(job_id) and not live_agent_tasks(job_id).exists():
        return finalize_stop(job_id, at=at, cycle=cycle)
    return False


def expire_stops(clock: datetime, *, cycle: int | None = None) -> list:
    """Finalize every preempting job whose deadline has passed (or that has none), and every one that ran
    on node agents and whose processes have all exited. Returns the finalized job ids."""
    done = []
    due = (Job.objects.filter(state=Job.State.PREEMPTING)
           .filter(Q(preempt_deadline__lte=clock) | Q(preempt_deadline__isnull=True)).order_by("id")
           .values_list("id", flat=True))
    for job_id in list(due):
        if finalize_stop(job_id, at=clock, cycle=cycle):
            done.append(job_id)
    on_agents = set(Task.objects.filter(job__state=Job.State.PREEMPTING, job__simulated=False,
                                        node__executor__in=Node.PROCESS_EXECUTORS).values_list("job_id", flat=True))
    still_live = set(Task.objects.filter(job_id__in=on_agents, state__in=Task.ON_NODE_STATES,
                                         node__executor__in=Node.PROCESS_EXECUTORS).values_list("job_id", flat=True))
    for job_id in sorted(on_agents - still_live):
        if finalize_stop(job_id, at=clock, cycle=cycle):
            done.append(job_id)
    return done


def enforce_time_limits(clock: datetime, *, cycle: int | None = None) -> list:
    """Stop every admitted or running job that has run for its time_limit_seconds (counted from its start,
    or its binding while it is still starting): it ends `failed` with end_reason "time limit of N s reached ..." after its
    queue's grace period (SIGTERM now, SIGKILL at the deadline). Returns the stopped job ids."""
    stopped = []
    rows = (Job.objects.filter(state__in=Job.ACTIVE_STATES, time_limit_seconds__isnull=False)
            .order_by("id").values_list("id", "time_limit_seconds", "started_at", "bound_at"))
    for job_id, limit, started, bound in rows:
        since = started or bound
        if since is None or since + timedelta(seconds=limit) > clock:
            continue
        if stop_job(job_id, at=clock, target="failed", kind="time_limit", cycle=cycle,
                    reason=f"time limit of {limit} s reached (time_limit_seconds)", data={"time_limit_seconds": limit}):
            stopped.append(job_id)
    return stopped
