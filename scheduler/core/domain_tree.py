"""The domain tree (HyperNodes) as index arrays, built from a Snapshot (cache.ClusterStatic keeps it, with
the other indexes of the cluster's shape, while the cluster is unchanged).

Nodes hang off their lowest-tier domain. A node without a domain (a rack not yet labelled, or every node
of a cluster with no domains at all, the local mode's) is a tier-1 domain of its own, named
`node_domain(name)` ("node:<name>"): its GPUs are one scale-up unit, so an unconstrained job that fits one
node is placed best-fit among them and the labelled domains alike (a one-task job: the tightest node of
either kind, session._node_fit_first), while no gang spans two of them under a tier-1 limit. When the
snapshot's domains do not form a single tree over every node (no domains at all, several roots, or nodes
without a domain), a synthetic root named `ROOT_NAME` is added one tier above the highest tier, so every
node is inside exactly one chain node -> lowest domain -> ... -> root. A cluster with no domains is thus
two tiers: tier 1, each node its own domain, and tier 2, `ROOT_NAME` over them all (the API's domain tree,
the topology map, the tiers a job may name and the metrics read the same; new-user trial 23: the local mode
was one tier-2 domain to the engine and one tier-1 domain per node to the pages). Such a tree is
`no_topology`: its tier 1 is there for the jobs that name it (highest_tier, preferred_tier,
group_highest_tier: inside one node) and for the metrics (domain completeness counts the nodes); a job
that names no tier is placed over the whole cluster as when the cluster was one domain
(Session.tier_levels), and its Binding names the lowest domain that holds its tasks
(label_bindings: `node:<name>` (tier 1) when one node holds it).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .snapshot import Snapshot

ROOT_NAME = "cluster"
NODE_DOMAIN_PREFIX = "node:"


def root_name(domain_names) -> str:
    """The name of the synthetic root build_tree adds over `domain_names` (the domains' and nodes' own names):
    ROOT_NAME, or "cluster-root" when a domain is named ROOT_NAME."""
    return ROOT_NAME if ROOT_NAME not in domain_names else f"{ROOT_NAME}-root"


def node_domain(node_name: str) -> str:
    """The name of the tier-1 domain a node without a domain forms on its own."""
    return NODE_DOMAIN_PREFIX + node_name


def is_node_domain(name: str) -> bool:
    """Whether a domain name is a domainless node's own (node_domain), not a domain of the topology."""
    return name.startswith(NODE_DOMAIN_PREFIX)


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
    no_topology: bool = False  # no domains at all: tier 1 is the nodes' own domains (module docstring)

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
    top = max(tiers, default=0)
    own: dict[int, int] = {}  # node index -> the tier-1 domain of a node without a domain
    for k, node in enumerate(snapshot.nodes):
        if node.domain is None:
            name = node_domain(node.name)
            if name in index:
                raise TopologyError(f"domain {name}: the name is kept for node {node.name}, which has no domain")
            own[k] = index[name] = len(names)
            names.append(name)
            tiers.append(1)
            parent.append(-1)
    roots = [i for i, p in enumerate(parent) if p == -1]
    orphans = any(n.domain is None for n in snapshot.nodes)
    if len(roots) == 1 and not orphans:
        root = roots[0]
    else:
        root = len(names)
        names.append(root_name(index))
        tiers.append(max(top, 1) + 1)
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
            d = own.get(k, root)
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
                      tier_levels=sorted(by_tier), by_tier=by_tier, index=index,
                      no_topology=not snapshot.domains)


def common_domain(tree: DomainTree, nodes: list[int]) -> int:
    """The lowest domain holding every node index in `nodes` (the root when `nodes` is empty)."""
    if not nodes:
        return tree.root
    common = set(tree.node_chain[nodes[0]])
    for k in nodes[1:]:
        common.intersection_update(tree.node_chain[k])
    return min(common, key=lambda d: (tree.tiers[d], tree.names[d]))


def label_bindings(tree: DomainTree, node_index: dict[str, int], bindings: list) -> list:
    """`bindings` (a list of Binding) with each whole-GPU binding of a `no_topology` tree named by the lowest
    domain holding its tasks (common_domain): a job placed over the whole cluster that landed on one node is
    "node:<name>" (tier 1), not the root. Other trees and sharing's bindings (domain "") as they are. Returns
    a new list when one changed, else `bindings`."""
    if not tree.no_topology:
        return bindings
    root_name = tree.names[tree.root]
    out = None
    for i, b in enumerate(bindings):
        if b.domain != root_name or not b.tasks:
            continue
        d = common_domain(tree, sorted({node_index[p.node] for p in b.tasks}))
        if d != tree.root:
            if out is None:
                out = list(bindings)
            out[i] = replace(b, domain=tree.names[d], tier=tree.tiers[d])
    return bindings if out is None else out
