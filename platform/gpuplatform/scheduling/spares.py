"""Hot spare nodes (DESIGN section 14, docs/diagnosis.md "Spare nodes"): a gang that lost a node restarts
on a spare at once, in the request that requeued it, without waiting in the queue.

The policy is the engine's (scheduler/core/spares.py), the same in the replay: an admin marks ready nodes
that run nothing or only interruptible jobs as spares (services.set_spare; Node.spare). The cycle places
only interruptible jobs (Job.interruptible: may be stopped at once) on a spare (NodeInfo.spare). When a
gang is requeued because a node failed (failure detection's node lost, a GPU failed under it, a health
rule's fail_tasks), its failure path calls `restart_on_spare(job_id, placement, failed_nodes, at=)` with the
placement it had; core.spares.plan_restart picks, for each failed node, a ready spare of the same flavor
with at least the GPU indices the gang used there, free or held only by interruptible jobs (a spare in the
same rack, the failed node's parent domain, first; an idle one before an occupied one); the nodes it keeps
must still be ready with those GPUs free. The occupants holding those GPUs are stopped at once (requeued
whole, no grace, no backoff: Event `stopped_for_spare` naming the gang and the failed node), and the gang is
bound there in the same transaction through the cycle's own bind (store._bind: the same Allocation rows,
task states and `admitted` Event). The spare then becomes an ordinary node and the failed node takes its
place in the pool (Node.spare set: once repaired and validated it waits as a spare), so the pool keeps its
size. Anything stale (a spare taken meanwhile, a GPU bound by a racing cycle) rolls back and leaves the
gang pending for the next cycle, as without spares.

The replay's model of the same policy (scheduler.sim.replay, spares=, interruptible=) measures what a spare
per rack buys in recovery time and costs in capacity (benchmarks/spare_nodes.py, RESULTS.md).
"""
from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Q

from gpuplatform.audit import record_event
from gpuplatform.models import Allocation, Gpu, Job, Node, Task
from scheduler.core.snapshot import JobInfo, NodeInfo, TaskPlacement
from scheduler.core.spares import SpareRestart, plan_restart

log = logging.getLogger("gpuplatform.scheduling.spares")

__all__ = ["placement_of", "restart_on_spare"]


def placement_of(job_id) -> list[tuple[str, int, str, tuple[int, ...]]]:
    """The live gang's placement: [(role, index, node name, GPU indices)], sorted (call before the requeue)."""
    rows: dict[tuple, list] = defaultdict(list)
    for role, index, node, gpu in Allocation.objects.filter(job_id=job_id, released_at__isnull=True).values_list(
            "task__role__name", "task__index", "gpu__node__name", "gpu__index"):
        rows[(role, index, node)].append(gpu)
    return sorted((r, i, n, tuple(sorted(g))) for (r, i, n), g in rows.items())


def _parent(node: Node) -> str | None:
    d = node.domain
    if d is None:
        return None
    return d.parent.name if d.tier == 1 and d.parent_id else d.name


def _plan(job_id, placement, failed_names) -> SpareRestart | None:
    """core.spares.plan_restart over the rows: the spares and the gang's nodes as NodeInfo (GPUs used by
    live allocations, unhealthy GPUs), the live jobs on the spares as JobInfo (a preempting one is not
    stopped again: it is being stopped already)."""
    names = {n for _, _, n, _ in placement}
    nodes = list(Node.objects.filter(Q(spare=True) | Q(name__in=names)).select_related("domain__parent"))
    ids = [n.pk for n in nodes]
    used, bad = defaultdict(set), defaultdict(set)
    holders: dict[int, list] = defaultdict(list)
    spare_ids = {n.pk for n in nodes if n.spare}
    for node_id, name, idx, jid in Allocation.objects.filter(gpu__node_id__in=ids, released_at__isnull=True) \
            .values_list("gpu__node_id", "gpu__node__name", "gpu__index", "job_id"):
        used[node_id].add(idx)
        if node_id in spare_ids:
            holders[jid].append(TaskPlacement("task", len(holders[jid]), name, (idx,)))
    # unhealthy as the platform acts on it: the agent's report, or fenced by an admin (services.set_gpu_fence)
    for node_id, idx in Gpu.objects.filter(~Gpu.usable(), node_id__in=ids).values_list("node_id", "index"):
        bad[node_id].add(idx)
    infos = [NodeInfo(name=n.name, flavor=n.flavor, gpus=n.gpu_count, state=n.state, spare=n.spare,
                      used=frozenset(used[n.pk]), unhealthy=frozenset(bad[n.pk])) for n in nodes]
    running = [JobInfo(id=jid, queue=queue, roles=(), placement=tuple(holders[jid]), state="running",
                       interruptible=interruptible and state in Job.ACTIVE_STATES)
               for jid, queue, interruptible, state in Job.objects.filter(pk__in=list(holders)).values_list(
                   "id", "queue__name", "interruptible", "state")]
    tasks = tuple(TaskPlacement(role, index, node, tuple(gpus)) for role, index, node, gpus in placement)
    return plan_restart(job_id, tasks, failed_names, infos, running, {n.name: _parent(n) for n in nodes})


def restart_on_spare(job_id, placement, failed_nodes, *, at: datetime, actor=None) -> list[str]:
    """Bind the requeued (pending) gang `job_id` at once on `placement` ([(role, index, node, gpus)], from
    placement_of before the requeue) with each of `failed_nodes` replaced by a spare, stopping at once the
    interruptible jobs holding the GPUs it needs there (module docstring). Returns the spares used ([] when
    none fits or the decision went stale: the gang stays pending and nothing was stopped)."""
    from gpuplatform.lifecycle import lock_jobs, requeue_job
    from gpuplatform.scheduling.store import _bind, _Stale

    failed_names = sorted({n for _, _, n, _ in placement} & set(failed_nodes))
    if not failed_names or not Node.objects.filter(spare=True).exists():
        return []
    try:
        with transaction.atomic():
            plan = _plan(job_id, placement, failed_names)
            if plan is None:
                return []
            lock_jobs([job_id, *plan.stop])  # the job rows first, in id order
            job = Job.objects.filter(pk=job_id, state=Job.State.PENDING).values_list("simulated", "name").first()
            if job is None:
                return []
            for victim in plan.stop:
                spare = sorted({t.node for t in plan.tasks} & set(plan.swap.values()))
                if not requeue_job(victim, at=at, kind="stopped_for_spare", backoff=False,
                                   from_states=Job.ACTIVE_STATES, actor=actor,
                                   reason=f"stopped at once: spare {', '.join(spare)} taken by the restart of job "
                                          f"{job[1]} (#{job_id}), which lost {', '.join(failed_names)}",
                                   data={"for_job": job_id, "spares": spare, "failed": failed_names}):
                    raise _Stale(f"job {victim} on a spare is no longer running")
            swap = {k: Node.objects.select_related("domain__parent").get(name=v) for k, v in plan.swap.items()}
            failed = {n.name: n for n in Node.objects.filter(name__in=failed_names)}
            names = {t.node for t in plan.tasks}
            tasks_by_role: dict[tuple, list[int]] = defaultdict(list)
            for tid, role in (Task.objects.filter(job_id=job_id, state="pending").order_by("role_id", "index")
                              .values_list("id", "role__name")):
                tasks_by_role[(job_id, role)].append(tid)
            gpu_ids: dict[str, dict] = {}
            for nid, name, executor in Node.objects.filter(name__in=names, state=Node.State.READY).values_list(
                    "id", "name", "executor"):
                gpu_ids[name] = {"id": nid, "gpus": {}, "agent": executor == Node.Executor.AGENT}
            for gid, idx, name in Gpu.objects.filter(Gpu.usable(), node__name__in=names).values_list(
                    "id", "index", "node__name"):
                if name in gpu_ids:
                    gpu_ids[name]["gpus"][idx] = gid
            event = _bind(plan.binding, at, tasks_by_role, {job_id} if job[0] else set(), gpu_ids, None)
            event["message"] = f"restarted on spare(s) {', '.join(s.name for s in swap.values())}: " + event["message"]
            record_event(event["kind"], event["message"], time=at, job_id=job_id, data=event["data"], actor=actor)
            for failed_name, spare in swap.items():
                Node.objects.filter(pk=spare.pk).update(spare=False)
                Node.objects.filter(name=failed_name).update(spare=True)
                record_event("node_spare", f"{spare.name}: spare used by a gang that lost {failed_name}; it leaves "
                                           f"the spare pool", time=at, node=spare, actor=actor,  # no job named:
                             data={"spare": False, "replaces": failed_name})  # node Events are everyone's
                record_event("node_spare", f"{failed_name}: takes {spare.name}'s place in the spare pool (a spare "
                                           f"once repaired)", time=at, node_id=failed[failed_name].pk,
                             actor=actor, data={"spare": True, "replaced_by": spare.name})
            _say_restarted(job_id, at, [s.name for s in swap.values()])
            record_event("restarted_on_spare", f"gang restarted at once on spare(s) "
                                               f"{', '.join(f'{k} -> {v.name}' for k, v in swap.items())}"
                                               + (f", stopping {len(plan.stop)} interruptible job(s)"
                                                  if plan.stop else ""),
                         time=at, job_id=job_id, actor=actor,
                         data={"swap": {k: v.name for k, v in swap.items()}, "stopped": list(plan.stop),
                               "placement": [[t.role, t.index, t.node, list(t.gpus)] for t in plan.tasks]})
    except (_Stale, IntegrityError) as exc:
        log.info("job %s: restart on a spare skipped: %s", job_id, exc)
        return []
    if Job.objects.filter(pk=job_id, state=Job.State.RUNNING).exists():  # no agent to wait for: running now
        from gpuplatform.diagnosis.attempts import mark_recovered

        mark_recovered(job_id, at)
    return [s.name for s in swap.values()]


def _say_restarted(job_id, at: datetime, spare_names: list[str]) -> None:
    """The requeue's Event, written a moment ago in this transaction by the failure path (lifecycle.requeue_job)
    with "retries at <ISO time>", says instead that the gang restarted at once on the spare(s): it did not
    wait for a retry. The job's retry time goes too (it is running)."""
    from gpuplatform.models import Event

    Job.objects.filter(pk=job_id).update(not_before=None)
    ev = (Event.objects.filter(job_id=job_id, kind="requeued_after_failure", time=at).order_by("-pk")
          .only("pk", "message", "data").first())
    if ev is None:
        return
    head = ev.message.split(", retries at ")[0]
    ev.message = f"{head}, restarted at once on spare {', '.join(spare_names)}"
    ev.data = {**(ev.data or {}), "not_before": None, "spares": spare_names}
    ev.save(update_fields=["message", "data"])
