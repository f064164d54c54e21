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

Its GPUs stay held until its last process on a node agent has exited (reports.py) or the deadline has
passed (the release step, `expire_stops`), whichever comes first: node agents SIGTERM the processes at
once and SIGKILL them at the deadline. A job with no live task on a node agent (simulated jobs, tasks all
ended) skips the wait. Functions run inside the caller's transaction; each is a compare-and-set that
returns False and changes nothing when the job is no longer where it expected.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import F, Q
from django.utils import timezone

from ..audit import record_event
from ..lifecycle import end_job, requeue_job
from ..models import Job, Node, Task

__all__ = ["STOP_TARGETS", "live_agent_tasks", "has_agent_tasks", "stop_job", "finalize_stop", "expire_stops",
           "enforce_time_limits"]

STOP_TARGETS = ("requeue", "restart", "cancelled", "failed", "succeeded")
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
    says: requeued, restarted (with backoff), or ended with its GPUs released. False when not preempting."""
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
        Job.objects.filter(pk=job_id).update(restarts=F("restarts") + 1, end_reason=reason[:300])
        return requeue_job(job_id, at=at, kind="restarted", backoff=True, from_states=(Job.State.PREEMPTING,),
                           reason=f"restart {restarts + 1} of {max_restarts}: {reason}", cycle=cycle,
                           data={"restarts": restarts + 1, "max_restarts": max_restarts})
    state = FINAL_TARGETS[target]
    return end_job(job_id, state, at=at, kind=state if state != Job.State.CANCELLED else "cancelled",
                   message=f"{name} {state}: {reason}" if reason else f"{name} {state}", reason=reason,
                   task_state=Task.State.RELEASED, cycle=cycle, from_states=(Job.State.PREEMPTING,))


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
