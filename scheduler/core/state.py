"""Mutable free-capacity bookkeeping for one cycle, with per-domain aggregates kept incrementally.

`ClusterState` starts from a Snapshot: per node the set of free healthy GPU indices (empty for nodes
that are not ready), free CPU (millicores) and memory (MiB; None = unconstrained), and per (domain,
flavor) the number of free GPUs below it. `take` and `give` move one task's resources and update the
aggregates along the node's domain chain (depth = number of tiers), so a job that cannot fit a domain
is rejected without looking at its nodes. With an EngineCache, the free capacity at snapshot time is
brought up to date from the cache's previous snapshot (only nodes whose NodeInfo changed are recomputed), and
the state works on it without a copy: the cache lends it (EngineCache.lend) and run_cycle's EngineCache.settle
has it put back as the snapshot had it (`restore`, from each changed node's figures before its first change).
"""
from __future__ import annotations

from bisect import bisect_left, insort
from collections import defaultdict
from contextlib import nullcontext

from .cache import ClusterStatic, EngineCache
from .jobindex import changed_positions
from .snapshot import NodeInfo, Snapshot


class DoubleBindError(AssertionError):
    """An attempt to take a GPU that is not free: a bug in a policy, never an expected outcome."""


class ClusterState:
    __slots__ = ("nodes", "tree", "free", "cpu_free", "mem_free", "dom_free", "flavors", "node_index",
                 "healthy_gpus", "buckets", "bucket_keys", "free_hist", "hist_width", "hist_off", "static", "touched",
                 "exact", "moves", "_undo", "_lent")

    def __init__(self, snapshot: Snapshot, static: ClusterStatic | None = None, *, cache: EngineCache | None = None):
        """static: the snapshot's ClusterStatic (built here when None: from `cache` when given, else anew).
        cache: the engine's EngineCache, whose capacity at its previous snapshot is reused and replaced
        by this one's (only when `static` is the cache's); None = computed from the snapshot alone.
        Raises TopologyError on an inconsistent domain tree (when it builds the ClusterStatic)."""
        if static is None:
            static = cache.static_for(snapshot) if cache is not None else ClusterStatic(snapshot)
        self.static = static
        self.touched: set[int] | None = None  # node indices take / give changed since the set was cleared (sharing.py)
        self.moves = 0  # take and give calls so far (Session._one_task_take: nothing else moved since its last take)
        self.nodes = snapshot.nodes
        self.tree = tree = static.tree
        self.node_index = static.node_index
        self.flavors: set[str] = set(static.flavors)
        # per (domain, flavor): how many nodes below it have exactly f free GPUs, in one flat list at
        # hist_off[d][flavor] + f, so how many tasks of g GPUs its nodes could take at most (pack_slots) is
        # known without a node scan
        self.hist_width, self.hist_off = static.hist_width, static.hist_off
        # the free capacity at snapshot time: with a cache, brought up to date from its previous snapshot and
        # copied under its lock (another cycle sharing the cache updates it in place)
        self._undo: dict | None = None  # node -> (free GPUs, CPU, memory) before its first change, while lent
        self._lent: _Start | None = None
        with cache.lock if cache is not None else nullcontext():
            start = _snapshot_capacity(static, snapshot.nodes, cache.take_start(static) if cache is not None else None,
                                       exact=cache is not None)
            if cache is not None and cache.lend(static, start, self):
                # the kept capacity itself, no copy: `take` and `give` note each node's figures before its first
                # change, and `restore` (EngineCache.settle, at the end of run_cycle) puts them back, so the cache
                # keeps the snapshot's capacity (the same figures a copy would have left it)
                self._undo, self._lent = {}, start
                self.free, self.cpu_free, self.mem_free = start.free, start.cpu, start.mem
                self.healthy_gpus = start.healthy[:]  # never changed here (a copy: metrics books keep what they read)
                self.dom_free, self.free_hist = start.dom_free, start.hist
                self.buckets, self.bucket_keys, self.exact = start.buckets, start.bucket_keys, start.exact
                return
            if cache is not None:
                cache.keep_start(static, start)
            self.free: list[list[int]] = list(map(list.copy, start.free))
            self.cpu_free: list[int | None] = start.cpu[:]
            self.mem_free: list[int | None] = start.mem[:]
            self.healthy_gpus: list[int] = start.healthy[:]
            # every (domain, flavor) below a node of that flavor has an entry, 0 included
            self.dom_free: list[dict[str, int]] = list(map(dict.copy, start.dom_free))  # plain dicts: copied fast
            self.free_hist: list[int] = start.hist[:]
            # per (tier, flavor): free GPUs -> domains with exactly that many free, and the sorted free values,
            # so the best-fit domain for a request is found without scanning every domain of the tier (kept in
            # the _Start: copied here, a set per (tier, flavor, free value), not rebuilt from dom_free)
            self.buckets: dict[tuple[int, str], dict[int, set[int]]] = defaultdict(
                dict, {key: {f: members.copy() for f, members in per_free.items()}
                       for key, per_free in start.buckets.items()})
            self.bucket_keys: dict[tuple[int, str], list[int]] = defaultdict(
                list, {key: keys[:] for key, keys in start.bucket_keys.items()})
            # per (tier, flavor): free GPUs f -> the domains of the tier with a node of exactly f free GPUs of the
            # flavor (exact_fit_domains); the _Start's copy with a cache, else built on first use; kept up to date
            # by _shift
            self.exact: dict[tuple[int, str], list[set[int]]] | None = None if start.exact is None else {
                key: [members.copy() for members in sets] for key, sets in start.exact.items()}

    def domains_with_free(self, tier: int, flavor: str, need: int, *, most_free_first: bool = False):
        """Yield (free, domain set) for domains of `tier` with at least `need` free GPUs of `flavor`,
        least free first (best fit), or most free first. The sets are live: copy before mutating the state."""
        key = (tier, flavor)
        keys = self.bucket_keys.get(key)
        if not keys:
            return
        buckets = self.buckets[key]
        fitting = keys[bisect_left(keys, need):]
        for free in (reversed(fitting) if most_free_first else fitting):
            members = buckets.get(free)
            if members:
                yield free, members

    def exact_fit_domains(self, tier: int, flavor: str) -> list[set[int]]:
        """For `tier` and `flavor`: index f -> the domains of that tier holding a node with exactly f free GPUs
        of the flavor (0 <= f < hist_width; from the free-count histograms). Live sets: read only."""
        if self.exact is None:
            self.exact = _exact_index(self.tree.tiers, self.hist_off, self.free_hist, self.hist_width)
        return self.exact.get((tier, flavor), [])

    def pack_slots(self, d: int, flavor: str, gpus_per_task: int) -> int:
        """Upper bound on the tasks of `gpus_per_task` (> 0) GPUs that the `flavor` nodes below domain d
        could take now: sum over nodes of free GPUs // gpus_per_task (CPU and memory not counted)."""
        off = self.hist_off[d].get(flavor)
        if off is None:
            return 0
        hist = self.free_hist
        return sum(hist[off + f] * (f // gpus_per_task) for f in range(gpus_per_task, self.hist_width))

    def domain_free(self, d: int, flavor: str) -> int:
        return self.dom_free[d].get(flavor, 0)

    def fits(self, k: int, gpus: int, cpu: int, mem: int) -> bool:
        """Whether node k can take one task of `gpus` GPUs, `cpu` millicores and `mem` MiB now."""
        if not self.nodes[k].schedulable or len(self.free[k]) < gpus:
            return False
        c, m = self.cpu_free[k], self.mem_free[k]
        return (c is None or c >= cpu) and (m is None or m >= mem)

    def numa_room(self, k: int) -> int:
        """The most free GPUs of node k inside one NUMA node (all its free GPUs when it reports no NUMA
        layout: it counts as one NUMA node)."""
        free = self.free[k]
        numa = self.nodes[k].gpu_numa
        if not numa or not free:
            return len(free)
        counts: dict[int, int] = {}
        for g in free:
            z = numa[g] if g < len(numa) else -1  # GPUs the layout does not cover: one zone (as pick_gpus)
            counts[z] = counts.get(z, 0) + 1
        return max(counts.values())

    def pick_gpus(self, k: int, count: int) -> tuple[int, ...]:
        """Choose `count` free GPUs on node k, inside one NUMA node when one has enough (the fullest such
        NUMA node, best fit), else from the NUMA nodes with most free GPUs first."""
        free = self.free[k]
        if count == 0:
            return ()
        if count == 1 and len(free) == 1:  # the one free GPU, whatever its NUMA node
            return (free[0],)
        numa = self.nodes[k].gpu_numa
        if not numa:
            return tuple(sorted(free)[:count])
        groups: dict[int, list[int]] = {}
        width = len(numa)
        for g in free:
            z = numa[g] if g < width else -1
            members = groups.get(z)
            if members is None:
                groups[z] = [g]
            else:
                members.append(g)
        best = None
        for gs in groups.values():  # the fitting group with fewest GPUs, then the least GPU index
            if len(gs) >= count and (best is None or (len(gs), min(gs)) < (len(best), min(best))):
                best = gs
        if best is not None:
            return tuple(sorted(best)[:count])
        picked: list[int] = []
        for gs in sorted(groups.values(), key=lambda gs: (-len(gs), min(gs))):
            picked.extend(sorted(gs)[: count - len(picked)])
            if len(picked) == count:
                break
        return tuple(picked)

    def take(self, k: int, gpus: tuple[int, ...], cpu: int, mem: int) -> None:
        self.moves += 1
        if self.touched is not None:
            self.touched.add(k)
        free = self.free[k]
        undo = self._undo
        if undo is not None and k not in undo:
            undo[k] = (free[:], self.cpu_free[k], self.mem_free[k])
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
        self.moves += 1
        if self.touched is not None:
            self.touched.add(k)
        undo = self._undo
        if undo is not None and k not in undo:
            undo[k] = (self.free[k][:], self.cpu_free[k], self.mem_free[k])
        self.free[k].extend(gpus)
        if self.cpu_free[k] is not None:
            self.cpu_free[k] += cpu
        if self.mem_free[k] is not None:
            self.mem_free[k] += mem
        if gpus:
            self._shift(k, len(gpus))

    def restore(self) -> "_Start | None":
        """Put the lent capacity (EngineCache.lend) back as it was at snapshot time: each changed node's free GPUs,
        CPU and memory, and the aggregates of its domain chain moved back by its change of free GPUs (the same
        figures and index contents: they are functions of the nodes' free counts). Returns it, or None when it
        cannot be (the histogram was re-laid: `_widen`) or nothing is lent. The state must not be used after."""
        start, undo = self._lent, self._undo
        self._lent = self._undo = None
        if start is None or self.free_hist is not start.hist or self.hist_off is not self.static.hist_off:
            return None
        static = self.static
        chains, offs, tiers, nodes = static.tree.node_chain, static.hist_off, static.tree.tiers, self.nodes
        for k, (free, cpu, mem) in undo.items():
            now = len(start.free[k])
            start.free[k], start.cpu[k], start.mem[k] = free, cpu, mem
            if now != len(free):
                _move(start, chains[k], tiers, offs, nodes[k].flavor, now, len(free))
        return start

    def _widen(self, width: int) -> None:
        """Re-lay the histogram with room for `width` - 1 free GPUs per node (only for a snapshot that
        lists more free GPUs on a node than it has); the exact-fit index is rebuilt on its next use."""
        self.exact = None
        old, old_width = self.free_hist, self.hist_width
        hist = [0] * (len(old) // old_width * width) if old_width else []
        offs = []
        for per_flavor in self.hist_off:
            moved = {}
            for flavor, off in per_flavor.items():
                new_off = off // old_width * width
                hist[new_off:new_off + old_width] = old[off:off + old_width]
                moved[flavor] = new_off
            offs.append(moved)
        self.free_hist, self.hist_off, self.hist_width = hist, offs, width

    def _shift(self, k: int, delta: int) -> None:
        """Node k's free GPUs changed by delta (already applied to self.free[k]): the aggregates of every domain
        on its chain (free GPUs, the best-fit buckets and their sorted keys, the free-count histogram, the
        exact-fit index), written out in one loop (it runs for every task placed or given back)."""
        flavor = self.nodes[k].flavor
        now = len(self.free[k])
        was = now - delta
        if now >= self.hist_width:
            self._widen(now + 1)
        dom_free, hist, hist_off, exact = self.dom_free, self.free_hist, self.hist_off, self.exact
        buckets, bucket_keys, tiers = self.buckets, self.bucket_keys, self.tree.tiers
        for d in self.tree.node_chain[k]:
            per = dom_free[d]
            old = per[flavor]
            new = per[flavor] = old + delta
            key = (tiers[d], flavor)
            by_free = buckets[key]
            members = by_free[old]
            members.discard(d)
            if not members:
                del by_free[old]
                keys = bucket_keys[key]
                del keys[bisect_left(keys, old)]
            members = by_free.get(new)
            if members is None:
                by_free[new] = {d}
                insort(bucket_keys[key], new)
            else:
                members.add(d)
            off = hist_off[d][flavor]
            hist[off + was] -= 1
            hist[off + now] += 1
            if exact is not None:
                sets = exact[key]
                if not hist[off + was]:
                    sets[was].discard(d)
                sets[now].add(d)


def _exact_index(tiers, hist_off, hist, width) -> dict[tuple[int, str], list[set[int]]]:
    """ClusterState.exact_fit_domains' index, built from the free-count histograms."""
    exact: dict[tuple[int, str], list[set[int]]] = {}
    for d, per_flavor in enumerate(hist_off):
        for fl, off in per_flavor.items():
            sets = exact.get((tiers[d], fl))
            if sets is None:
                sets = exact[(tiers[d], fl)] = [set() for _ in range(width)]
            for f in range(width):
                if hist[off + f]:
                    sets[f].add(d)
    return exact


class _Start:
    """Free capacity at snapshot time (before any decision), kept in an EngineCache and brought up to date
    from one snapshot to the next by recomputing only the nodes whose NodeInfo object changed; with the
    ClusterState's indexes over it (buckets, bucket_keys, exact: None unless asked for), kept the same way."""

    __slots__ = ("nodes", "free", "cpu", "mem", "healthy", "dom_free", "hist", "buckets", "bucket_keys", "exact")


def _node_capacity(n: NodeInfo) -> tuple[list[int], int, int | None, int | None]:
    """(free healthy GPU indices, healthy GPUs counted, free CPU, free memory) of one node at snapshot time."""
    if n.schedulable:
        bad, used = n.unhealthy, n.used
        healthy = [g for g in range(n.gpus) if g not in bad] if bad else list(range(n.gpus))
        free = [g for g in healthy if g not in used] if used else healthy
        count = len(healthy)
    else:
        free, count = [], 0
    return (free, count, n.cpu_milli - n.cpu_used if n.cpu_milli else None,
            n.memory_mib - n.memory_used if n.memory_mib else None)


def _move(start: _Start, chain, tiers, offs, flavor: str, was: int, now: int) -> None:
    """A node's free GPUs of `flavor` went from `was` to `now` (its own figures already set): the aggregates of
    its domain chain in `start` (free GPUs, best-fit buckets and their sorted keys, histogram, exact-fit index)."""
    dom_free, hist, buckets, bucket_keys, exact_sets = start.dom_free, start.hist, start.buckets, start.bucket_keys, \
        start.exact
    for d in chain:
        old = dom_free[d][flavor]
        dom_free[d][flavor] = old + now - was
        key = (tiers[d], flavor)
        per_free, keys = buckets[key], bucket_keys[key]
        members = per_free[old]
        members.discard(d)
        if not members:
            del per_free[old]
            del keys[bisect_left(keys, old)]
        members = per_free.get(old + now - was)
        if members is None:
            per_free[old + now - was] = {d}
            insort(keys, old + now - was)
        else:
            members.add(d)
        off = offs[d][flavor]
        hist[off + was] -= 1
        hist[off + now] += 1
        if exact_sets is not None:
            sets = exact_sets[key]
            if not hist[off + was]:
                sets[was].discard(d)
            sets[now].add(d)


def _snapshot_capacity(static: ClusterStatic, nodes, start: _Start | None, *, exact: bool = False) -> _Start:
    """The _Start of `nodes` (which have static's shape): `start`, the previous snapshot's (of the same
    static), updated in place, or a new one when None. exact: build its exact-fit index if it has none (then
    kept up to date with it)."""
    chains, offs, tiers = static.tree.node_chain, static.hist_off, static.tree.tiers
    if start is None or len(start.nodes) != len(nodes):
        start = _Start()
        start.free, start.healthy, start.cpu, start.mem = [], [], [], []
        start.dom_free = [dict.fromkeys(flavors, 0) for flavors in static.dom_flavors]  # every flavor below d
        start.hist = [0] * static.hist_size
        dom_free, hist = start.dom_free, start.hist
        for k, n in enumerate(nodes):
            free, count, cpu, mem = _node_capacity(n)
            start.free.append(free)
            start.healthy.append(count)
            start.cpu.append(cpu)
            start.mem.append(mem)
            f, flavor = len(free), n.flavor
            for d in chains[k]:
                if f:
                    dom_free[d][flavor] += f
                hist[offs[d][flavor] + f] += 1
        buckets: dict[tuple[int, str], dict[int, set[int]]] = defaultdict(dict)
        for d, per_flavor in enumerate(dom_free):
            tier = tiers[d]
            for flavor, free in per_flavor.items():
                members = buckets[(tier, flavor)].get(free)
                if members is None:
                    buckets[(tier, flavor)][free] = {d}
                else:
                    members.add(d)
        start.buckets = buckets  # defaultdicts, as ClusterState's (a lent start is the state's own)
        start.bucket_keys = defaultdict(list, {key: sorted(per_free) for key, per_free in buckets.items()})
        start.exact = None
    else:
        # the nodes whose NodeInfo is not the previous snapshot's (C-level: a producer keeps unchanged ones)
        for k in changed_positions(nodes, start.nodes):
            n = nodes[k]
            free, count, cpu, mem = _node_capacity(n)
            was, now, flavor = len(start.free[k]), len(free), n.flavor  # flavor: same shape, same flavor
            start.free[k], start.healthy[k], start.cpu[k], start.mem[k] = free, count, cpu, mem
            if now != was:
                _move(start, chains[k], tiers, offs, flavor, was, now)
    if exact and start.exact is None:
        start.exact = _exact_index(tiers, offs, start.hist, static.hist_width)
    start.nodes = tuple(nodes)
    return start
