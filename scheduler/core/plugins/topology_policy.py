"""Topology-aware domain choice and node order (DESIGN section 5, "Topology" and "Fragmentation").

A gang is placed inside the lowest tier whose domains can hold it, up to its hard `highest_tier`. Among
the feasible domains of that tier, the best fit wins: the least free capacity left after placement, then
the fullest parent (binpack across the tree), then the name. Inside the chosen domain, nodes are ordered
so that the gang spans the fewest lower domains: if one child can hold the whole request, the best-fit
such child comes first; otherwise children with the most free GPUs come first.
"""
from __future__ import annotations

from ..snapshot import JobInfo
from ..state import ClusterState


def tier_cap(job: JobInfo, top_tier: int, *, topology: bool = True) -> int:
    """The highest tier the job's gang may span: its `highest_tier` under a hard constraint (at most
    `top_tier`), else `top_tier` (soft and no constraint may spread over the whole cluster; so may every
    job with topology off)."""
    if topology and job.topology_mode == "hard" and job.highest_tier is not None:
        return min(job.highest_tier, top_tier)
    return top_tier


def candidate_domains(state: ClusterState, tier: int, flavor: str, need: int, *, binpack: bool = True):
    """Yield domains of exactly `tier` with at least `need` free GPUs of `flavor`, best fit first: least
    free, then the fullest parent, then the fewest nodes (a node without a domain, or a small domain, before a
    bigger domain that a multi-node gang may need whole), then the name (binpack off: most free first, like kube-scheduler's
    least-allocated spreading). Lazy: a search that succeeds on the first candidate costs O(log domains),
    not a sort of the tier."""
    tree, dom_free = state.tree, state.dom_free
    for _, members in state.domains_with_free(tier, flavor, need, most_free_first=not binpack):
        ranked = sorted(members, key=lambda d: (dom_free[tree.parent[d]].get(flavor, 0) if tree.parent[d] >= 0 else 0,
                                                len(tree.nodes_under[d]), tree.names[d]))
        yield from ranked


def node_order(state: ClusterState, d: int, flavor: str, need: int, *, binpack: bool = True) -> list[int]:
    """Node indices below domain d with free GPUs of `flavor`, in the order tasks should try them."""
    out: list[int] = []
    _node_order(state.tree.children, state.tree.names, state.static.direct_by_flavor, state.static.node_names,
                state.dom_free, state.free, d, flavor, need, binpack, out)
    return out


def _node_order(children, dom_names, direct_by_flavor, node_names, dom_free, free, d: int, flavor: str, need: int,
                binpack: bool, out: list[int]) -> None:
    """Append to `out` the order of domain d. Items are (-free GPUs, name, is_node, index): the child
    domains of d with free GPUs of `flavor` (in tree order), then its own nodes of `flavor` with free
    GPUs (in node order); sorting the tuples equals the stable sort on (-free, name) of that list, and
    the min of (free, name, is_node, index) is its first minimum on (free, name)."""
    kids = children[d]
    direct = direct_by_flavor[d].get(flavor, ())
    if not kids:  # a leaf domain: nodes only
        if len(direct) == 1:
            k = direct[0]
            if free[k]:
                out.append(k)
            return
        items = [(-len(free[k]), node_names[k], 1, k) for k in direct if free[k]]
    else:
        items = []
        for c in kids:
            amount = dom_free[c].get(flavor, 0)
            if amount > 0:
                items.append((-amount, dom_names[c], 0, c))
        for k in direct:
            if free[k]:
                items.append((-len(free[k]), node_names[k], 1, k))
    if not items:
        return
    items.sort()
    if binpack and -items[0][0] >= need:  # some item can hold the whole request: the best fit goes first
        first = None
        for it in items:
            if -it[0] < need:
                break
            if first is None or (-it[0], it[1], it[2], it[3]) < (-first[0], first[1], first[2], first[3]):
                first = it
        items.remove(first)
        items.insert(0, first)
    remaining = need
    for neg, _, is_node, idx in items:
        if is_node:
            out.append(idx)
        else:
            _node_order(children, dom_names, direct_by_flavor, node_names, dom_free, free, idx, flavor,
                        max(1, min(remaining, -neg)), binpack, out)
        remaining += neg
