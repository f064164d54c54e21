"""Node and GPU failure handling (DESIGN: fault recovery), run periodically by `gpuplatform.scheduling.tasks` and by the
embedded loop before each cycle: `detect_failures(now)`.

1. A node whose last heartbeat is older than HEARTBEAT_TIMEOUT_SECONDS becomes not_ready (Event
   "node_not_ready"; the state it had is kept in `resume_state`, so a cordoned node comes back cordoned:
   gpuplatform/services/node_states.py).
   Its tasks keep their GPUs and their recorded placement: a short gap moves nothing. A heartbeat
   (services.record_heartbeat) brings it back.
2. A node silent longer than the heartbeat-loss health rule's threshold (diagnosis/health_rules.yaml:
   value "default" = HEARTBEAT_TIMEOUT_SECONDS + NODE_FAILURE_GRACE_SECONDS; an admin's stricter
   `heartbeat_lost_seconds` rule with action fail_tasks lowers it) has failed: the tasks on it fail and
   each of their gangs is requeued whole (all its GPUs released, original submit time, attempts + 1, backoff) as
   soon as none of its processes runs on a healthy node: the tasks on the failed node are counted ended at once,
   and survivors elsewhere are stopped now with the agents' stop grace, the gang preempting toward "recover" until
   the last one ends (execution.stop_for_fault; trial 20, F10: their GPUs were released while the processes ran).
   Event "node_failed" on the node, one "requeued_after_failure" per job. A gang already stopping toward an end
   or a restart (cancelled, a failed task, its completion role done, its time limit: gpuplatform.execution.stops)
   is not requeued: it ends (or restarts) as the stop says (a cancelled job never runs again) once its last
   process is gone.
   Heartbeat rules with another action act on a not_ready node past their threshold: record (an Event),
   cordon / drain (the node resumes cordoned / draining when it reports again).
3. A GPU reported unhealthy (uncorrectable ECC, fatal XID: see agent/inventory.py) under a live task
   fails that task the same way, as does one its node's registration holds out of service (Gpu.out_of_service:
   no longer listed, MIG layout changed under the job; the cause then reads "GPU out of service: ...").
   A gang requeued by (2) or (3) restarts at once on a hot spare when one fits (scheduling/spares.py), at its
   requeue (after its survivors' stop).
4. A draining node's running gangs are evicted gracefully (preempting with their queue's grace, then
   requeued whole by the release step); services.drain_node does the same at once, this catches races.

Nodes that never sent a heartbeat (last_heartbeat null: imported inventories, the demo) are not
monitored: the timeout never fails them. Returns a FailureReport of what changed.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from gpuplatform.audit import record_event
from gpuplatform.errors import ValidationError
from gpuplatform.execution.stops import stop_for_fault
from gpuplatform.lifecycle import evict_jobs_on_nodes, release_tasks
from gpuplatform.models import Allocation, Job, Node, Task
from gpuplatform.services import node_states

log = logging.getLogger("gpuplatform.scheduling.failures")
MONITORED_STATES = (Node.State.READY, Node.State.CORDONED, Node.State.DRAINING)


@dataclass
class FailureReport:
    not_ready: list[str] = field(default_factory=list)
    failed_nodes: list[str] = field(default_factory=list)
    requeued: list = field(default_factory=list)
    drained: list = field(default_factory=list)
    ended: list = field(default_factory=list)  # stopping gangs that ended (or restarted) as their stop said
    stopping: list = field(default_factory=list)  # gangs whose survivors on healthy nodes are stopped before the
    # requeue (execution.stop_for_fault), or a stop that waits for them


def _seconds(name: str, default: float) -> timedelta:
    return timedelta(seconds=float(getattr(settings, name, default)))


def heartbeat_rules() -> list[tuple[object, timedelta]]:
    """The health rules on `heartbeat_lost_seconds` (diagnosis/health_rules.yaml and admins' rows), each with
    its threshold: the rule's value in seconds, or for value "default" HEARTBEAT_TIMEOUT_SECONDS +
    NODE_FAILURE_GRACE_SECONDS (the shipped heartbeat-loss rule: the settings stay the knob)."""
    from gpuplatform.diagnosis import tables

    default = _seconds("HEARTBEAT_TIMEOUT_SECONDS", 60) + _seconds("NODE_FAILURE_GRACE_SECONDS", 120)
    _, rules = tables.health_rules()
    return [(r, default if r.value == "default" else timedelta(seconds=float(r.value)))
            for r in rules if r.signal == "heartbeat_lost_seconds"]


def detect_failures(now: datetime) -> FailureReport:
    report = FailureReport()
    timeout = _seconds("HEARTBEAT_TIMEOUT_SECONDS", 60)
    rules = heartbeat_rules()
    fail_after = min((t for r, t in rules if r.action == "fail_tasks"), default=None)
    with transaction.atomic():
        silent = Node.objects.filter(state__in=MONITORED_STATES, last_heartbeat__isnull=False,
                                     last_heartbeat__lt=now - timeout)
        for node in silent.only("id", "name", "state", "last_heartbeat"):
            last = node.last_heartbeat
            try:  # a compare-and-set on the heartbeat judged: one arriving meanwhile wins
                gone = node_states.transition(node, Node.State.NOT_READY, at=now, only_if={"last_heartbeat": last},
                                              reason=f"heartbeat missed: no heartbeat since {last:%Y-%m-%d %H:%M:%S} "
                                                     f"UTC (timeout {timeout.total_seconds():g} s)",
                                              data={"last_heartbeat": last.isoformat()})
            except ValidationError:  # its state changed meanwhile (e.g. another detector was first)
                gone = False
            if gone:
                report.not_ready.append(node.name)
        _other_heartbeat_actions(rules, now)

        failed = {}
        if fail_after is not None:
            failed = dict(Node.objects.filter(state=Node.State.NOT_READY, last_heartbeat__isnull=False,
                                              last_heartbeat__lte=now - fail_after).values_list("id", "name"))
        rule_ids = ", ".join(r.id for r, t in rules if r.action == "fail_tasks" and t == fail_after)
        on_failed = _live_tasks(node_id__in=list(failed))
        for node_id, name in sorted(failed.items()):
            jobs = sorted(jid for jid, tasks in on_failed.items() if any(t[3] == node_id for t in tasks))
            if jobs:
                report.failed_nodes.append(name)
                record_event("node_failed", f"{name}: silent beyond {fail_after.total_seconds():.0f} s (health rule "
                                            f"{rule_ids}); tasks of {len(jobs)} job(s) on it failed",
                             time=now, node_id=node_id, data={"jobs": jobs, "rule": rule_ids,
                                                              "threshold_seconds": fail_after.total_seconds()})
        _fail(on_failed, now, report, "node lost")

        # the cause as the GPU's health says: a fault the agent reported, or held out of service by the node's
        # registration (Gpu.out_of_service: a GPU it no longer lists, a MIG layout changed under the job: trial 17c,
        # G5, which read "GPU failed (ECC / XID)")
        bad_gpu_tasks = defaultdict(set)
        for task_id, why, held in Allocation.objects.filter(released_at__isnull=True, gpu__health="unhealthy") \
                .values_list("task_id", "gpu__health_reason", "gpu__out_of_service"):
            # (the agent's reason when it gave one, e.g. an NVML read that says the GPU is lost: trial 18e)
            cause = f"GPU out of service: {why}" if held else f"GPU failed ({why[:160] if why else 'ECC / XID'})"
            bad_gpu_tasks[cause].add(task_id)
        for cause, task_ids in sorted(bad_gpu_tasks.items()):
            _fail(_live_tasks(pk__in=list(task_ids)), now, report, cause)

        draining = list(Node.objects.filter(state=Node.State.DRAINING).values_list("id", flat=True))
        if draining:
            report.drained = evict_jobs_on_nodes(draining, at=now, kind="evicted",
                                                 reason="its node is draining; requeued whole after the grace period")
    if report.not_ready or report.requeued or report.drained or report.ended or report.stopping:
        log.info("failure detection: not_ready %s, failed %s, requeued %s, drained %s, stops ended %s, stopping %s",
                 report.not_ready, report.failed_nodes, report.requeued, report.drained, report.ended,
                 report.stopping)
    return report


def agent_exited(node_name: str, *, at: datetime, message: str = "", actor=None) -> FailureReport:
    """A node's agent is known to have exited (the local demo watches its agents' processes; each runs with
    --stop-tasks-on-exit, so its tasks' supervisors stop them with it): what heartbeat expiry does after
    HEARTBEAT_TIMEOUT_SECONDS + NODE_FAILURE_GRACE_SECONDS, done now, in one transaction. The node goes not_ready
    (node_states.transition: Event node_not_ready, reason "node agent exited: ..."; its next heartbeat, a new agent's
    registration, brings it back), an Event node_failed names the jobs with tasks on it, and each such gang is
    requeued whole through stops.stop_for_fault as a lost node's is (its tasks there counted ended at once, its
    survivors elsewhere stopped first; backoff, no restart spent), the requeue's reason and data those of an agent's
    own agent_exited report ("agent exited on n0: ...", {"cause": "agent_exited", "node": "n0"}: diagnosed
    platform:agent_exited). New-user trial 22, G8: the demo said the agent had exited, and the job stayed running
    in the API for 3.5 min, until the heartbeat timeout. A node already not_ready (or unknown, or not monitored)
    changes nothing: a second call, or heartbeat expiry after this one, writes nothing more."""
    report = FailureReport()
    with transaction.atomic():
        node = Node.objects.filter(name=node_name, state__in=MONITORED_STATES).only("id", "name", "state").first()
        if node is None:
            return report
        words = f"node agent exited ({message})" if message else "node agent exited"
        try:
            gone = node_states.transition(node, Node.State.NOT_READY, at=at, reason=words, actor=actor,
                                          data={"cause": "agent_exited"})
        except ValidationError:  # its state changed meanwhile
            gone = False
        if not gone:
            return report
        report.not_ready.append(node.name)
        on_node = _live_tasks(node_id=node.pk)
        if on_node:
            report.failed_nodes.append(node.name)
            record_event("node_failed", f"{node.name}: {words}; tasks of {len(on_node)} job(s) on it failed",
                         time=at, node_id=node.pk, actor=actor,
                         data={"jobs": sorted(on_node), "cause": "agent_exited"})
        for job_id, tasks in sorted(on_node.items()):
            if all(t[5] == Task.State.RELEASING for t in tasks):
                _fail({job_id: tasks}, at, report, "agent exited")
                continue
            labels = [f"{role}[{index}]" for _, role, index, _, _, _ in sorted(tasks, key=lambda t: (t[1], t[2]))]
            ran = (f"task {labels[0]} ran, and the task was stopped" if len(labels) == 1
                   else f"tasks {', '.join(labels)} ran, and they were stopped")
            outcome = stop_for_fault(
                job_id, at=at, actor=actor, spare_for=[node.name],
                reason=f"agent exited on {node.name}: its node agent exited while {ran}",
                data={"failed_tasks": [[role, index, node.name] for _, role, index, _, _, _ in tasks],
                      "cause": "agent_exited", "node": node.name, "task": labels[0]})
            {"requeued": report.requeued, "ended": report.ended, "stopping": report.stopping}.get(
                outcome, []).append(job_id)
    return report


def _other_heartbeat_actions(rules, now: datetime) -> None:
    """The heartbeat rules whose action is not fail_tasks, on each not_ready node silent beyond their
    threshold: a `health_rule` Event once per rule and silence (its last heartbeat), and cordon / drain set
    the state the node resumes when it reports again (it comes back out of service; a drain then stops its
    gangs with grace as services.drain_node does). record: the Event only."""
    from gpuplatform.models import Event

    for rule, threshold in rules:
        if rule.action == "fail_tasks":
            continue
        for node in Node.objects.filter(state=Node.State.NOT_READY, last_heartbeat__isnull=False,
                                        last_heartbeat__lte=now - threshold).only("id", "name", "last_heartbeat",
                                                                                  "resume_state"):
            key = f"{rule.id}:{node.last_heartbeat.isoformat()}"
            if Event.objects.filter(node_id=node.pk, kind="health_rule", data__key=key).exists():
                continue
            silence = (now - node.last_heartbeat).total_seconds()
            record_event("health_rule", f"{node.name}: heartbeat_lost_seconds={silence:.0f}: rule {rule.id} -> "
                                        f"{rule.action}", time=now, node_id=node.pk,
                         data={"key": key, "rule": rule.id, "signal": rule.signal, "value": round(silence, 1),
                               "action": rule.action, "category": rule.category, "source": rule.source})
            resume = {"cordon": Node.State.CORDONED, "drain": Node.State.DRAINING}.get(rule.action)
            if resume:
                node_states.set_resume_state(node.pk, resume, reason=f"health rule {rule.id}: silent {silence:.0f} s", at=now)


def _live_tasks(**where) -> dict[int, list[tuple]]:
    """Live tasks (bound, running, releasing) of live jobs matching `where`, by job id:
    (task id, role, index, node id, node name, state)."""
    out: dict[int, list[tuple]] = defaultdict(list)
    rows = (Task.objects.filter(job__state__in=Job.LIVE_STATES, state__in=Task.ON_NODE_STATES,
                                **where)
            .values_list("job_id", "id", "role__name", "index", "node_id", "node__name", "state"))
    for jid, tid, role, index, node_id, node_name, state in rows:
        out[jid].append((tid, role, index, node_id, node_name, state))
    return out


def _fail(tasks_by_job: dict, now: datetime, report: FailureReport, cause: str) -> None:
    """Requeue each job whole once none of its processes runs on a healthy node (execution.stop_for_fault: its
    tasks on lost nodes are counted ended, its survivors elsewhere stopped with the agents' stop grace; trial 20,
    F10); a job whose only affected tasks were already being released (evicted surplus) just loses those tasks
    now, the rest of its gang is unaffected. A gang already stopping toward an end or a restart ends as its stop
    says when its last process is gone."""
    for job_id, tasks in sorted(tasks_by_job.items()):
        if all(t[5] == Task.State.RELEASING for t in tasks):
            if release_tasks([t[0] for t in tasks], at=now):
                record_event("tasks_released", f"{len(tasks)} releasing task(s) lost ({cause}); GPUs released now",
                             time=now, job_id=job_id, data={"tasks": [[t[1], t[2], t[4]] for t in tasks], "cause": cause})
            continue
        failed = [[role, index, node] for _, role, index, _, node, _ in tasks]
        nodes = sorted({t[2] for t in failed})
        outcome = stop_for_fault(job_id, at=now, reason=f"{cause}: {len(tasks)} task(s) failed on {', '.join(nodes)}",
                                 data={"failed_tasks": failed, "cause": cause}, spare_for=nodes)
        lists = {"requeued": report.requeued, "ended": report.ended, "stopping": report.stopping}
        lists.get(outcome, []).append(job_id)
