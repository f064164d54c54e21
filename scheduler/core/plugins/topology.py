"""Topology-aware domain choice and node order (DESIGN section 5, "Topology" and "Fragmentation").

A gang is placed inside the lowest tier whose domains can hold it, up to its hard `highest_tier`. Among
the feasible domains of that tier, the best fit wins: the least free capacity left after placement, then
the fullest parent (binpack across the tree), then the name. Inside the chosen domain, nodes are ordered
so that the gang spans the fewest lower domains: if one child can hold the whole request, the best-fit
such child comes first; otherwise children with the most free GPUs come first.
"""
from __future__ import annotations

from ..state import ClusterState
from ..topology import DomainTree


def candidate_domains(state: ClusterState, tier: int, flavor: str, need: int):
    """Yield domains of exactly `tier` with at least `need` free GPUs of `flavor`, best fit first: least
    free, then the fullest parent, then the name. Lazy: a search that succeeds on the first candidate
    costs O(log domains), not a sort of the tier."""
    tree, dom_free = state.tree, state.dom_free
    for _, members in state.domains_with_free(tier, flavor, need):
        ranked = sorted(members, key=lambda d: (dom_free[tree.parent[d]].get(flavor, 0) if tree.parent[d] >= 0 else 0,
                                                tree.names[d]))
        yield from ranked


def node_order(state: ClusterState, d: int, flavor: str, need: int, *, binpack: bool = True) -> list[int]:
    """Node indices below domain d with free GPUs of `flavor`, in the order tasks should try them."""
    tree, dom_free, free = state.tree, state.dom_free, state.free
    nodes = state.nodes
    items = [(dom_free[c].get(flavor, 0), 0, c) for c in tree.children[d] if dom_free[c].get(flavor, 0) > 0]
    items += [(len(free[k]), 1, k) for k in tree.direct_nodes[d] if free[k] and nodes[k].flavor == flavor]
    if not items:
        return []
    if binpack:
        fitting = [it for it in items if it[0] >= need]
        if fitting:
            first = min(fitting, key=lambda it: (it[0], _name(tree, state, it)))
            rest = sorted((it for it in items if it is not first), key=lambda it: (-it[0], _name(tree, state, it)))
            items = [first, *rest]
        else:
            items.sort(key=lambda it: (-it[0], _name(tree, state, it)))
    else:  # spread: least allocated first (kube-scheduler's default scoring)
        items.sort(key=lambda it: (-it[0], _name(tree, state, it)))
    out: list[int] = []
    remaining = need
    for amount, is_node, idx in items:
        if is_node:
            out.append(idx)
        else:
            out.extend(node_order(state, idx, flavor, max(1, min(remaining, amount)), binpack=binpack))
        remaining -= amount
    return out


def _name(tree: DomainTree, state: ClusterState, item: tuple) -> str:
    return state.nodes[item[2]].name if item[1] else tree.names[item[2]]
