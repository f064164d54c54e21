"""Cluster metrics of DESIGN section 6, computed from free capacity in one pass over the nodes.

- allocation_rate = allocated GPUs / schedulable GPUs (healthy GPUs of ready nodes). Allocated GPUs are
  those bound to a job (running, starting or stopping); GPUs held for a job that has not started (a
  backfill or drain reservation, an eviction beneficiary's hold) do no work and are counted apart as
  held_gpus, never as allocated nor as free: schedulable = allocated + held + free.
- largest_runnable[t] = the most GPUs one job could get right now inside one domain of tier <= t: the
  GPUs of whole free nodes of one flavor for multi-node shapes, or the largest free block on one node,
  whichever is larger.
- fragmentation_rate = 1 - largest_runnable[top tier] / free GPUs (0 when nothing is free); also given
  per tier as fragmentation_by_tier.
- domain_completeness = share of lowest-tier domains whose healthy GPUs are all free or all used.
- by_group (metrics_by_group): the same figures over the nodes of one GPU flavor and one node size
  ("H100 x8") alone, so free GPUs on small machines cannot hide that no big machine is free.
"""
from __future__ import annotations

from itertools import compress
from operator import ne, or_
from typing import Iterable

from .state import ClusterState


def cluster_metrics(state: ClusterState, nodes: Iterable[int] | None = None, *, held: int = 0,
                    cache=None) -> dict:
    """The metrics of the state's free capacity. held: GPUs of the state taken by holds (Session.holds),
    not by jobs: counted as held_gpus, not allocated. Keys: schedulable_gpus, allocated_gpus, held_gpus,
    free_gpus, allocation_rate, largest_runnable {tier: GPUs}, fragmentation_rate, fragmentation_by_tier,
    domain_completeness, top_tier. `nodes` (node indices, in cluster order) restricts them to those nodes
    (metrics_by_group). cache: the engine's EngineCache: the per-domain figures are kept there (MetricsBook)
    and brought up to date from the nodes whose free or healthy GPU count changed since its last call for
    the same node set, instead of a walk of every node's domain chain (the same figures)."""
    if cache is not None:
        key = None if nodes is None else tuple(nodes)
        with cache.lock:
            book = cache.metrics_book(state.static, key, lambda: MetricsBook(state, key))
            return book.metrics(state, held)
    tree = state.tree
    n_dom = len(tree.names)
    whole: dict[tuple[int, str], int] = {}  # (domain, flavor) -> free GPUs of wholly free nodes below it
    block = [0] * n_dom
    dom_free = [0] * n_dom
    dom_healthy = [0] * n_dom
    schedulable = free_total = 0
    all_nodes = state.nodes
    for k in (range(len(all_nodes)) if nodes is None else nodes):
        node = all_nodes[k]
        healthy = state.healthy_gpus[k]
        f = len(state.free[k])
        schedulable += healthy
        free_total += f
        is_whole = healthy > 0 and f == healthy
        for d in tree.node_chain[k]:
            dom_free[d] += f
            dom_healthy[d] += healthy
            if f > block[d]:
                block[d] = f
            if is_whole:
                key = (d, node.flavor)
                whole[key] = whole.get(key, 0) + f
    best_whole = [0] * n_dom
    for (d, _), v in whole.items():
        if v > best_whole[d]:
            best_whole[d] = v
    best_at_tier: dict[int, int] = {}
    for d in range(n_dom):
        value = max(block[d], best_whole[d])
        t = tree.tiers[d]
        best_at_tier[t] = max(best_at_tier.get(t, 0), value)
    largest: dict[int, int] = {}
    running_max = 0
    for t in tree.tier_levels:
        running_max = max(running_max, best_at_tier.get(t, 0))
        largest[t] = running_max
    frag_by_tier = {t: (1 - v / free_total if free_total else 0.0) for t, v in largest.items()}
    lowest = tree.by_tier[tree.tier_levels[0]]
    counted = [d for d in lowest if dom_healthy[d] > 0]
    complete = sum(1 for d in counted if dom_free[d] in (0, dom_healthy[d]))
    return _figures(tree, schedulable, free_total, held, largest, frag_by_tier,
                    complete / len(counted) if counted else 1.0)


def _figures(tree, schedulable: int, free_total: int, held: int, largest: dict, frag_by_tier: dict,
             completeness: float) -> dict:
    """cluster_metrics' answer from its parts (one shape for the full walk and MetricsBook)."""
    allocated = schedulable - free_total - held
    return {
        "schedulable_gpus": schedulable,
        "allocated_gpus": allocated,
        "held_gpus": held,
        "free_gpus": free_total,
        "allocation_rate": allocated / schedulable if schedulable else 0.0,
        "largest_runnable": largest,
        "fragmentation_rate": frag_by_tier[tree.top_tier],
        "fragmentation_by_tier": frag_by_tier,
        "domain_completeness": completeness,
        "top_tier": tree.top_tier,
    }


class MetricsBook:
    """cluster_metrics' per-domain figures for one node set of one cluster shape, kept between cycles and
    updated node by node: per domain the free and healthy GPUs below it, how many nodes below it have each
    free count (its largest free block is the largest count present), the free GPUs of its wholly free nodes
    per flavor; per tier how many domains have each value max(block, best whole-node pool). Units: GPUs."""

    def __init__(self, state: ClusterState, nodes: tuple[int, ...] | None):
        tree = state.tree
        n = len(tree.names)
        self.index = tuple(range(len(state.nodes))) if nodes is None else nodes
        self.whole_range = self.index == tuple(range(len(state.nodes)))  # members: every node, in order
        self.free = [-1] * len(self.index)  # per member: free GPUs when last counted (-1: never)
        self.healthy = [0] * len(self.index)
        self.dom_free, self.dom_healthy = [0] * n, [0] * n
        self.counts: list[dict[int, int]] = [{} for _ in range(n)]  # domain -> free count -> nodes below
        self.whole: list[dict[str, int]] = [{} for _ in range(n)]  # domain -> flavor -> wholly free GPUs
        self.value = [0] * n  # max(largest block, largest whole-node pool of one flavor)
        self.tier_values: dict[int, dict[int, int]] = {}  # tier -> value -> domains with it
        for d in range(n):
            per = self.tier_values.setdefault(tree.tiers[d], {})
            per[0] = per.get(0, 0) + 1
        self.lowest = frozenset(tree.by_tier[tree.tier_levels[0]])
        self.counted = 0  # lowest-tier domains with healthy GPUs
        self.complete = 0  # of those, all free or all used
        self.free_nodes = 0  # members whose healthy GPUs (some) are all free, as of the last `metrics`
        self.answer: dict | None = None  # the dict the last `metrics` returned (identity: metrics_by_group's `whole`)
        self.free_total = 0  # free / healthy GPUs of the members as of the last `metrics` (kept per changed node)
        self.healthy_total = 0
        # what the last `metrics` saw, for books of fewer nodes brought up to date right after it (`source`): its
        # count, the node indices whose counts changed, and every member's free and healthy GPUs (lists of the
        # state it read, by member position; for a book of every node, by node index)
        self.sync = 0
        self.changed: list[int] = []
        self.frees_now: list[int] = []
        self.healthies_now: list[int] = []
        self.seen: int | None = None  # the source book's `sync` this book was last brought up to date with
        self.pos = None if self.whole_range else {k: i for i, k in enumerate(self.index)}  # node -> member position

    def _flags(self, d: int) -> tuple[bool, bool]:
        healthy = self.dom_healthy[d]
        return healthy > 0, healthy > 0 and self.dom_free[d] in (0, healthy)

    def metrics(self, state: ClusterState, held: int, source: MetricsBook | None = None) -> dict:
        """cluster_metrics' figures of the members on `state`, the book brought up to date with it. source: the
        book of every node, brought up to date with this same state just before (metrics_by_group): when this
        book was last brought up to date right after that book's previous update, the nodes that changed are
        the source's changed nodes among the members (no pass over the members)."""
        tree = state.tree
        index, free, healthy_gpus = self.index, state.free, state.healthy_gpus
        old_free, old_healthy = self.free, self.healthy
        pos = self.pos
        if source is not None and pos is not None and self.seen is not None and self.seen == source.sync - 1:
            frees, healthies = source.frees_now, source.healthies_now  # by node index
            items = [(pos[k], frees[k], healthies[k]) for k in source.changed if k in pos]
        else:
            if self.whole_range:  # every node: no indexing (C-level passes, no Python loop over the nodes)
                frees = list(map(len, free))
                healthies = healthy_gpus  # read only here; the book keeps its own copy (self.healthy)
            else:
                frees = list(map(len, map(free.__getitem__, index)))
                healthies = list(map(healthy_gpus.__getitem__, index))
            if healthies == old_healthy:  # the usual case: only free counts moved
                changed = list(compress(range(len(index)), map(ne, frees, old_free)))
            else:
                changed = list(compress(range(len(index)), map(or_, map(ne, frees, old_free),
                                                                 map(ne, healthies, old_healthy))))
            items = [(i, frees[i], healthies[i]) for i in changed]
            if self.whole_range:
                self.changed, self.frees_now, self.healthies_now = changed, frees, healthies
        self.sync += 1
        self.seen = source.sync if source is not None else None
        touched: set[int] = set()
        chains, all_nodes = tree.node_chain, state.nodes
        counts, whole, dom_free, dom_healthy, lowest = self.counts, self.whole, self.dom_free, self.dom_healthy, self.lowest
        for i, nf, nh in items:
            k = index[i]
            of, oh = old_free[i], old_healthy[i]
            self.free_total += nf - max(of, 0)
            self.healthy_total += nh - oh
            was_free, is_free = of >= 0 and oh > 0 and of == oh, nh > 0 and nf == nh
            self.free_nodes += is_free - was_free
            old_pool = of if was_free else 0
            new_pool = nf if is_free else 0
            flavor = all_nodes[k].flavor
            for d in chains[k]:
                if d in lowest and d not in touched:
                    c, w = self._flags(d)
                    self.counted -= c
                    self.complete -= w
                touched.add(d)
                c = counts[d]
                if of >= 0:
                    if c[of] == 1:
                        del c[of]
                    else:
                        c[of] -= 1
                c[nf] = c.get(nf, 0) + 1
                dom_free[d] += nf - max(of, 0)
                dom_healthy[d] += nh - oh
                if new_pool != old_pool:
                    pools = whole[d]
                    pools[flavor] = pools.get(flavor, 0) + new_pool - old_pool
            old_free[i], old_healthy[i] = nf, nh
        tiers, value, tier_values = tree.tiers, self.value, self.tier_values
        for d in touched:
            v = max(max(counts[d], default=0), max(whole[d].values(), default=0))
            if v != value[d]:
                per = tier_values[tiers[d]]
                if per[value[d]] == 1:
                    del per[value[d]]
                else:
                    per[value[d]] -= 1
                per[v] = per.get(v, 0) + 1
                value[d] = v
            if d in lowest:
                c, w = self._flags(d)
                self.counted += c
                self.complete += w
        schedulable, free_total = self.healthy_total, self.free_total  # sum of the members' counts (kept per node)
        largest: dict[int, int] = {}
        running_max = 0
        for t in tree.tier_levels:
            per = tier_values.get(t)
            running_max = max(running_max, max(per) if per else 0)
            largest[t] = running_max
        frag_by_tier = {t: (1 - v / free_total if free_total else 0.0) for t, v in largest.items()}
        self.answer = _figures(tree, schedulable, free_total, held, largest, frag_by_tier,
                               self.complete / self.counted if self.counted else 1.0)
        return self.answer


def metrics_by_group(state: ClusterState, whole: dict | None = None, *, cache=None) -> dict[str, dict]:
    """{"<flavor> x<GPUs per node>": {flavor, node_gpus, nodes, free_nodes, schedulable_gpus, free_gpus,
    largest_runnable (top tier, GPUs), fragmentation_rate}} for each GPU flavor and node size present. A node
    is free when all its healthy GPUs are free (and it has some). whole: cluster_metrics(state) when the
    caller has it: a group of every node (one flavor, one node size) takes its figures instead of a second
    pass (the figures used here do not depend on `held`). cache: as cluster_metrics'."""
    if cache is not None:  # the groups follow from the cluster's shape: kept with its metrics books
        with cache.lock:
            groups = cache.metrics_book(state.static, "groups", lambda: _groups(state))
    else:
        groups = _groups(state)
    out: dict[str, dict] = {}
    for (flavor, size), members in groups:
        if cache is None:
            m = whole if whole is not None and len(groups) == 1 else cluster_metrics(state, members)
            free_nodes = sum(1 for k in members
                             if state.healthy_gpus[k] > 0 and len(state.free[k]) == state.healthy_gpus[k])
        else:
            with cache.lock:
                key = None if whole is not None and len(groups) == 1 else members
                book = cache.metrics_book(state.static, key, lambda: MetricsBook(state, key))
                if key is None and book.answer is whole:  # cluster_metrics' own answer: free_nodes is up to date
                    m = whole
                else:
                    source = None  # the whole cluster's book, when `whole` is its answer on this state
                    if whole is not None:
                        source = cache.metrics_book(state.static, None, lambda: MetricsBook(state, None))
                        if source.answer is not whole:
                            source = None
                    figures = book.metrics(state, 0, source)  # brings free_nodes up to date
                    m = whole if key is None else figures
                free_nodes = book.free_nodes
        out[f"{flavor} x{size}"] = {
            "flavor": flavor, "node_gpus": size, "nodes": len(members), "free_nodes": free_nodes,
            "schedulable_gpus": m["schedulable_gpus"], "free_gpus": m["free_gpus"],
            "largest_runnable": m["largest_runnable"].get(m["top_tier"], 0),
            "fragmentation_rate": m["fragmentation_rate"]}
    return out


def _groups(state: ClusterState) -> list[tuple[tuple[str, int], tuple[int, ...]]]:
    """((flavor, GPUs per node), node indices) per node group, sorted by flavor then size."""
    groups: dict[tuple[str, int], list[int]] = {}
    for k, node in enumerate(state.nodes):
        groups.setdefault((node.flavor, node.gpus), []).append(k)
    return [(g, tuple(members)) for g, members in sorted(groups.items())]
