"""Baseline policies for comparison, built from the core's pieces (ClusterState, QueueTree, metrics).

    run_cycle_kube(snapshot, config) -> CycleResult

A kube-scheduler-like policy: one FIFO queue of pods (jobs by submit time, then id; a job's tasks in
index order), each pod placed on its own, with no gang: a pod that fits is bound at once even if the
rest of its job cannot be placed, and holds its GPUs while it waits for its siblings (kube-scheduler
without coscheduling). A pod that does not fit is skipped and the next one is tried (no head-of-line
blocking, like the unschedulable queue). Node choice: `config.binpack` False = least allocated first
(the most free GPUs, kube-scheduler's default NodeResourcesLeastAllocated scoring), True = most
allocated first; ties by node order. Topology, fair share, backfill, preemption and reclaim are not
used whatever the config says. Queue limits (QuotaInfo.limit, like a ResourceQuota) are honoured per pod.

Partially placed jobs: a *pending* JobInfo may carry a `placement` (the pods already bound, whose GPUs
are in the nodes' `used`); this engine places only the missing (role, index) tasks. A Binding here may
therefore hold only some of a job's tasks (the new ones); its domain / tier are those of the common
domain of all the job's tasks so far. The replay simulator accepts that for engines whose `gang`
attribute is False (`run_cycle_kube.gang = False`).
"""
from __future__ import annotations

import time

from .cache import ClusterStatic
from .domain_tree import common_domain
from .metrics import cluster_metrics
from .plugins.quota import QueueTree
from .snapshot import Binding, CycleConfig, CycleResult, PendingReason, Snapshot, TaskPlacement, utc_iso
from .state import ClusterState


class _NodePicker:
    """Nodes bucketed by free GPUs per flavor, so the least (or most) allocated fitting node is found
    without scanning every node: buckets[flavor][free] = sorted node indices."""

    def __init__(self, state: ClusterState):
        self.state = state
        self.buckets: dict[str, list[set[int]]] = {}
        self.max_gpus = max((n.gpus for n in state.nodes), default=0)
        for k, node in enumerate(state.nodes):
            if node.schedulable and state.free[k]:
                self._bucket(node.flavor)[len(state.free[k])].add(k)

    def _bucket(self, flavor: str) -> list[set[int]]:
        b = self.buckets.get(flavor)
        if b is None:
            b = self.buckets[flavor] = [set() for _ in range(self.max_gpus + 1)]
        return b

    def pick(self, flavors, gpus: int, cpu: int, mem: int, *, most_allocated: bool) -> int | None:
        state = self.state
        sizes = range(gpus, self.max_gpus + 1) if most_allocated else range(self.max_gpus, gpus - 1, -1)
        for free in sizes:
            best = None
            for flavor in flavors:
                members = self.buckets.get(flavor, ())
                if not members or not members[free]:
                    continue
                k = min(members[free])
                if not state.fits(k, gpus, cpu, mem):  # CPU / memory short: the next fitting one
                    k = next((k for k in sorted(members[free]) if state.fits(k, gpus, cpu, mem)), None)
                if k is not None:
                    best = k if best is None else min(best, k)
            if best is not None:
                return best
        return None

    def moved(self, k: int, before: int) -> None:
        flavor = self.state.nodes[k].flavor
        b = self._bucket(flavor)
        b[before].discard(k)
        after = len(self.state.free[k])
        if after:
            b[after].add(k)


def run_cycle_kube(snapshot: Snapshot, config: CycleConfig | None = None) -> CycleResult:
    """Pod-by-pod FIFO placement without gang (module docstring). Never evicts."""
    config = config or CycleConfig(binpack=False, topology=False, fair_share=False, backfill=False,
                                   preemption=False, reclaim=False)
    result = CycleResult()
    t0 = time.perf_counter()
    static = ClusterStatic(snapshot)
    tree = static.tree
    state = ClusterState(snapshot, static)
    queues = QueueTree(snapshot)
    flavor_of = {n.name: n.flavor for n in snapshot.nodes}
    pending = sorted((j for j in snapshot.jobs if j.state == "pending"), key=lambda j: (j.submit_time, str(j.id)))
    for job in pending:  # pods of partially placed jobs already hold GPUs: charge their queue
        for t in job.placement:
            if t.gpus and queues.known(job.queue):
                queues.charge(job.queue, flavor_of.get(t.node, ""), len(t.gpus))
    picker = _NodePicker(state)
    all_flavors = sorted(state.flavors)
    largest = {f: 0 for f in all_flavors}
    for k, n in enumerate(state.nodes):
        if n.schedulable:
            largest[n.flavor] = max(largest[n.flavor], state.healthy_gpus[k])
    t1 = time.perf_counter()
    for job in pending:
        if job.not_before is not None and job.not_before > snapshot.now:
            result.pending[job.id] = PendingReason("backoff", f"retries at {utc_iso(job.not_before)}")
            continue
        if not queues.known(job.queue):
            result.pending[job.id] = PendingReason("unknown_queue", f"queue {job.queue} does not exist", terminal=True)
            continue
        placed = {(t.role, t.index) for t in job.placement}
        new: list[TaskPlacement] = []
        waiting = 0
        never = None
        for role in job.roles:
            flavors = [f for f in all_flavors if not role.flavors or not role.gpus_per_task or f in role.flavors]
            if role.gpus_per_task and all(largest[f] < role.gpus_per_task for f in flavors):
                never = PendingReason("never_fits_node", f"no node holds a task of {role.gpus_per_task} GPUs",
                                      terminal=not job.placement)
            for index in range(role.tasks):
                if (role.name, index) in placed:
                    continue
                if never is not None:
                    waiting += 1
                    continue
                k = picker.pick(flavors, role.gpus_per_task, role.cpu_milli, role.memory_mib,
                                most_allocated=config.binpack)
                flavor = state.nodes[k].flavor if k is not None else None
                if k is not None and role.gpus_per_task:
                    room, _ = queues.headroom(job.queue, flavor)
                    if role.gpus_per_task > room:
                        k = None
                if k is None:
                    waiting += 1
                    continue
                before = len(state.free[k])
                gpus = state.pick_gpus(k, role.gpus_per_task)
                state.take(k, gpus, role.cpu_milli, role.memory_mib)
                picker.moved(k, before)
                if gpus:
                    queues.charge(job.queue, flavor, len(gpus))
                new.append(TaskPlacement(role=role.name, index=index, node=state.nodes[k].name, gpus=gpus))
        if new:
            ks = [state.node_index[t.node] for t in (*job.placement, *new)]
            d = common_domain(tree, ks)
            result.bindings.append(Binding(job_id=job.id, tasks=tuple(new), domain=tree.names[d], tier=tree.tiers[d]))
        if waiting:
            result.pending[job.id] = never or PendingReason(
                "waiting_pods", f"{waiting} pod(s) do not fit; {len(placed) + len(new)} bound and holding GPUs")
    t2 = time.perf_counter()
    result.metrics = cluster_metrics(state)
    result.metrics["pending_jobs"] = len(result.pending)
    result.metrics["queue_usage"] = {q: dict(u) for q, u in queues.usage.items()}
    t3 = time.perf_counter()
    result.timings = {"open": t1 - t0, "allocate": t2 - t1, "preempt": 0.0, "metrics": t3 - t2, "total": t3 - t0}
    return result


run_cycle_kube.gang = False  # the simulator accepts partial bindings from this engine
