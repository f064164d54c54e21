"""The domain tree (HyperNodes) as index arrays, built from a Snapshot (and reused while the cluster is unchanged).

Nodes hang off their lowest-tier domain. When the snapshot's domains do not form a single tree over
every node (no domains at all, several roots, or nodes without a domain), a synthetic root named
`ROOT_NAME` is added one tier above the highest tier, so every node is inside exactly one chain
node -> lowest domain -> ... -> root.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from .snapshot import Snapshot

ROOT_NAME = "cluster"


class TopologyError(ValueError):
    """The domain tree is inconsistent (unknown parent, cycle, unknown node domain)."""


@dataclass(slots=True)
class DomainTree:
    names: list[str]  # domain index -> name
    tiers: list[int]
    parent: list[int]  # -1 for the root
    children: list[list[int]]
    direct_nodes: list[list[int]]  # node indices hanging directly off the domain
    nodes_under: list[list[int]]  # every node index below the domain
    node_chain: list[tuple[int, ...]]  # node index -> domain indices, lowest first, root last
    root: int
    tier_levels: list[int]  # distinct tiers, ascending
    by_tier: dict[int, list[int]]  # tier -> domain indices of exactly that tier
    index: dict[str, int]

    @property
    def top_tier(self) -> int:
        return self.tiers[self.root]


def build_tree(snapshot: Snapshot) -> DomainTree:
    """Index the snapshot's domains. Raises TopologyError on an unknown parent or node domain, or a cycle."""
    names = [d.name for d in snapshot.domains]
    index = {n: i for i, n in enumerate(names)}
    if len(index) != len(names):
        raise TopologyError("duplicate domain name")
    tiers = [d.tier for d in snapshot.domains]
    parent = []
    for d in snapshot.domains:
        if d.parent is not None and d.parent not in index:
            raise TopologyError(f"domain {d.name}: unknown parent {d.parent!r}")
        parent.append(index[d.parent] if d.parent is not None else -1)
    roots = [i for i, p in enumerate(parent) if p == -1]
    orphans = any(n.domain is None for n in snapshot.nodes)
    if len(roots) == 1 and not orphans:
        root = roots[0]
    else:
        root = len(names)
        names.append(ROOT_NAME if ROOT_NAME not in index else f"{ROOT_NAME}-root")
        tiers.append(max(tiers, default=0) + 1)
        parent.append(-1)
        for r in roots:
            parent[r] = root
        index[names[root]] = root
    n_dom = len(names)
    children: list[list[int]] = [[] for _ in range(n_dom)]
    for i, p in enumerate(parent):
        if p >= 0:
            children[p].append(i)
    # cycle check: every domain must reach the root
    for i in range(n_dom):
        seen, j = 0, i
        while parent[j] != -1:
            j = parent[j]
            seen += 1
            if seen > n_dom:
                raise TopologyError(f"domain {names[i]}: parent chain forms a cycle")
        if j != root:
            raise TopologyError(f"domain {names[i]}: not under the root")
    direct_nodes: list[list[int]] = [[] for _ in range(n_dom)]
    node_chain: list[tuple[int, ...]] = []
    chains: dict[int, tuple[int, ...]] = {}
    for k, node in enumerate(snapshot.nodes):
        if node.domain is None:
            d = root
        elif node.domain in index:
            d = index[node.domain]
        else:
            raise TopologyError(f"node {node.name}: unknown domain {node.domain!r}")
        direct_nodes[d].append(k)
        chain = chains.get(d)
        if chain is None:
            c, j = [d], d
            while parent[j] != -1:
                j = parent[j]
                c.append(j)
            chain = chains[d] = tuple(c)
        node_chain.append(chain)
    nodes_under: list[list[int]] = [[] for _ in range(n_dom)]
    for k, chain in enumerate(node_chain):
        for d in chain:
            nodes_under[d].append(k)
    by_tier: dict[int, list[int]] = {}
    for i, t in enumerate(tiers):
        by_tier.setdefault(t, []).append(i)
    return DomainTree(names=names, tiers=tiers, parent=parent, children=children, direct_nodes=direct_nodes,
                      nodes_under=nodes_under, node_chain=node_chain, root=root,
                      tier_levels=sorted(by_tier), by_tier=by_tier, index=index)


def common_domain(tree: DomainTree, nodes: list[int]) -> int:
    """The lowest domain holding every node index in `nodes` (the root when `nodes` is empty)."""
    if not nodes:
        return tree.root
    common = set(tree.node_chain[nodes[0]])
    for k in nodes[1:]:
        common.intersection_update(tree.node_chain[k])
    return min(common, key=lambda d: (tree.tiers[d], tree.names[d]))


class ClusterStatic:
    """What a cycle derives from the cluster's shape alone: the domain tree and per-node / per-domain
    indexes that depend only on the domains and each node's (name, flavor, GPU count, domain). Shared,
    read-only, by the cycles of an unchanged cluster (see `cluster_static`); the `capacity` caches only
    ever gain entries that are functions of that shape."""

    __slots__ = ("tree", "node_index", "flavors", "node_names", "node_flavor", "flavor_gpus", "direct_by_flavor",
                 "dom_flavors", "hist_width", "hist_off", "hist_size", "capacity", "start", "lock")

    def __init__(self, snapshot: Snapshot, tree: DomainTree | None = None):
        nodes = snapshot.nodes
        self.tree = tree = tree if tree is not None else build_tree(snapshot)
        self.node_index = {n.name: i for i, n in enumerate(nodes)}
        self.flavors = frozenset(n.flavor for n in nodes)
        self.node_names = [n.name for n in nodes]
        self.node_flavor = {n.name: n.flavor for n in nodes}
        flavor_gpus: dict[str, int] = {}
        for n in nodes:
            flavor_gpus[n.flavor] = flavor_gpus.get(n.flavor, 0) + n.gpus
        self.flavor_gpus = flavor_gpus  # every node's GPUs, any state, per flavor
        # domain -> flavor -> node indices hanging directly off it (tree.direct_nodes order)
        self.direct_by_flavor: list[dict[str, list[int]]] = []
        for d in range(len(tree.names)):
            per: dict[str, list[int]] = {}
            for k in tree.direct_nodes[d]:
                per.setdefault(nodes[k].flavor, []).append(k)
            self.direct_by_flavor.append(per)
        # domain -> the flavors of the nodes below it, in order of first appearance in the node list
        dom_flavors: list[dict[str, None]] = [{} for _ in tree.names]
        for k, n in enumerate(nodes):
            for d in tree.node_chain[k]:
                dom_flavors[d].setdefault(n.flavor)
        self.dom_flavors = [tuple(f) for f in dom_flavors]
        # ClusterState's free-count histogram: one slot of hist_width counters per (domain, flavor)
        self.hist_width = width = max((n.gpus for n in nodes), default=0) + 1
        self.hist_off: list[dict[str, int]] = []
        slot = 0
        for flavors in self.dom_flavors:
            self.hist_off.append({f: (slot + i) * width for i, f in enumerate(flavors)})
            slot += len(flavors)
        self.hist_size = slot * width
        self.start = None  # state.ClusterState's capacity at the last snapshot seen (under lock)
        self.lock = threading.Lock()
        self.capacity = None  # plugins.feasibility.CapacityStatic, built on first use


_last_static: tuple | None = None  # (domains tuple, nodes tuple, ClusterStatic): the last cluster seen


def _same_shape(nodes: tuple, seen: tuple) -> bool:
    if nodes is seen:
        return True
    if len(nodes) != len(seen):
        return False
    for a, b in zip(nodes, seen):  # NodeInfo is frozen: an identical object has identical fields
        if a is not b and (a.name != b.name or a.flavor != b.flavor or a.gpus != b.gpus or a.domain != b.domain):
            return False
    return True


def cluster_static(snapshot: Snapshot) -> ClusterStatic:
    """The ClusterStatic of the snapshot's cluster, reused from the previous call when its domains are equal
    and every node has the same (name, flavor, gpus, domain) in the same order (identity is checked first,
    full equality only for objects that differ): exact, never keyed on id(). Raises TopologyError."""
    global _last_static
    domains, nodes = tuple(snapshot.domains), tuple(snapshot.nodes)
    last = _last_static
    if last is not None and (domains is last[0] or domains == last[0]) and _same_shape(nodes, last[1]):
        static = last[2]
    else:
        static = ClusterStatic(snapshot)
    _last_static = (domains, nodes, static)
    return static
