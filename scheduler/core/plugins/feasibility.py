"""Static feasibility: can a gang EVER fit this cluster, whatever else runs? (kube-scheduler's
"UnschedulableAndUnresolvable": waiting or preempting cannot help, so the job must not block others.)

Capacity counts every node of the flavor in any state (a cordoned node may come back). A job never fits
when a role's task is bigger than every node (in GPUs, milli-CPU or memory), or no domain of tier <= its cap holds its minimum by per-node
packing at full capacity (sum over nodes of floor(node GPUs / GPUs per task) >= the role's minimum), or the
cluster's nodes cannot hold a role's minimum by CPU and memory (host_gang_never_fits: per node, how many of
its tasks fit by GPUs, milli-CPU and memory together, summed over the nodes it may use; exact for one role
alone), or all roles' minimums together ask more milli-CPU or memory than the nodes they may use have.

`never_fits(nodes, domains, roles, ...)` asks the same rule for a job not yet submitted (the platform's
submission-time check), with the allocator's flavor rule and tier cap.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace

from typing import Iterable

from ..cache import EngineCache
from ..snapshot import DomainInfo, JobInfo, NodeInfo, PendingReason, RoleInfo, Snapshot
from ..state import ClusterState
from .predicates import allowed_flavors, role_flavors
from .topology_policy import tier_cap


def largest_numa_node(node: NodeInfo) -> int:
    """GPUs in the node's largest NUMA node (all of them when it reports no layout)."""
    numa = node.gpu_numa
    if not numa:
        return node.gpus
    counts: dict[int, int] = {}
    for z in numa[:node.gpus]:
        counts[z] = counts.get(z, 0) + 1
    if node.gpus > len(numa):  # GPUs the layout does not cover: one NUMA node (as ClusterState.pick_gpus)
        counts[-1] = counts.get(-1, 0) + node.gpus - len(numa)
    return max(counts.values(), default=0)


class Capacity:
    """The static feasibility rule over one cycle's ClusterState. Its tables (per domain and flavor, how
    many nodes of each GPU count; the largest node per flavor) and its answers depend only on the
    cluster's shape: with an EngineCache they are built once per shape and shared by the cycles of an
    unchanged cluster, memos included; without one (None) they are built for this cycle alone."""

    def __init__(self, state: ClusterState, cache: EngineCache | None = None):
        self.state = state
        tables = cache.feasibility(state.static, self._tables) if cache is not None else self._tables()
        self.sizes, self.max_node, self._cache, self._fits_cache, self.max_zone, self.max_host, self.hosts = tables

    def _tables(self) -> tuple:
        """(per domain: flavor -> Counter {node GPU count: nodes}, flavor -> largest node's GPUs, the
        never_fits memo, the domain_fits memo, flavor -> largest NUMA node's GPUs, flavor -> (largest
        node's milli-CPU, largest node's memory in MiB), None where some node of the flavor is unconstrained),
        flavor -> Counter {(GPUs, milli-CPU, MiB; None = unconstrained): nodes})."""
        state, tree = self.state, self.state.tree
        sizes: list[dict[str, Counter]] = [defaultdict(Counter) for _ in tree.names]
        max_node: dict[str, int] = defaultdict(int)
        max_zone: dict[str, int] = defaultdict(int)
        max_host: dict[str, tuple[int | None, int | None]] = {}
        hosts: dict[str, Counter] = defaultdict(Counter)
        for k, node in enumerate(state.nodes):
            hosts[node.flavor][(node.gpus, node.cpu_milli or None, node.memory_mib or None)] += 1
            max_node[node.flavor] = max(max_node[node.flavor], node.gpus)
            max_zone[node.flavor] = max(max_zone[node.flavor], largest_numa_node(node))
            cpu, mem = max_host.get(node.flavor, (0, 0))
            max_host[node.flavor] = (None if cpu is None or not node.cpu_milli else max(cpu, node.cpu_milli),
                                     None if mem is None or not node.memory_mib else max(mem, node.memory_mib))
            for d in tree.node_chain[k]:
                sizes[d][node.flavor][node.gpus] += 1
        return sizes, max_node, {}, {}, max_zone, max_host, hosts

    def host_never_fits(self, role: RoleInfo, flavors: Iterable[str]) -> PendingReason | None:
        """Why one task of `role` fits no node of `flavors` on CPU or memory (a terminal PendingReason
        never_fits_cpu / never_fits_memory naming the largest node's capacity), or None when some node of
        those flavors is large enough (a node with cpu_milli / memory_mib 0 is unconstrained). Only the
        nodes' capacity counts, not what runs on them."""
        flavors = sorted(f for f in flavors if f in self.max_host)
        if not flavors:
            return None
        where = "|".join(flavors)
        for attr, unit, code, index in (("cpu_milli", "milli-CPU", "never_fits_cpu", 0),
                                        ("memory_mib", "MiB of memory", "never_fits_memory", 1)):
            want = getattr(role, attr)
            if not want:
                continue
            caps = [self.max_host[f][index] for f in flavors]
            if any(c is None for c in caps):
                continue
            if want > max(caps):
                return PendingReason(code, f"role {role.name}: {want} {unit} per task exceeds every {where} node "
                                           f"(largest has {max(caps)})", terminal=True, role=role.name)
        return None

    def host_slots(self, role: RoleInfo, flavors: Iterable[str], resource: str | None = None) -> int | None:
        """How many tasks of `role` the nodes of `flavors` hold at once, at full capacity: per node the fewest
        of floor(GPUs / GPUs per task), floor(milli-CPU / per task) and floor(MiB / per task) (an unconstrained
        node or an unasked resource does not limit), summed. `resource` "cpu_milli" or "memory_mib" counts that
        resource alone. None when no node limits the role at all (unbounded). Exact for the role alone."""
        total, bounded = 0, False
        for flavor in flavors:
            for (gpus, cpu, mem), n in self.hosts.get(flavor, {}).items():
                fit = None
                for want, have, what in ((role.gpus_per_task, gpus, None), (role.cpu_milli, cpu, "cpu_milli"),
                                         (role.memory_mib, mem, "memory_mib")):
                    if not want or have is None or resource is not None and what != resource:
                        continue
                    fit = have // want if fit is None else min(fit, have // want)
                if fit is None:
                    return None  # a node that holds any number of its tasks
                total, bounded = total + fit * n, True
        return total if bounded else None

    def host_gang_never_fits(self, job: JobInfo, flavor: str | None) -> PendingReason | None:
        """Why the job's minimum can never be packed on the cluster's nodes by milli-CPU or memory, whatever
        else runs (a terminal never_fits_cpu_gang, never_fits_memory_gang or never_fits_host_gang), or None.
        A GPU role's tasks run on nodes of `flavor` (None: of the flavors the role accepts, a heterogeneous
        job), a CPU-only role's on any node it accepts. Per role (exact for the role alone): the nodes'
        slots (host_slots) against its minimum; then all roles together (never wrong, not exact): the
        milli-CPU and memory their minimums ask against what the nodes any of them may use have. Only asked
        when some role asks milli-CPU or memory: a GPU-only job's answer is the GPU rule's."""
        roles = [r for r in job.roles if r.effective_min and (r.cpu_milli or r.memory_mib)]
        if not roles:
            return None
        units = {"cpu_milli": ("milli-CPU", "never_fits_cpu_gang"), "memory_mib": ("MiB of memory",
                                                                                   "never_fits_memory_gang")}
        used: set[str] = set()  # the flavors of the nodes any of `roles` may use
        for role in roles:
            mine = sorted((flavor,) if role.gpus_per_task and flavor is not None
                          else role_flavors(role, self.hosts))
            used.update(mine)
            need = role.effective_min
            where = "the cluster's nodes" if len(mine) == len(self.hosts) else f"the {'|'.join(mine)} nodes"
            for attr, (unit, code) in units.items():
                want = getattr(role, attr)
                slots = self.host_slots(role, mine, attr) if want else None
                if slots is not None and slots < need:
                    return PendingReason(code, f"role {role.name}: needs {need} x {want} {unit} at once, {where} "
                                               f"hold at most {slots} such tasks", terminal=True, role=role.name)
            slots = self.host_slots(role, mine)
            if slots is not None and slots < need:
                asks = " + ".join(f"{v} {u}" for v, u in ((role.gpus_per_task, "GPUs"), (role.cpu_milli, "milli-CPU"),
                                                           (role.memory_mib, "MiB of memory")) if v)
                return PendingReason("never_fits_host_gang", f"role {role.name}: needs {need} x ({asks}) at once, "
                                     f"{where} hold at most {slots} such tasks (GPUs, milli-CPU and memory "
                                     f"together)", terminal=True, role=role.name)
        if len(roles) < 2:
            return None
        for index, (attr, (unit, code)) in enumerate(units.items()):
            need = sum(getattr(r, attr) * r.effective_min for r in roles)
            if not need:
                continue
            have = 0
            for f in used:
                for key, n in self.hosts.get(f, {}).items():
                    if key[1 + index] is None:
                        have = None
                        break
                    have += key[1 + index] * n
                if have is None:
                    break
            if have is not None and need > have:
                return PendingReason(code, f"the job's minimum needs {need} {unit} in all, the nodes its roles may "
                                           f"use have {have}", terminal=True)
        return None

    def cluster_gpus(self, flavor: str) -> int:
        """The GPUs of `flavor` in the whole cluster (every node, whatever its state)."""
        return sum(g * n for g, n in self.sizes[self.state.tree.root].get(flavor, {}).items())

    def beyond_cluster(self, need: int, flavor: str, why: str) -> PendingReason | None:
        """A terminal never_fits_domain when `need` GPUs of `flavor` exceed the whole cluster's, else None. The
        allocator asks it before blaming a queue's limit (`why`, said too): a job bigger than the cluster is
        refused for that, not "above queue limit" (new-user trial 10, F13)."""
        total = self.cluster_gpus(flavor)
        if need <= total:
            return None
        return PendingReason("never_fits_domain", f"can never fit: needs {need} {flavor} GPUs, more than the whole "
                             f"cluster has ({total}); {why}", terminal=True)

    def _maximal_domains(self, cap: int | None) -> list[int]:
        tree = self.state.tree
        if cap is None:
            return [tree.root]
        return [d for d, t in enumerate(tree.tiers)
                if t <= cap and (tree.parent[d] < 0 or tree.tiers[tree.parent[d]] > cap)]

    def domain_fits(self, job: JobInfo, flavor: str, d: int) -> bool:
        """Whether domain d, emptied, could hold the job's minimum (per-node packing at full capacity)."""
        key = (d, flavor, tuple((r.gpus_per_task, r.effective_min) for r in job.roles))
        fits = self._fits_cache.get(key)
        if fits is None:
            fits = self._fits_cache[key] = self._domain_fits(job, flavor, d)
        return fits

    def _domain_fits(self, job: JobInfo, flavor: str, d: int) -> bool:
        sizes = self.sizes[d].get(flavor)
        if not sizes or sum(g * n for g, n in sizes.items()) < job.gpus_min:
            return False
        return all(role.gpus_per_task == 0 or sum((g // role.gpus_per_task) * n for g, n in sizes.items())
                   >= role.effective_min for role in job.roles)

    def never_fits(self, job: JobInfo, flavor: str, cap: int | None) -> PendingReason | None:
        key = (flavor, cap, job.numa, tuple((r.name, r.gpus_per_task, r.effective_min, r.group_size, r.group_highest_tier,
                                             r.group_mode, r.cpu_milli, r.memory_mib, r.flavors) for r in job.roles))
        if key in self._cache:
            return self._cache[key]
        self._cache[key] = reason = self._check(job, flavor, cap)
        return reason

    def _check(self, job: JobInfo, flavor: str, cap: int | None) -> PendingReason | None:
        return self._check_gpus(job, flavor, cap) or self.host_gang_never_fits(job, flavor)

    def _check_gpus(self, job: JobInfo, flavor: str, cap: int | None) -> PendingReason | None:
        biggest = self.max_node.get(flavor, 0)
        for role in job.roles:
            if role.gpus_per_task > biggest:
                return PendingReason(
                    "never_fits_node", f"role {role.name}: {role.gpus_per_task} GPUs per task exceeds every {flavor} "
                    f"node (largest has {biggest})", terminal=True, role=role.name)
            # a GPU role's task runs on a node of this flavor; a CPU-only role's on any node it accepts
            host = self.host_never_fits(role, (flavor,) if role.gpus_per_task
                                        else role_flavors(role, self.max_host))
            if host is not None:
                return host
        if job.numa == "single":
            zone = self.max_zone.get(flavor, 0)
            for role in job.roles:
                if role.gpus_per_task > zone:
                    return PendingReason(
                        "never_fits_numa", f"role {role.name}: {role.gpus_per_task} GPUs per task exceed every "
                        f"{flavor} node's NUMA node (largest holds {zone}; numa: single)", terminal=True, role=role.name)
        for role in job.roles:
            if role.grouped and role.gpus_per_task:
                group = min(role.group_size, role.effective_min)
                probe = JobInfo(id="group", queue="", roles=(RoleInfo(name=role.name, tasks=group,
                                                                      gpus_per_task=role.gpus_per_task,
                                                                      min_available=group),))
                if biggest // role.gpus_per_task < group and not any(
                        self.domain_fits(probe, flavor, d) for d in self._maximal_domains(role.group_highest_tier)):
                    return PendingReason(
                        "never_fits_group", f"role {role.name}: a group of {group} tasks x {role.gpus_per_task} "
                        f"{flavor} GPUs exceeds every tier-{role.group_highest_tier} domain", terminal=True,
                        role=role.name)
        domains = self._maximal_domains(cap)
        if not domains:
            return PendingReason("never_fits_tier", f"this cluster has no domain of tier <= {cap}", terminal=True)
        need = job.gpus_min
        largest = 0
        for d in domains:
            sizes = self.sizes[d].get(flavor)
            if not sizes:
                continue
            largest = max(largest, sum(g * n for g, n in sizes.items()))
            if self.domain_fits(job, flavor, d):
                return None
        where = "this cluster" if cap is None or len(domains) == 1 and domains[0] == self.state.tree.root \
            else f"every tier-{cap} domain"
        if largest >= need:  # enough GPUs in some domain: a role's tasks do not pack onto its nodes (one node per task)
            for role in job.roles:
                if not role.gpus_per_task:
                    continue
                slots = max((sum((g // role.gpus_per_task) * n for g, n in self.sizes[d].get(flavor, {}).items())
                             for d in domains), default=0)
                if slots < role.effective_min:
                    hosts = max((sum(n for g, n in self.sizes[d].get(flavor, {}).items() if g >= role.gpus_per_task)
                                 for d in domains), default=0)
                    head = (f"can never fit: role {role.name}: {role.effective_min} tasks of {role.gpus_per_task} "
                            f"{flavor} GPUs (each task on one node) need ")
                    scope = "this cluster" if where == "this cluster" else f"one tier-{cap} domain"
                    if slots == hosts:  # one task per node: name the nodes
                        why = (f"{role.effective_min} nodes with {role.gpus_per_task} or more GPUs; {scope} has "
                               + (f"{hosts}" if scope == "this cluster" else f"at most {hosts}"))
                    else:
                        why = f"room for {role.effective_min} such tasks; the nodes of {scope} hold at most {slots}"
                    return PendingReason("never_fits_domain", head + why, terminal=True, role=role.name)
        if where == "this cluster":  # no domain constraint: the whole cluster is too small (trial 17: "in one
            # domain" for a job with topology_mode none read as a topology rule it had not asked for)
            return PendingReason(
                "never_fits_domain", f"can never fit: needs {need} {flavor} GPUs, this cluster has {largest}",
                terminal=True)
        return PendingReason(
            "never_fits_domain", f"can never fit: needs {need} {flavor} GPUs in one domain, exceeds {where} "
            f"(largest holds {largest})", terminal=True)


def never_fits(nodes: Iterable[NodeInfo], domains: Iterable[DomainInfo], roles: Iterable[RoleInfo], *,
               topology_mode: str = "none", highest_tier: int | None = None, numa: str = "prefer"
               ) -> PendingReason | None:
    """Why a job of these roles and topology constraint can never run on this cluster, whatever else runs
    (a terminal PendingReason: never_fits_flavor, never_fits_node, never_fits_cpu, never_fits_memory,
    never_fits_numa, never_fits_group, never_fits_tier, never_fits_domain, never_fits_cpu_gang,
    never_fits_memory_gang or never_fits_host_gang),
    or None when it may fit. The allocator's own rules, with topology on: the flavors every GPU role
    accepts (predicates.allowed_flavors), the tier cap (topology_policy.tier_cap), then
    Capacity.never_fits per flavor; the job never fits only when no flavor may hold it (the reason given
    is the first flavor's by name). Only the nodes' flavor, GPU count and domain and the domain tree count:
    node state, used and unhealthy GPUs do not. Raises TopologyError on an inconsistent domain tree."""
    snapshot = Snapshot(nodes=tuple(nodes), domains=tuple(domains))
    state = ClusterState(snapshot)
    job = JobInfo(id="submission", queue="", roles=tuple(roles), topology_mode=topology_mode,
                  highest_tier=highest_tier, numa=numa)
    flavors = allowed_flavors(job.roles, state.flavors)
    capacity, cap = Capacity(state), tier_cap(job, state.tree.top_tier)
    if not flavors:
        return mixed_never_fits(capacity, job, state.flavors, cap)
    reasons = [capacity.never_fits(job, flavor, cap) for flavor in sorted(flavors)]
    return reasons[0] if all(r is not None for r in reasons) else None


def mixed_never_fits(capacity: Capacity, job: JobInfo, flavors: Iterable[str], cap: int | None
                     ) -> PendingReason | None:
    """The static rule for a job whose GPU roles share no flavor (a heterogeneous job): it never fits when
    a GPU role accepts no flavor of this cluster, or no flavor it accepts could hold that role alone
    (Capacity.never_fits of the role by itself), or its roles' CPU and memory can never be packed on the
    nodes they accept (Capacity.host_gang_never_fits, each GPU role on any flavor it accepts). None = it may fit."""
    present = set(flavors)
    for role in job.roles:
        if not role.gpus_per_task:
            host = capacity.host_never_fits(role, role_flavors(role, present))
            if host is not None:
                return host
            continue
        mine = role_flavors(role, present)
        if not mine:
            return PendingReason("never_fits_flavor", f"role {role.name}: no node of flavor "
                                 f"{'|'.join(role.flavors)} in this cluster", terminal=True, role=role.name)
        alone = replace(job, roles=(role,))
        reasons = [capacity.never_fits(alone, f, cap) for f in sorted(mine)]
        if all(r is not None for r in reasons):
            return reasons[0]
    return capacity.host_gang_never_fits(job, None)
