"""Hot spare nodes (DESIGN section 14, docs/diagnosis.md "Spare nodes"): a gang that lost a node restarts
on a spare at once, in the request that requeued it, without waiting in the queue.

An admin marks idle ready nodes as spares (services.set_spare; Node.spare). The scheduler places no job on
a spare (build_snapshot shows it cordoned to the engine). When a gang is requeued because a node failed
(failure detection's node lost, a GPU failed under it, a health rule's fail_tasks), its failure path calls
`restart_on_spare(job_id, placement, failed_nodes, at=)` with the placement it had: each failed node is
replaced by a free spare of the same flavor with at least the GPU indices the gang used there (a spare in
the same rack, the failed node's parent domain, first; then any), the nodes it keeps must still be ready
with those GPUs free, and the gang is bound there at once through the cycle's own bind (store._bind: the
same Allocation rows, task states and `admitted` Event). The spare then becomes an ordinary node and the
failed node takes its place in the pool (Node.spare set: once repaired and validated it waits as a spare),
so the pool keeps its size. Anything stale (a spare taken meanwhile, a GPU bound by a racing cycle) leaves
the gang pending for the next cycle, as without spares.

The replay's model of the same policy (scheduler.sim.replay, spares=) measures what a spare per rack buys
in recovery time and costs in capacity (benchmarks/spare_nodes.py, RESULTS.md).
"""
from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime

from django.db import IntegrityError, transaction

from gpuplatform.audit import record_event
from gpuplatform.models import Allocation, Gpu, Job, Node, Task
from scheduler.core.snapshot import Binding, TaskPlacement

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


def _pick_spares(failed: list[Node], need: dict[str, set]) -> dict[str, Node] | None:
    busy = set(Allocation.objects.filter(released_at__isnull=True).values_list("gpu__node_id", flat=True).distinct())
    spares = [n for n in Node.objects.filter(spare=True, state=Node.State.READY).select_related("domain__parent")
              .order_by("name") if n.pk not in busy]
    healthy = defaultdict(set)
    for node_id, idx in Gpu.objects.filter(node__in=spares, health=Gpu.Health.HEALTHY).values_list("node_id", "index"):
        healthy[node_id].add(idx)
    out, taken = {}, set()
    for node in failed:
        rack = _parent(node)
        fits = [s for s in spares if s.pk not in taken and s.flavor == node.flavor and need[node.name] <= healthy[s.pk]]
        fits.sort(key=lambda s: _parent(s) != rack)  # the same rack first (stable: by name within)
        if not fits:
            return None
        out[node.name] = fits[0]
        taken.add(fits[0].pk)
    return out


def restart_on_spare(job_id, placement, failed_nodes, *, at: datetime, actor=None) -> list[str]:
    """Bind the requeued (pending) gang `job_id` at once on `placement` ([(role, index, node, gpus)], from
    placement_of before the requeue) with each of `failed_nodes` replaced by a spare (module docstring).
    Returns the spares used ([] when none fits or the decision went stale: the gang stays pending)."""
    from gpuplatform.scheduling.store import _bind, _Stale

    failed_names = sorted({n for _, _, n, _ in placement} & set(failed_nodes))
    if not failed_names or not Node.objects.filter(spare=True).exists():
        return []
    need: dict[str, set] = defaultdict(set)
    for _, _, node, gpus in placement:
        need[node].update(gpus)
    failed = list(Node.objects.filter(name__in=failed_names).select_related("domain__parent"))
    try:
        with transaction.atomic():
            swap = _pick_spares(failed, need)
            if swap is None:
                return []
            kept = {n for _, _, n, _ in placement} - set(failed_names)
            if Node.objects.filter(name__in=kept, state=Node.State.READY, spare=False).count() != len(kept):
                return []
            tasks = tuple(TaskPlacement(role, index, swap[node].name if node in swap else node, tuple(gpus))
                          for role, index, node, gpus in placement)
            names = {t.node for t in tasks}
            job = Job.objects.filter(pk=job_id, state=Job.State.PENDING).values_list("simulated", flat=True).first()
            if job is None:
                return []
            tasks_by_role: dict[tuple, list[int]] = defaultdict(list)
            for tid, role in (Task.objects.filter(job_id=job_id, state="pending").order_by("role_id", "index")
                              .values_list("id", "role__name")):
                tasks_by_role[(job_id, role)].append(tid)
            gpu_ids: dict[str, dict] = {}
            for nid, name, executor in Node.objects.filter(name__in=names, state=Node.State.READY).values_list(
                    "id", "name", "executor"):
                gpu_ids[name] = {"id": nid, "gpus": {}, "agent": executor == Node.Executor.AGENT}
            for gid, idx, name in Gpu.objects.filter(node__name__in=names, health=Gpu.Health.HEALTHY).values_list(
                    "id", "index", "node__name"):
                if name in gpu_ids:
                    gpu_ids[name]["gpus"][idx] = gid
            binding = Binding(job_id, tasks, domain="", tier=0, rule="spare")
            event = _bind(binding, at, tasks_by_role, {job_id} if job else set(), gpu_ids, None)
            event["message"] = f"restarted on spare(s) {', '.join(s.name for s in swap.values())}: " + event["message"]
            record_event(event["kind"], event["message"], time=at, job_id=job_id, data=event["data"], actor=actor)
            for failed_name, spare in swap.items():
                Node.objects.filter(pk=spare.pk).update(spare=False)
                Node.objects.filter(name=failed_name).update(spare=True)
                record_event("node_spare", f"{spare.name}: spare used by a gang that lost {failed_name}; it leaves "
                                           f"the spare pool", time=at, node=spare, actor=actor,  # no job named:
                             data={"spare": False, "replaces": failed_name})  # node Events are everyone's
                record_event("node_spare", f"{failed_name}: takes {spare.name}'s place in the spare pool (a spare "
                                           f"once repaired)", time=at, node_id=next(f.pk for f in failed
                                                                                    if f.name == failed_name),
                             actor=actor, data={"spare": True, "replaced_by": spare.name})
            record_event("restarted_on_spare", f"gang restarted at once on spare(s) "
                                               f"{', '.join(f'{k} -> {v.name}' for k, v in swap.items())}",
                         time=at, job_id=job_id, actor=actor,
                         data={"swap": {k: v.name for k, v in swap.items()},
                               "placement": [[t.role, t.index, t.node, list(t.gpus)] for t in tasks]})
    except (_Stale, IntegrityError) as exc:
        log.info("job %s: restart on a spare skipped: %s", job_id, exc)
        return []
    if Job.objects.filter(pk=job_id, state=Job.State.RUNNING).exists():  # no agent to wait for: running now
        from gpuplatform.diagnosis.attempts import mark_recovered

        mark_recovered(job_id, at)
    return [s.name for s in swap.values()]
