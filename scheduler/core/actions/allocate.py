"""The allocate action: walk pending jobs in fair-share order and place each gang, or say why not.

Order: jobs holding a nomination (the beneficiaries of earlier evictions) first; then the queue with the
lowest dominant share of its water-filled fair share goes next (re-evaluated after every admission), and
inside a queue higher priority, then earlier submission. A job that cannot start does not block the jobs
behind it; its failed attempt is rolled back first. The first job that cannot start for lack of room gets
a backfill reservation (actions/backfill.py). Once a shape (flavor, roles, topology cap) fails for lack
of room, later jobs of the same shape fail without a search: the cluster only gets fuller here.
"""
from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import replace

from ..cache import EngineCache
from ..plugins.fairshare import dominant_share, usage_offset
from ..plugins.feasibility import Capacity
from ..plugins.gang import PackFailure, pack_gang
from ..plugins.predicates import allowed_flavors
from ..plugins.quota import INF, QueueTree, job_order_key
from ..plugins.topology_policy import candidate_domains, node_order
from ..snapshot import Binding, CycleConfig, JobInfo, PendingReason, RoleInfo, Snapshot
from ..state import ClusterState
from ..domain_tree import common_domain
from ..trial import Holds
from .backfill import drain_reservation, shadow_reservation

ROOM_CODES = {"insufficient_gpus", "no_domain", "no_packing"}  # waiting for GPUs may help
BACKFILL = "backfill"


class Allocator:
    def __init__(self, state: ClusterState, queues: QueueTree, config: CycleConfig, *, snapshot: Snapshot,
                 shares: dict | None = None, cache: EngineCache | None = None):
        self.state, self.queues, self.config = state, queues, config
        self.snapshot, self.now = snapshot, snapshot.now
        self.tree = state.tree
        self.capacity = Capacity(state, cache)
        self.shares = shares or {}
        self.offset = usage_offset(queues) if config.usage_half_life else None
        self.holds = Holds(state)
        self.failed_shapes: dict[tuple, PendingReason] = {}
        self._static_limits: dict[tuple, tuple] = {}
        self._shares_at: dict[str, tuple[int, float]] = {}  # queue -> (QueueTree.version, share)
        self.backfill_until: float | None = None
        self.reservation_tried = False
        self.drain_made = False  # at most one new drain reservation per cycle
        self.reservations = 0  # jobs holding a reservation (eviction beneficiaries and drains)
        self.estimated_start: dict = {}
        self.failed_order: list[JobInfo] = []  # jobs that could not start, in the order they were tried
        self.nominated: dict = {}  # job id -> tasks held for it after this cycle

    # -- the loop -------------------------------------------------------------------------------------
    def run(self, pending: list[JobInfo]) -> tuple[list[Binding], dict]:
        bindings: list[Binding] = []
        reasons: dict = {}
        rest, holders = [], []
        self.reservations = sum(1 for j in pending if j.reserved)
        for job in sorted(pending, key=job_order_key):
            if job.not_before is not None and job.not_before > self.now:
                reasons[job.id] = PendingReason("backoff", f"requeued after attempt {job.attempts}; "
                                                           f"retries at t={job.not_before:.0f}s")
            elif job.reserved and self._reservation_valid(job):
                holders.append(job)
            else:
                rest.append(job)
        for job in holders:  # every hold first, so no holder's attempt elsewhere takes another's GPUs
            self.holds.hold(job.id, job.reserved)
        for job in holders:
            self._serve_nomination(job, bindings, reasons)
        by_queue: dict[str, list[JobInfo]] = defaultdict(list)
        for job in rest:
            by_queue[job.queue].append(job)
        heap = []
        for q, jobs in by_queue.items():
            jobs.sort(key=self._job_key, reverse=True)  # pop() from the end = next job
            heap.append((self._queue_key(q, jobs[-1]), q))
        heapq.heapify(heap)
        while heap:
            _, q = heapq.heappop(heap)
            job = by_queue[q].pop()
            before = self._share(q)
            outcome = self._attempt(job)
            if isinstance(outcome, Binding):
                bindings.append(replace(outcome, share_before=before, share_after=self._share(q)))
            else:
                reasons[job.id] = outcome
                self.failed_order.append(job)
                if outcome.code in ROOM_CODES and self.config.backfill:
                    if not self.reservation_tried:
                        self.reservation_tried = True  # one EASY reservation per cycle: the first job that waits
                        self._reserve(job, reasons)
                    if self.backfill_until is None and self._starving(job):  # no EASY shadow this cycle
                        self._drain_for(job, reasons)
            if by_queue[q]:
                heapq.heappush(heap, (self._queue_key(q, by_queue[q][-1]), q))
        return bindings, reasons

    def _job_key(self, job: JobInfo) -> tuple:
        return job_order_key(job) if self.config.fair_share else (job.submit_time, str(job.id))

    def _share(self, q: str) -> float:
        """The queue's dominant share (of its fair share, or of its quota without shares), recomputed only
        after usage changed (QueueTree.version): most attempts in a busy cycle charge nothing."""
        version = self.queues.version
        cached = self._shares_at.get(q)
        if cached is not None and cached[0] == version:
            return cached[1]
        value = dominant_share(self.queues, self.shares, q, self.offset) if self.shares else self.queues.share(q)
        self._shares_at[q] = (version, value)
        return value

    def _queue_key(self, q: str, head: JobInfo) -> tuple:
        if not self.config.fair_share:  # plain FIFO across queues
            return (head.submit_time, str(head.id), q)
        if self.shares:
            return (self._share(q), q)
        share = self._share(q)
        return (share >= 1.0, share / self.queues.weight(q), q)

    def _attempt(self, job: JobInfo) -> Binding | PendingReason:
        if self.backfill_until is None or BACKFILL not in self.holds.held:
            return self.place(job)
        ends = self.now + job.time_limit if job.time_limit is not None else INF
        if ends > self.backfill_until:
            return self.place(job, backfill_open=False)
        self.holds.release(BACKFILL)
        try:
            outcome = self.place(job, backfill_open=True)
        finally:
            self.holds.retake(BACKFILL)
        return replace(outcome, rule="backfill") if isinstance(outcome, Binding) else outcome

    def _reserve(self, job: JobInfo, reasons: dict) -> None:
        flavors = self._flavors(job)
        found = shadow_reservation(self, job, flavors[0], self.snapshot) if flavors else None
        if found is None:
            return
        start, placement = found
        self.backfill_until = start
        self.estimated_start[job.id] = start
        self.holds.hold(BACKFILL, placement.tasks)
        r = reasons[job.id]
        reasons[job.id] = PendingReason(r.code, f"{r.message}; reserved, estimated start t={start:.0f}s")

    def _starving(self, job: JobInfo) -> bool:
        return (not self.drain_made and self.reservations < self.config.max_reservations
                and self.now - job.submit_time >= self.config.starvation_seconds)

    def _drain_for(self, job: JobInfo, reasons: dict) -> None:
        """A persistent reservation for a job that has waited starvation_seconds: the GPUs it will get in
        the domain quickest to drain are held for it from now on (Nomination), so smaller jobs stop
        taking them as they free up. Needed when running jobs declare no time limit (no EASY shadow)."""
        for flavor in self._flavors(job):
            placement = drain_reservation(self, job, flavor)
            if placement is not None:
                self.drain_made = True
                self.reservations += 1
                self.holds.hold(job.id, placement.tasks)
                self.nominated[job.id] = placement.tasks
                r = reasons[job.id]
                waited = (self.now - job.submit_time) / 3600
                reasons[job.id] = PendingReason(r.code, f"{r.message}; waited {waited:.1f} h: GPUs in "
                                                        f"{placement.domain} reserved, draining for it")
                return

    def _reservation_valid(self, job: JobInfo) -> bool:
        """False when a reserved GPU's node is gone or not ready, or the GPU is unhealthy: the job is then
        scheduled like any other."""
        for t in job.reserved:
            k = self.state.node_index.get(t.node)
            if k is None or not self.state.nodes[k].schedulable:
                return False
            if any(g in self.state.nodes[k].unhealthy for g in t.gpus):
                return False
        return True

    def _serve_nomination(self, job: JobInfo, bindings: list, reasons: dict) -> None:
        """Start a job on the GPUs reserved for it (an eviction's beneficiary, or a starving job's drain
        reservation) once they are all free (held for it); meanwhile it may start anywhere else that fits,
        and the reserved GPUs that are free stay held for it."""
        total = sum(len(t.gpus) for t in job.reserved)
        waiting = total - sum(len(g) for _, g in self.holds.held.get(job.id, ()))
        self.holds.release(job.id)
        before = self._share(job.queue)
        outcome = self._bind_exactly(job, job.reserved) if not waiting else self.place(job)
        if isinstance(outcome, Binding):
            self.holds.drop(job.id)
            bindings.append(replace(outcome, rule="reservation" if not waiting else "allocate",
                                    share_before=before, share_after=self._share(job.queue)))
            return
        self.holds.hold(job.id, job.reserved)
        reasons[job.id] = PendingReason("nominated", f"{outcome.message}; {waiting} GPUs reserved for it are "
                                                     f"still in use (evicted jobs releasing, or jobs draining)")
        self.nominated[job.id] = job.reserved

    def _bind_exactly(self, job: JobInfo, tasks) -> Binding:
        state, roles = self.state, {r.name: r for r in job.roles}
        ks = []
        for t in tasks:
            k = state.node_index[t.node]
            state.take(k, t.gpus, roles[t.role].cpu_milli, roles[t.role].memory_mib)
            ks.append(k)
            if t.gpus:
                self.queues.charge(job.queue, state.nodes[k].flavor, len(t.gpus))
        d = common_domain(self.tree, ks)
        return Binding(job_id=job.id, tasks=tuple(tasks), domain=self.tree.names[d], tier=self.tree.tiers[d])

    # -- one job --------------------------------------------------------------------------------------
    def place(self, job: JobInfo, *, backfill_open: bool | None = None) -> Binding | PendingReason:
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
            outcome = self._place_flavor(job, flavor, backfill_open)
            if isinstance(outcome, Binding):
                return outcome
            reasons.append(outcome)
        live = [r for r in reasons if not r.terminal]
        return live[0] if live else reasons[0]

    def _flavors(self, job: JobInfo) -> list[str]:
        flavors = self.state.flavors
        if len(flavors) == 1:  # the common one-flavor cluster: no set algebra, nothing to order
            for only in flavors:
                for role in job.roles:
                    if role.flavors and role.gpus_per_task and only not in role.flavors:
                        return []
                return [only]
        allowed = allowed_flavors(job.roles, flavors)
        root = self.tree.root
        return sorted(allowed, key=lambda f: (-self.state.domain_free(root, f), f))

    def _cap_tier(self, job: JobInfo) -> int:
        top = self.tree.top_tier
        if self.config.topology and job.topology_mode == "hard" and job.highest_tier is not None:
            return min(job.highest_tier, top)
        return top

    def _place_flavor(self, job: JobInfo, flavor: str, backfill_open: bool | None) -> Binding | PendingReason:
        need = job.gpus_min
        limits = self._static_limits.get((job.queue, flavor))
        if limits is None:  # the queues' limits do not change within a cycle
            limits = self._static_limits[(job.queue, flavor)] = self.queues.static_limit(job.queue, flavor)
        limit, limiter = limits
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
        if not job.preemptible:  # it could never be reclaimed, so it may not borrow
            within, level = self.queues.quota_room(job.queue, flavor)
            if need > within:
                used = self.queues.usage[level][flavor]
                return PendingReason("queue_limit", f"non-preemptible jobs run only within quota: queue {level} "
                                     f"uses {used} of its quota of {int(used + within)} {flavor} GPUs, job needs {need}")
            room = min(room, within)
        shape = (flavor, cap, backfill_open,
                 tuple((r.gpus_per_task, r.effective_min, r.cpu_milli, r.memory_mib) for r in job.roles))
        cached = self.failed_shapes.get(shape)
        if cached is not None:
            return cached
        outcome = self._search(job, flavor, cap, need, room)
        if isinstance(outcome, PendingReason):
            if backfill_open is False and self.backfill_until is not None:
                outcome = PendingReason(outcome.code, f"{outcome.message} outside GPUs reserved until "
                                                      f"t={self.backfill_until:.0f}s (no time limit ending before)")
            self.failed_shapes[shape] = outcome
        else:
            for t in outcome.tasks:
                if t.gpus:
                    self.queues.charge(job.queue, flavor, len(t.gpus))
        return outcome

    def try_place(self, job: JobInfo, flavor: str, *, target: float, within: int | None = None
                  ) -> Binding | PendingReason:
        """A what-if placement for evictions and reservations: no quota check, no usage charged, no
        shape cache; on success the state holds the placement and the caller must release it.
        within: only inside this domain."""
        return self._search(job, flavor, self._cap_tier(job), job.gpus_min, max(target, job.gpus_min), within)

    def _search(self, job: JobInfo, flavor: str, cap: int, need: int, room: float, within: int | None = None
                ) -> Binding | PendingReason:
        state, tree = self.state, self.tree
        levels = [t for t in tree.tier_levels if t <= cap] if self.config.topology else [tree.top_tier]
        if within is not None:
            levels = [tree.tiers[within]]
        extra = (room - need) if room != INF else INF
        packing_failure: tuple[int, RoleInfo] | None = None  # the first domain whose packing failed, and the role
        gpu_roles = sorted((r for r in job.roles if r.gpus_per_task and r.effective_min),
                           key=lambda r: (-r.gpus_per_task, -r.cpu_milli, r.name))  # pack_gang's order
        for tier in levels:
            if within is not None:
                domains = [within]
            else:
                domains = candidate_domains(state, tier, flavor, need) if self.config.topology else [tree.root]
            for d in domains:
                if state.domain_free(d, flavor) < need or not self.capacity.domain_fits(job, flavor, d):
                    continue  # not enough free now, or nodes too small for its tasks even when empty
                # cheap necessary condition: each GPU role's minimum fits the nodes' free GPUs taken whole
                # tasks at a time (no node scan); when it fails, pack_gang would fail too
                short = next((r for r in gpu_roles if state.pack_slots(d, flavor, r.gpus_per_task) < r.effective_min),
                             None)
                if short is not None and (packing_failure is not None or short is gpu_roles[0]):
                    # pack_gang places roles in gpu_roles' order from an empty statement: the first role short of
                    # slots is the one it reports; for a later role it could report an earlier one, so unless a
                    # failure is already recorded, fall through and let it name the role
                    packing_failure = packing_failure or (d, short)
                    continue
                order = node_order(state, d, flavor, need, binpack=self.config.binpack)
                cpu_nodes = self._cpu_nodes(d, order) if any(not r.gpus_per_task for r in job.roles) else []
                placed = pack_gang(state, job, order, cpu_nodes, extra_budget=extra)
                if isinstance(placed, PackFailure):
                    packing_failure = packing_failure or (d, placed.role)
                    continue
                return Binding(job_id=job.id, tasks=placed, domain=tree.names[d], tier=tree.tiers[d])
        if packing_failure is not None:
            d, role = packing_failure
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
