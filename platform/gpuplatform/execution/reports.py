"""What a node agent reports about a task's process (docs/execution.md), applied to the job.

`report_task_event(node, task_id=, attempt=, event=, ...)` -> (accepted, detail). Events:

- "started": bound -> running (started_at, pid). The job goes admitted -> running when no task of its
  gang is still bound (lifecycle.report_task_running does that part). A repeat with the same pid is accepted and
  changes nothing; another start of a task not bound is refused, and its agent stops what it started.
- "exited" with exit_code (0-255) or signal: exit 0 -> the task succeeded; when every placed task of the
  completion role (default: all roles) has succeeded the job is stopped toward `succeeded` (its other
  roles get SIGTERM). Anything else -> the task failed, and a job not already stopping is stopped toward
  `restart` (restarts < max_restarts: requeued whole with backoff) or `failed`, naming the task and its
  exit code or signal (Job.failed_task / exit_code / exit_signal).
- "lost": the agent cannot tell how the process ended: a failure. Unless its `cause` says the platform ended it:
  "agent_exited" (AGENT_EXITED: the task's supervisor stopped it because the node agent it watched exited, an agent
  run with --stop-tasks-on-exit, e.g. the local demo's after a kill -9 of the demo; the next agent reports it) is a
  platform fault, as a lost node is: the gang is requeued whole through stops.stop_for_fault (kind
  requeued_after_failure, backoff, no restart spent; its survivors stopped first), the reason naming the node and
  that its agent exited ("agent exited on n0: ..."), the requeue Event's data {"cause": "agent_exited", "node": n0},
  the attempt diagnosed platform:agent_exited naming n0 (diagnosis.attempts.platform_cause reads that data); the
  task is `released` with the agent's message, not `failed` (trial 22, F5). A lost report without a cause (agents
  before the field) is a failure as before.
- A task of a job stopping toward `cancelled` (a user's cancel) that ends, however it ends, is `released`
  (its exit kept), not failed: the cancel stopped it.
- A task that fails while other tasks of its gang are still `bound` (never started) on a node that is not_ready
  or silent beyond HEARTBEAT_TIMEOUT_SECONDS (its agent stopped: frozen, killed, cut off) did not fail for its own
  sake: the gang could never have run (its ranks wait for the missing ones, then give up). That is the platform's
  fault, a lost node: the gang is requeued whole at once (kind requeued_after_failure, reason "node lost before the
  gang started: worker[2], worker[3] never started on n1 (...)", diagnosed platform:node_lost naming n1), without
  spending a restart, as failure detection does for a node lost under a running gang (new-user trial 19, F16: such
  a gang ended `failed`, diagnosed `unknown` on the healthy node).
- A gang broken by a fault (a failed task with restarts left, a lost node) is requeued once its processes on the
  healthy nodes have ended (stopped now, SIGKILL at the agents' stop grace), its tasks on lost nodes counted ended
  at once: its GPUs are not offered to another job while a process of it runs there (stops.stop_for_fault).

A stopping job whose last process on a node agent has ended is finalized at once (stops.finalize_stop),
so its GPUs are free for the next cycle without waiting for the deadline.

Every report carries the job's attempt: a report for another attempt, for a task not on this node, or a
repeat of one already applied is refused (accepted False, with the reason) and changes nothing (a "started" repeated
with the same pid is accepted, changing nothing). The end of a
task released with its job's end (its process outlived the job's stop deadline) is kept on the task once
(exit_code / exit_signal / end_message: the SIGKILL of a time limit or a cancel), nothing else changes.

Times are the server's (cluster) clock. A task's `ended_at` is when its process ended: an "exited" / "lost" report's
`node_time` (the API's `time`: the node's clock, epoch seconds, when the task's last process ended) moved onto the
server's clock by the node's measured offset (Node.clock_offset_seconds, node minus server, as the heartbeat
measures it and telemetry applies it: server = node - offset), then clamped: never after the report's arrival
(`at`), never before the task's start (started_at, else its attempt's binding). A node without a usable offset (None:
no heartbeat time, or one beyond NODE_CLOCK_MAX_OFFSET_SECONDS) has its time taken as it is when it lies within
NODE_CLOCK_MAX_OFFSET_SECONDS of the arrival, else the arrival counts (`task_end_time`). A report without a time (agents
before the field) ends the task at its arrival, as before. An agent reports late (its poll, a cut-off, a restart
that adopted the task): the end it says is kept, not the delay (session 27). When the task was the job's last process
on a node agent, the job ends (finished_at, its GPUs' released_at) at that end too; while other processes of the
gang live, what the report starts now (a failed gang's stop, its survivors' grace; a success's stop of the other
roles) counts from the arrival. When its job ended first (the stop's deadline passed: its GPUs were released then),
the task's `ended_at` is no later than the job's `finished_at`; a job finishes no earlier than the last of its tasks
ended (stops.finalize_stop), so finished_at >= every task's ended_at (new-user trial 26, F8).
"""
from __future__ import annotations

import math
import signal as _signal
from datetime import datetime, timedelta, timezone

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce

from .. import clock
from ..audit import record_event
from ..diagnosis.attempts import diagnose_now, refresh_attempt_exit, reuse_evidence
from ..lifecycle import release_tasks, report_task_running
from ..models import Job, Node, Task
from ..models.cluster import lost_node_q
from .stops import (_finalize_if_idle, end_lost_tasks, fault_grace_seconds, live_agent_tasks, stop_for_fault,
                    stop_job)

__all__ = ["EVENTS", "LOST_CAUSES", "AGENT_EXITED", "report_task_event", "describe_exit", "task_end_time"]

EVENTS = ("started", "exited", "lost")
AGENT_EXITED = "agent_exited"  # a lost task's supervisor stopped it because its node agent exited (module docstring)
LOST_CAUSES = (AGENT_EXITED,)  # the known causes a "lost" report may carry (its `cause`; "" = unknown)
# the stops whose tasks, however they end in the grace period, are released rather than failed: a cancel, an eviction,
# and the stop of a broken gang's survivors toward its restart or recovery
RELEASING_STOPS = ("cancelled", "requeue", "restart", "recover")


def describe_exit(exit_code: int | None, signal: int | None, message: str = "") -> str:
    """'exited with code 3', 'was killed by signal 9 (SIGKILL)', or 'was lost (<message>)'."""
    if signal is not None:
        try:
            name = _signal.Signals(signal).name
        except ValueError:
            name = "unknown"
        return f"was killed by signal {signal} ({name})"
    if exit_code is not None:
        return f"exited with code {exit_code}"
    return "was lost" + (f" ({message})" if message else "")


def task_end_time(node_time: float | None, *, offset: float | None, at: datetime,
                  start: datetime | None = None) -> datetime:
    """The server-clock time a task's process ended (module docstring): `node_time` (epoch seconds on the node's
    clock; None or not finite: `at`) minus the node's clock `offset` (node minus server); without an offset, the node's
    time as it is when within NODE_CLOCK_MAX_OFFSET_SECONDS of `at`, else `at`. Clamped to [start, at]."""
    from django.conf import settings

    if node_time is None or isinstance(node_time, bool) or not math.isfinite(node_time):
        return at
    if offset is not None and math.isfinite(offset):
        node_time -= offset
    else:
        bound = float(getattr(settings, "NODE_CLOCK_MAX_OFFSET_SECONDS", 366 * 86400))
        if abs(node_time - at.timestamp()) > bound:
            return at
    try:
        end = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=node_time)
    except OverflowError:
        return at
    end = min(end, at)
    if start is not None and start <= at:
        end = max(end, start)
    return end


def report_task_event(node, *, task_id: int, attempt: int, event: str, pid: int | None = None,
                      exit_code: int | None = None, signal: int | None = None, message: str = "",
                      cause: str = "", at: datetime | None = None, node_time: float | None = None,
                      actor=None) -> tuple[bool, str]:
    """Apply one report of `node`'s agent. Returns (accepted, detail); detail says why it was refused.
    `cause`: a lost report's known cause (LOST_CAUSES; "" unknown). `at`: its arrival (default: the cluster clock);
    `node_time`: an exited / lost report's time of the process's end on the node's clock (epoch seconds; None: not
    said, the arrival counts), see task_end_time. Raises ValueError for an unknown event or cause, or a cause on
    another event (the API validates before calling)."""
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}")
    if cause and (cause not in LOST_CAUSES or event != "lost"):
        raise ValueError(f"unknown cause {cause!r} of a {event!r} report")
    at = at or clock.now()
    message = (message or "").replace("\x00", "?")  # the agent's words, stored in text columns
    with transaction.atomic():
        job_id = Task.objects.filter(pk=task_id).values_list("job_id", flat=True).first()
        if job_id is None:
            return False, f"unknown task {task_id}"
        job = (Job.objects.select_for_update(no_key=True).filter(pk=job_id)
               .values("state", "attempts", "name", "restarts", "max_restarts", "completion_role", "stop_target",
                       "finished_at")
               .first())
        task = Task.objects.filter(pk=task_id).values("state", "node_id", "role__name", "index", "exit_code",
                                                      "exit_signal", "end_message", "started_at",
                                                      "job__bound_at").first()
        if job["attempts"] != attempt:
            return False, f"attempt {attempt} is over: the job is on attempt {job['attempts']}"
        if task["node_id"] != node.pk:
            return False, f"task {task_id} is not on node {node.name} in attempt {attempt}"
        label = f"{task['role__name']}[{task['index']}]"
        if event == "started":
            return _started(task_id, task, pid, at, actor)
        failed = event == "lost" or signal is not None or exit_code != 0
        # when the process ended (module docstring): the node's time on the server's clock, within [start, arrival]
        offset = (Node.objects.filter(pk=node.pk).values_list("clock_offset_seconds", flat=True).first()
                  if node_time is not None else None)
        end = task_end_time(node_time, offset=offset, at=at, start=task["started_at"] or task["job__bound_at"])
        how = describe_exit(exit_code, signal, message) if event == "exited" else describe_exit(None, None, message)
        if task["state"] not in Task.ON_NODE_STATES:
            # A task released with its job's end (a cancel, a time limit, a failed gang: the job ends at its stop
            # deadline) before its process was seen to end: the agent's report of how it ended (SIGKILL at the
            # deadline, exit 143 on SIGTERM) is kept on the task, once, and changes nothing else (new-user trial 13,
            # F19: such tasks showed exit_signal null and no end message).
            if (event in ("exited", "lost") and task["state"] == Task.State.RELEASED and task["exit_code"] is None
                    and task["exit_signal"] is None and not task["end_message"]):
                # ended_at: the job's end, when the platform counted it ended and released its GPUs (unless an
                # end set it before), never this later report's arrival: a task does not end after its job
                # (new-user trial 26, F8: finished_at 46.760, the task's SIGKILL report 46.918)
                seen = min(end, job["finished_at"]) if job["finished_at"] else end
                Task.objects.filter(pk=task_id).update(
                    exit_code=exit_code, exit_signal=signal, end_message=(message or how)[:200],
                    ended_at=Coalesce(F("ended_at"), Value(seen)))
                # the job and its attempt carry the same exit (a time limit's SIGKILL: trial 21, F12)
                refresh_attempt_exit(job_id, attempt)
                return True, ""
            return False, f"task {label} already ended ({task['state']})"
        if task["state"] == Task.State.RELEASING:  # an evicted surplus task has gone: its GPUs are free since its end
            release_tasks([task_id], at=end)
            return True, ""
        if cause == AGENT_EXITED:
            # stopped by its supervisor because its node agent exited: the platform's fault, not the task's failure
            # (diagnosed platform:agent_exited, the gang requeued without a restart spent): `released` with the
            # agent's words, as a lost node's tasks are (stops.end_lost_tasks), never `failed` (trial 22, F5)
            state, words = Task.State.RELEASED, message or how
        elif job["state"] == Job.State.PREEMPTING and (job["stop_target"] or "requeue") in RELEASING_STOPS:
            # A task stopped by its job's cancel or eviction (SIGTERM, exit 143, SIGKILL at the deadline) did not
            # fail: it is released, as the tasks the stop's end releases are (new-user trial 14, F11: it read
            # "failed"; an evicted gang's tasks still did). So is a survivor of a fault stopped toward a restart or a
            # recovery (trial 20, F10): the fault was another task's or its node's
            state, words = Task.State.RELEASED, message or how
        else:
            state, words = Task.State.FAILED if failed else Task.State.SUCCEEDED, message or how
        Task.objects.filter(pk=task_id).update(
            state=state, ended_at=end, exit_code=exit_code, exit_signal=signal, end_message=words[:200])
        # the job's step: at the task's end when it was the gang's last process on a node agent (the job ends then:
        # finished_at, its GPUs' release), else at the arrival (a stop of the survivors counts its grace from now)
        when = end if end != at and not live_agent_tasks(job_id).exists() else at
        with reuse_evidence():  # the failure's preview and the attempt's close read the evidence once
            if job["state"] in Job.ACTIVE_STATES:
                unstarted = _unstarted_on_lost_nodes(job_id, at) if failed and not cause else []
                if cause == AGENT_EXITED:
                    _requeue_for_agent_exit(job_id, job, task, label, node.name, message, when, actor)
                elif unstarted:
                    _requeue_for_lost_node(job_id, job, label, how, exit_code, signal, unstarted, at, actor)
                elif failed:
                    _fail_gang(job_id, job, label, how, exit_code, signal, when, actor)
                else:
                    _maybe_succeed(job_id, job, when, actor)
            _finalize_if_idle(job_id, at=when)
    return True, ""


def _started(task_id, task, pid, at, actor) -> tuple[bool, str]:
    """bound -> running. A repeat of the start already applied (the same supervisor pid: the agent sends it again when
    the answer was lost) is accepted and changes nothing; any other start of a task that is not bound is refused, and
    the agent then stops the processes it started (agent.runner: a second copy of the attempt must not run)."""
    if task["state"] != Task.State.BOUND:
        if (pid is not None and task["state"] in (Task.State.RUNNING, Task.State.RELEASING)
                and Task.objects.filter(pk=task_id, pid=pid).exists()):
            return True, "already started (a repeat)"
        return False, f"task is {task['state']}, not bound"
    report_task_running(Task.objects.get(pk=task_id), at=at, actor=actor)
    Task.objects.filter(pk=task_id).update(pid=pid)
    return True, ""


def _unstarted_on_lost_nodes(job_id, at: datetime) -> list[tuple]:
    """The job's tasks still bound (never started) on a node that is not_ready or whose last heartbeat is older than
    HEARTBEAT_TIMEOUT_SECONDS (its agent stopped reporting; failure detection has not run yet): (role, index, node
    name, node state, last heartbeat), by node. A node that never sent a heartbeat (not monitored) is not judged."""
    return list(Task.objects.filter(job_id=job_id, state=Task.State.BOUND).filter(lost_node_q(at, "node__"))
                .order_by("node__name", "role_id", "index")
                .values_list("role__name", "index", "node__name", "node__state", "node__last_heartbeat"))


def _requeue_for_lost_node(job_id, job, label, how, exit_code, signal, unstarted, at, actor) -> None:
    """A task failed while part of its gang never started on a lost node (module docstring): requeue the gang whole
    now, a platform fault (no restart spent), the reason naming the tasks that never started and their node."""
    by_node: dict[str, tuple[list[str], str, datetime | None]] = {}
    for role, index, node, state, last in unstarted:
        by_node.setdefault(node, ([], state, last))[0].append(f"{role}[{index}]")
    parts = []
    for node, (tasks, state, last) in by_node.items():
        since = f"no heartbeat since {last:%H:%M:%S}" if last else "no heartbeat"
        parts.append(f"{', '.join(tasks)} never started on {node} "
                     f"({'not ready' if state == Node.State.NOT_READY else 'silent'}, {since})")
    reason = f"node lost before the gang started: {'; '.join(parts)}; then task {label} {how}"
    record_event("task_failed", f"{job['name']}: task {label} {how} while {'; '.join(parts)}: a lost node, the "
                                "platform's fault; the gang is requeued whole (no restart spent)",
                 job_id=job_id, time=at, actor=actor,
                 data={"task": label, "exit_code": exit_code, "signal": signal, "restart": False,
                       "never_started": [[r, i, n] for r, i, n, _, _ in unstarted], "lost_nodes": sorted(by_node)})
    stop_for_fault(job_id, at=at, reason=reason, actor=actor,
                   data={"failed_tasks": [[r, i, n] for r, i, n, _, _ in unstarted], "cause": "node lost", "task": label})


def _requeue_for_agent_exit(job_id, job, task, label, node_name, message, at, actor) -> None:
    """A task was stopped because its node agent exited (a lost report with cause AGENT_EXITED, module docstring):
    the platform's fault, as a lost node is. The gang is requeued whole through stop_for_fault (its survivors stopped
    first, backoff, no restart spent); the requeue Event's data carries {"cause": AGENT_EXITED, "node"} and the
    attempt's diagnosis (platform:agent_exited) reads it from there, as platform:node_lost reads a lost node's."""
    reason = f"agent exited on {node_name}: its node agent exited while task {label} ran, and the task was stopped"
    record_event("task_failed", f"{job['name']}: task {label} was stopped on {node_name} because its node agent "
                                "exited (the agent runs with --stop-tasks-on-exit): the platform's fault; the gang is "
                                "requeued whole (no restart spent)",
                 job_id=job_id, time=at, actor=actor,
                 data={"task": label, "exit_code": None, "signal": None, "restart": False, "cause": AGENT_EXITED,
                       "node": node_name, "message": (message or "")[:300]})
    stop_for_fault(job_id, at=at, reason=reason, actor=actor,
                   data={"failed_tasks": [[task["role__name"], task["index"], node_name]], "cause": AGENT_EXITED,
                         "node": node_name, "task": label})


def _fail_gang(job_id, job, label, how, exit_code, signal, at, actor) -> None:
    """A task failed: stop the gang now (docs/diagnosis.md, fast recovery). With restarts left it is stopped toward
    `restart` with the agents' stop grace (stops.fault_grace_seconds): its other processes get SIGTERM now and
    SIGKILL at the deadline, and it is requeued whole (backoff counted from this failure) when the last of them
    has ended or at the deadline; until then it keeps its GPUs (trial 20, F10: it was requeued in this request, and
    its survivors' GPUs counted free for other jobs and for quota while their processes still ran). Without
    restarts the job is stopped toward `failed` with the queue's grace and keeps its GPUs likewise. Its tasks on a
    lost node are counted ended at once (stops.end_lost_tasks). A diagnosis whose action is `cancel_retries` (a
    deterministic user error) ends the job whatever restarts are left."""
    restart = job["restarts"] < job["max_restarts"]
    reason = f"task {label} {how}"
    Job.objects.filter(pk=job_id).update(failed_task=label, exit_code=exit_code, exit_signal=signal)
    cancelled_retries = None
    if restart:
        preview = diagnose_now(job_id, at=at)
        if preview.action == "cancel_retries":
            restart, cancelled_retries = False, preview
            reason = (f"{reason}; {preview.category}: retrying cannot help, restarts cancelled "
                      f"({preview.summary[:150]})")
    record_event("task_failed", f"{job['name']}: {reason}; the gang is stopped"
                 + (f" and restarted ({job['restarts'] + 1} of {job['max_restarts']})" if restart else ""),
                 job_id=job_id, time=at, actor=actor,
                 data={"task": label, "exit_code": exit_code, "signal": signal, "restart": restart,
                       "cancel_retries": cancelled_retries.rule if cancelled_retries else None})
    end_lost_tasks(job_id, at)
    stop_job(job_id, at=at, target="restart" if restart else "failed", kind="stopping", reason=reason, actor=actor,
             grace_seconds=fault_grace_seconds() if restart else None,
             data={"task": label, "exit_code": exit_code, "signal": signal})


def _maybe_succeed(job_id, job, at, actor) -> None:
    tasks = Task.objects.filter(job_id=job_id, node__isnull=False)
    if job["completion_role"]:
        tasks = tasks.filter(role__name=job["completion_role"])
    states = list(tasks.values_list("state", flat=True))
    if states and all(s == Task.State.SUCCEEDED for s in states):
        which = f"role {job['completion_role']}" if job["completion_role"] else "the job"
        stop_job(job_id, at=at, target="succeeded", kind="stopping", actor=actor,
                 reason=f"every task of {which} exited 0")
