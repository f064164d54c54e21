"""The allocate action: walk pending jobs in fair-share order and place each gang, or say why not.

Order: the queue with the lowest dominant share goes next (re-evaluated after every admission), and
inside a queue higher priority, then earlier submission. A job that cannot start does not block the
jobs behind it (no head-of-line blocking); its failed attempt is rolled back first. Once a shape
(flavor, roles, topology cap) fails for lack of room, later jobs of the same shape fail without a
search: the cluster only gets fuller during the action.
"""
from __future__ import annotations

import heapq
from collections import defaultdict

from ..plugins.gang import PackFailure, pack_gang
from ..plugins.quota import INF, QueueTree, job_order_key
from ..plugins.topology import candidate_domains, node_order
from ..snapshot import Binding, CycleConfig, JobInfo, PendingReason
from ..state import ClusterState
from ..plugins.feasibility import Capacity


class Allocator:
    def __init__(self, state: ClusterState, queues: QueueTree, config: CycleConfig):
        self.state, self.queues, self.config = state, queues, config
        self.tree = state.tree
        self.capacity = Capacity(state)
        self.failed_shapes: dict[tuple, PendingReason] = {}

    # -- the loop -------------------------------------------------------------------------------------
    def run(self, pending: list[JobInfo]) -> tuple[list[Binding], dict]:
        by_queue: dict[str, list[JobInfo]] = defaultdict(list)
        for job in pending:
            by_queue[job.queue].append(job)
        heap = []
        for q, jobs in by_queue.items():
            jobs.sort(key=job_order_key, reverse=True)  # pop() from the end = next job
            heap.append((self._queue_key(q), q))
        heapq.heapify(heap)
        bindings: list[Binding] = []
        reasons: dict = {}
        while heap:
            _, q = heapq.heappop(heap)
            job = by_queue[q].pop()
            outcome = self.place(job)
            if isinstance(outcome, Binding):
                bindings.append(outcome)
            else:
                reasons[job.id] = outcome
            if by_queue[q]:
                heapq.heappush(heap, (self._queue_key(q), q))
        return bindings, reasons

    def _queue_key(self, q: str) -> tuple:
        share = self.queues.share(q)
        return (share >= 1.0, share / self.queues.weight(q), q)

    # -- one job --------------------------------------------------------------------------------------
    def place(self, job: JobInfo) -> Binding | PendingReason:
        if not self.queues.known(job.queue):
            return PendingReason("unknown_queue", f"queue {job.queue} does not exist", terminal=True)
        if not job.roles:
            return PendingReason("invalid", "job has no roles", terminal=True)
        flavors = self._flavors(job)
        if not flavors:
            wanted = sorted({f for r in job.roles for f in r.flavors})
            return PendingReason("never_fits_flavor", f"no node of flavor {'|'.join(wanted)} in this cluster",
                                 terminal=True)
        reasons: list[PendingReason] = []
        for flavor in flavors:
            outcome = self._place_flavor(job, flavor)
            if isinstance(outcome, Binding):
                return outcome
            reasons.append(outcome)
        live = [r for r in reasons if not r.terminal]
        return live[0] if live else reasons[0]

    def _flavors(self, job: JobInfo) -> list[str]:
        allowed = set(self.state.flavors)
        for role in job.roles:
            if role.flavors and role.gpus_per_task:
                allowed &= set(role.flavors)
        root = self.tree.root
        return sorted(allowed, key=lambda f: (-self.state.domain_free(root, f), f))

    def _cap_tier(self, job: JobInfo) -> int:
        top = self.tree.top_tier
        if not self.config.topology:
            return top
        if job.topology_mode == "hard" and job.highest_tier is not None:
            return min(job.highest_tier, top)
        return top

    def _place_flavor(self, job: JobInfo, flavor: str) -> Binding | PendingReason:
        need = job.gpus_min
        limit, limiter = self.queues.static_limit(job.queue, flavor)
        if need > limit:
            return PendingReason("never_fits_queue_limit",
                                 f"needs {need} {flavor} GPUs, above queue {limiter} limit of {int(limit)}", terminal=True)
        cap = self._cap_tier(job)
        never = self.capacity.never_fits(job, flavor, cap if self.config.topology else None)
        if never is not None:
            return never
        room, limiter = self.queues.headroom(job.queue, flavor)
        if need > room:
            used = self.queues.usage[limiter][flavor]
            return PendingReason("queue_limit", f"queue {limiter} limit: uses {used} of {int(used + room)} "
                                 f"{flavor} GPUs, job needs {need}")
        shape = (flavor, cap, tuple((r.gpus_per_task, r.effective_min, r.cpu_milli, r.memory_mib) for r in job.roles))
        cached = self.failed_shapes.get(shape)
        if cached is not None:
            return cached
        outcome = self._search(job, flavor, cap, need, room)
        if isinstance(outcome, PendingReason):
            self.failed_shapes[shape] = outcome
        else:
            for t in outcome.tasks:
                if t.gpus:
                    self.queues.charge(job.queue, flavor, len(t.gpus))
        return outcome

    def _search(self, job: JobInfo, flavor: str, cap: int, need: int, room: float) -> Binding | PendingReason:
        state, tree = self.state, self.tree
        levels = [t for t in tree.tier_levels if t <= cap] if self.config.topology else [tree.top_tier]
        extra = (room - need) if room != INF else INF
        packing_failure: tuple[int, PackFailure] | None = None
        for tier in levels:
            domains = candidate_domains(state, tier, flavor, need) if self.config.topology else [tree.root]
            for d in domains:
                if state.domain_free(d, flavor) < need:
                    continue
                order = node_order(state, d, flavor, need, binpack=self.config.binpack)
                cpu_nodes = self._cpu_nodes(d, order) if any(not r.gpus_per_task for r in job.roles) else []
                placed = pack_gang(state, job, order, cpu_nodes, extra_budget=extra)
                if isinstance(placed, PackFailure):
                    packing_failure = packing_failure or (d, placed)
                    continue
                return Binding(job_id=job.id, tasks=placed, domain=tree.names[d], tier=tree.tiers[d])
        if packing_failure is not None:
            d, failure = packing_failure
            role = failure.role
            return PendingReason(
                "no_packing",
                f"no node packing fits: {state.domain_free(d, flavor)} free {flavor} GPUs in {tree.names[d]} but no "
                f"node arrangement holds role {role.name}: {role.effective_min} tasks x {role.gpus_per_task} GPUs")
        total_free = state.domain_free(tree.root, flavor)
        if total_free < need:
            return PendingReason("insufficient_gpus", f"needs {need} {flavor} GPUs at once; {total_free} free")
        best = max(tree.by_tier.get(cap, ()), key=lambda d: state.domain_free(d, flavor), default=tree.root)
        return PendingReason(
            "no_domain", f"no tier-{cap} domain has {need} free {flavor} GPUs (most: "
            f"{state.domain_free(best, flavor)} in {tree.names[best]})")

    def _cpu_nodes(self, d: int, order: list[int]) -> list[int]:
        seen = set(order)
        rest = [k for k in self.tree.nodes_under[d] if k not in seen and self.state.nodes[k].schedulable]
        return order + rest
