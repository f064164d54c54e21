"""Mutable free-capacity bookkeeping for one cycle, with per-domain aggregates kept incrementally.

`ClusterState` starts from a Snapshot: per node the set of free healthy GPU indices (empty for nodes
that are not ready), free CPU (millicores) and memory (MiB; None = unconstrained), and per (domain,
flavor) the number of free GPUs below it. `take` and `give` move one task's resources and update the
aggregates along the node's domain chain (depth = number of tiers), so a job that cannot fit a domain
is rejected without looking at its nodes.
"""
from __future__ import annotations

from collections import defaultdict

from .snapshot import NodeInfo, Snapshot
from .topology import DomainTree


class DoubleBindError(AssertionError):
    """An attempt to take a GPU that is not free: a bug in a policy, never an expected outcome."""


class ClusterState:
    __slots__ = ("nodes", "tree", "free", "cpu_free", "mem_free", "dom_free", "flavors", "node_index",
                 "capacity_gpus", "healthy_gpus")

    def __init__(self, snapshot: Snapshot, tree: DomainTree):
        self.nodes: tuple[NodeInfo, ...] = snapshot.nodes
        self.tree = tree
        self.node_index = {n.name: i for i, n in enumerate(snapshot.nodes)}
        self.free: list[list[int]] = []
        self.cpu_free: list[int | None] = []
        self.mem_free: list[int | None] = []
        self.healthy_gpus: list[int] = []
        self.dom_free: list[dict[str, int]] = [defaultdict(int) for _ in tree.names]
        self.flavors: set[str] = set()
        for k, n in enumerate(snapshot.nodes):
            healthy = [g for g in range(n.gpus) if g not in n.unhealthy]
            self.healthy_gpus.append(len(healthy) if n.schedulable else 0)
            free = [g for g in healthy if g not in n.used] if n.schedulable else []
            self.free.append(free)
            self.cpu_free.append(n.cpu_milli - n.cpu_used if n.cpu_milli else None)
            self.mem_free.append(n.memory_mib - n.memory_used if n.memory_mib else None)
            self.flavors.add(n.flavor)
            if free:
                for d in tree.node_chain[k]:
                    self.dom_free[d][n.flavor] += len(free)

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
            flavor = self.nodes[k].flavor
            for d in self.tree.node_chain[k]:
                self.dom_free[d][flavor] -= len(gpus)

    def give(self, k: int, gpus: tuple[int, ...], cpu: int, mem: int) -> None:
        self.free[k].extend(gpus)
        if self.cpu_free[k] is not None:
            self.cpu_free[k] += cpu
        if self.mem_free[k] is not None:
            self.mem_free[k] += mem
        if gpus:
            flavor = self.nodes[k].flavor
            for d in self.tree.node_chain[k]:
                self.dom_free[d][flavor] += len(gpus)
