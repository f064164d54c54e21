"""Mutable free-capacity bookkeeping for one cycle, with per-domain aggregates kept incrementally.

`ClusterState` starts from a Snapshot: per node the set of free healthy GPU indices (empty for nodes
that are not ready), free CPU (millicores) and memory (MiB; None = unconstrained), and per (domain,
flavor) the number of free GPUs below it. `take` and `give` move one task's resources and update the
aggregates along the node's domain chain (depth = number of tiers), so a job that cannot fit a domain
is rejected without looking at its nodes.
"""
from __future__ import annotations

from bisect import bisect_left, insort
from collections import defaultdict

from .snapshot import NodeInfo, Snapshot
from .topology import ClusterStatic, DomainTree


class DoubleBindError(AssertionError):
    """An attempt to take a GPU that is not free: a bug in a policy, never an expected outcome."""


class ClusterState:
    __slots__ = ("nodes", "tree", "free", "cpu_free", "mem_free", "dom_free", "flavors", "node_index",
                 "healthy_gpus", "buckets", "bucket_keys", "free_hist", "hist_width", "static")

    def __init__(self, snapshot: Snapshot, tree: DomainTree, static: ClusterStatic | None = None):
        if static is None or static.tree is not tree:
            static = ClusterStatic(snapshot, tree)
        self.static = static
        nodes = self.nodes = snapshot.nodes
        self.tree = tree
        self.node_index = static.node_index
        self.flavors: set[str] = set(static.flavors)
        free_lists: list[list[int]] = []
        self.free = free_lists
        self.cpu_free: list[int | None] = []
        self.mem_free: list[int | None] = []
        self.healthy_gpus: list[int] = []
        # per domain and flavor: how many nodes below it have exactly f free GPUs (list indexed by f), so
        # how many tasks of g GPUs its nodes could take at most (pack_slots) is known without a node scan
        width = self.hist_width = max((n.gpus for n in nodes), default=0) + 1
        # every (domain, flavor) below a node of that flavor gets an entry, 0 included
        dom_free: list[dict[str, int]] = []
        free_hist: list[dict[str, list[int]]] = []
        for flavors in static.dom_flavors:
            dom_free.append(defaultdict(int, dict.fromkeys(flavors, 0)))
            free_hist.append({f: [0] * width for f in flavors})
        self.dom_free, self.free_hist = dom_free, free_hist
        healthy_append, free_append = self.healthy_gpus.append, free_lists.append
        cpu_append, mem_append = self.cpu_free.append, self.mem_free.append
        chains = tree.node_chain
        for k, n in enumerate(nodes):
            if n.schedulable:
                bad, used = n.unhealthy, n.used
                healthy = [g for g in range(n.gpus) if g not in bad] if bad else list(range(n.gpus))
                healthy_append(len(healthy))
                free = [g for g in healthy if g not in used] if used else healthy
            else:
                healthy_append(0)
                free = []
            free_append(free)
            cpu_append(n.cpu_milli - n.cpu_used if n.cpu_milli else None)
            mem_append(n.memory_mib - n.memory_used if n.memory_mib else None)
            f, flavor = len(free), n.flavor
            for d in chains[k]:
                if f:
                    dom_free[d][flavor] += f
                free_hist[d][flavor][f] += 1
        # per (tier, flavor): free GPUs -> domains with exactly that many free, and the sorted free values,
        # so the best-fit domain for a request is found without scanning every domain of the tier
        self.buckets: dict[tuple[int, str], dict[int, set[int]]] = defaultdict(dict)
        self.bucket_keys: dict[tuple[int, str], list[int]] = defaultdict(list)
        tiers, buckets = tree.tiers, self.buckets
        for d, per_flavor in enumerate(dom_free):
            tier = tiers[d]
            for flavor, free in per_flavor.items():
                members = buckets[(tier, flavor)].get(free)
                if members is None:
                    buckets[(tier, flavor)][free] = {d}
                else:
                    members.add(d)
        for key, per_free in buckets.items():
            self.bucket_keys[key] = sorted(per_free)

    def _bucket_add(self, key: tuple[int, str], free: int, d: int) -> None:
        buckets = self.buckets[key]
        members = buckets.get(free)
        if members is None:
            buckets[free] = {d}
            insort(self.bucket_keys[key], free)
        else:
            members.add(d)

    def _bucket_move(self, d: int, flavor: str, old: int, new: int) -> None:
        key = (self.tree.tiers[d], flavor)
        members = self.buckets[key][old]
        members.discard(d)
        if not members:
            del self.buckets[key][old]
            keys = self.bucket_keys[key]
            del keys[bisect_left(keys, old)]
        self._bucket_add(key, new, d)

    def domains_with_free(self, tier: int, flavor: str, need: int):
        """Yield (free, domain set) for domains of `tier` with at least `need` free GPUs of `flavor`,
        least free first (best fit). The sets are live: copy before mutating the state."""
        key = (tier, flavor)
        keys = self.bucket_keys.get(key)
        if not keys:
            return
        buckets = self.buckets[key]
        for free in keys[bisect_left(keys, need):]:
            members = buckets.get(free)
            if members:
                yield free, members

    def pack_slots(self, d: int, flavor: str, gpus_per_task: int) -> int:
        """Upper bound on the tasks of `gpus_per_task` (> 0) GPUs that the `flavor` nodes below domain d
        could take now: sum over nodes of free GPUs // gpus_per_task (CPU and memory not counted)."""
        hist = self.free_hist[d].get(flavor)
        if not hist:
            return 0
        return sum(count * (f // gpus_per_task) for f, count in enumerate(hist) if count and f >= gpus_per_task)

    def domain_free(self, d: int, flavor: str) -> int:
        return self.dom_free[d].get(flavor, 0)

    def fits(self, k: int, gpus: int, cpu: int, mem: int) -> bool:
        """Whether node k can take one task of `gpus` GPUs, `cpu` millicores and `mem` MiB now."""
        if not self.nodes[k].schedulable or len(self.free[k]) < gpus:
            return False
        c, m = self.cpu_free[k], self.mem_free[k]
        return (c is None or c >= cpu) and (m is None or m >= mem)

    def pick_gpus(self, k: int, count: int) -> tuple[int, ...]:
        """Choose `count` free GPUs on node k, inside one NUMA node when one has enough (the fullest such
        NUMA node, best fit), else from the NUMA nodes with most free GPUs first."""
        free = self.free[k]
        if count == 0:
            return ()
        numa = self.nodes[k].gpu_numa
        if not numa:
            return tuple(sorted(free)[:count])
        groups: dict[int, list[int]] = defaultdict(list)
        for g in free:
            groups[numa[g] if g < len(numa) else -1].append(g)
        fitting = [gs for gs in groups.values() if len(gs) >= count]
        if fitting:
            best = min(fitting, key=lambda gs: (len(gs), min(gs)))
            return tuple(sorted(best)[:count])
        picked: list[int] = []
        for gs in sorted(groups.values(), key=lambda gs: (-len(gs), min(gs))):
            picked.extend(sorted(gs)[: count - len(picked)])
            if len(picked) == count:
                break
        return tuple(picked)

    def take(self, k: int, gpus: tuple[int, ...], cpu: int, mem: int) -> None:
        free = self.free[k]
        for g in gpus:
            try:
                free.remove(g)
            except ValueError:
                raise DoubleBindError(f"GPU {g} of node {self.nodes[k].name} is not free") from None
        if self.cpu_free[k] is not None:
            self.cpu_free[k] -= cpu
        if self.mem_free[k] is not None:
            self.mem_free[k] -= mem
        if gpus:
            self._shift(k, -len(gpus))

    def give(self, k: int, gpus: tuple[int, ...], cpu: int, mem: int) -> None:
        self.free[k].extend(gpus)
        if self.cpu_free[k] is not None:
            self.cpu_free[k] += cpu
        if self.mem_free[k] is not None:
            self.mem_free[k] += mem
        if gpus:
            self._shift(k, len(gpus))

    def _widen(self, width: int) -> None:
        for per_flavor in self.free_hist:
            for hist in per_flavor.values():
                hist.extend([0] * (width - len(hist)))
        self.hist_width = width

    def _shift(self, k: int, delta: int) -> None:
        """Node k's free GPUs changed by delta (already applied to self.free[k])."""
        flavor = self.nodes[k].flavor
        dom_free, free_hist = self.dom_free, self.free_hist
        now = len(self.free[k])
        was = now - delta
        if now >= self.hist_width:  # only if a snapshot lists more free GPUs than the node has
            self._widen(now + 1)
        for d in self.tree.node_chain[k]:
            old = dom_free[d][flavor]
            dom_free[d][flavor] = old + delta
            self._bucket_move(d, flavor, old, old + delta)
            hist = free_hist[d][flavor]
            hist[was] -= 1
            hist[now] += 1
