"""What the engine derives from the cluster's shape, and the cache its caller keeps between cycles.

`ClusterStatic` holds the indexes that depend only on the cluster's shape: the domain tree and, per node
and per domain, what follows from the domains and each node's (name, flavor, GPU count, domain). It is
read-only once built.

`EngineCache` is one engine's memory from one cycle to the next, owned and passed in by its caller
(`run_cycle(snapshot, config, cache=...)`): the production cycle keeps one, each replay keeps its own,
and a what-if run passes none (`None` = build everything from the snapshot, reuse nothing), so no run
can evict another's entries and two engines can run side by side. It holds, for the last cluster shape
it saw, the ClusterStatic, the free capacity at the last snapshot (`state.ClusterState` brings it up to
date node by node, works on it during the cycle and has it restored by `settle`) and the shape-derived
tables of static feasibility (`plugins.feasibility`). A
snapshot of another shape replaces all of them. Entries are exact: a shape is reused only when the
domains are equal and every node has the same (name, flavor, gpus, domain) in the same order, never
keyed on id(). One cache may be shared by threads (its lock serializes the capacity update), but two
engines that alternate between clusters should each have their own, or they rebuild every cycle.
"""
from __future__ import annotations

import threading
from itertools import compress
from operator import is_
from typing import Callable, TypeVar

from .domain_tree import DomainTree, build_tree
from .jobindex import SnapshotIndex, changed_positions
from .snapshot import Snapshot

T = TypeVar("T")


class ClusterStatic:
    """What a cycle derives from the cluster's shape alone: the domain tree and per-node / per-domain
    indexes that depend only on the domains and each node's (name, flavor, GPU count, domain). Read-only
    once built; shared by the cycles of an unchanged cluster through an EngineCache.
    Raises TopologyError (domain_tree.build_tree) on an inconsistent domain tree."""

    __slots__ = ("tree", "node_index", "flavors", "node_names", "node_flavor", "flavor_gpus", "direct_by_flavor",
                 "dom_flavors", "hist_width", "hist_off", "hist_size", "size_name_rank")

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
        # domain -> its position in the order of (nodes below it, name): a domain's place in candidate_domains' order
        # among domains of equal free GPUs and equally free parents, as one number (names are unique)
        self.size_name_rank = [0] * len(tree.names)
        for i, d in enumerate(sorted(range(len(tree.names)), key=lambda d: (len(tree.nodes_under[d]), tree.names[d]))):
            self.size_name_rank[d] = i


def _same_shape(nodes: tuple, seen: tuple, changed=changed_positions) -> bool:
    if nodes is seen:
        return True
    if len(nodes) != len(seen):
        return False
    # NodeInfo is frozen: an identical object has identical fields (those that differ found C-level)
    for k in changed(nodes, seen):
        a, b = nodes[k], seen[k]
        if (a.name != b.name or a.flavor != b.flavor or a.gpus != b.gpus or a.domain != b.domain
                or a.cpu_milli != b.cpu_milli or a.memory_mib != b.memory_mib or a.gpu_numa != b.gpu_numa):
            return False
    return True


class EngineCache:
    """One engine's reusable state between cycles (module docstring). Create one per engine and pass it
    to every `run_cycle` of that engine; `builds` counts the ClusterStatic objects it built (1 while the
    cluster's shape never changes)."""

    __slots__ = ("_domains", "_nodes", "_static", "_start", "_feasibility", "lock", "builds", "_jobs", "_jobs_key", "_books",
                 "_index", "_lent", "_changed")

    def __init__(self) -> None:
        self._domains: tuple | None = None
        self._nodes: tuple | None = None
        self._static: ClusterStatic | None = None
        self._start = None  # state._Start of the last snapshot seen, for _static
        self._feasibility = None  # plugins.feasibility's tables, for _static
        self.lock = threading.Lock()  # held by state.ClusterState while it takes and keeps the capacity
        self.builds = 0
        self._jobs: dict = {}  # job_memo's table
        self._jobs_key = None  # (ClusterStatic, CycleConfig) the table was filled for
        self._books: tuple = (None, {})  # (ClusterStatic, node set -> metrics.MetricsBook)
        self._index = None  # jobindex.SnapshotIndex of the last snapshot scanned
        self._lent: dict = {}  # thread -> (ClusterStatic, state.ClusterState) working on the capacity it took (lend)
        self._changed: tuple | None = None  # (nodes, seen, positions) of the last changed_positions call

    def static_for(self, snapshot: Snapshot) -> ClusterStatic:
        """The ClusterStatic of the snapshot's cluster: the one kept when its shape is the last one seen
        (domains equal, every node the same (name, flavor, gpus, domain, cpu_milli, memory_mib, gpu_numa: the
        NUMA layout Capacity's max_zone and never-fits answers read) in the same order; identity is
        checked first, full equality only for objects that differ), else a new one, which replaces the
        kept one and the entries derived from it. Raises TopologyError on an inconsistent domain tree."""
        domains, nodes = tuple(snapshot.domains), tuple(snapshot.nodes)
        with self.lock:
            static = self._static
            if static is None or not (domains is self._domains or domains == self._domains) \
                    or not _same_shape(nodes, self._nodes, self.changed_positions):
                static = ClusterStatic(snapshot)
                self.builds += 1
                self._static, self._start, self._feasibility = static, None, None
            self._domains, self._nodes = domains, nodes
            return static

    def changed_positions(self, nodes: tuple, seen: tuple) -> list[int]:
        """jobindex.changed_positions(nodes, seen), kept for the last pair asked (by identity; the list is shared,
        not to be changed): the shape check, the snapshot index and the capacity update each ask it of the same two
        snapshots once a cycle."""
        last = self._changed
        if last is not None and last[0] is nodes and last[1] is seen:
            return last[2]
        at = changed_positions(nodes, seen)
        self._changed = (nodes, seen, at)
        return at

    def take_start(self, static: ClusterStatic):
        """The free capacity kept for `static` (state._Start, or None), handed over: the cache holds none
        until `keep_start`, so a capacity update that fails half-way is never reused. Caller holds `lock`."""
        start, self._start = (self._start, None) if static is self._static else (None, self._start)
        return start

    def keep_start(self, static: ClusterStatic, start) -> None:
        """Keep `start` (state._Start) as the free capacity of `static`'s latest snapshot. Caller holds `lock`."""
        if static is self._static:
            self._start = start

    def lend(self, static: ClusterStatic, start, state) -> bool:
        """Let `state` (a state.ClusterState) work on `start`, the capacity of `static`'s latest snapshot, without a
        copy, until `settle` (this thread's next one) takes it back restored; False (keep_start it, and copy) when
        `static` is not the kept one. A cycle that never settles (it raised) leaves the cache holding no capacity:
        the next one is computed anew. Caller holds `lock`."""
        if static is not self._static:
            return False
        self._lent[threading.get_ident()] = (static, state)
        return True

    def drop_lent(self) -> None:
        """Forget the capacity this thread's cycle was lent (`lend`) without restoring it: the cycle raised, its
        ClusterState may be half-changed and is not kept (the next cycle computes the capacity anew)."""
        with self.lock:
            self._lent.pop(threading.get_ident(), None)

    def settle(self) -> None:
        """The capacity this thread's last cycle was lent (`lend`), restored to its snapshot's figures
        (ClusterState.restore) and kept again, unless the cache keeps another one by now or its shape changed.
        Called once a cycle's decisions are made (core.cycle.run_cycle); its ClusterState is not used after."""
        with self.lock:
            lent = self._lent.pop(threading.get_ident(), None)
            if lent is not None:
                start = lent[1].restore()
                if start is not None and lent[0] is self._static and self._start is None:
                    self._start = start

    def job_memo(self, static: ClusterStatic, config, live: int) -> dict:
        """id(job) -> [job, derived values...]: what the engine derives from a pending JobInfo alone for the
        cluster shape `static` and `config` (its minimum GPUs, tier cap, shape key, static feasibility;
        actions.allocate.JobFacts), kept across cycles because a caller that keeps its JobInfo objects (the
        replay) passes the same frozen objects cycle after cycle. Entries hold their job, so an id is never
        reused while its entry lives, and users check `entry[0] is job`. A new shape or config empties it;
        so does growing past 2 x `live` + 1,000 entries (jobs that left)."""
        key = (static, config)
        jobs = self._jobs
        kept = self._jobs_key
        if kept is None or kept[0] is not static or (kept[1] is not config and kept[1] != config) \
                or len(jobs) > 2 * live + 1000:
            jobs = self._jobs = {}
            self._jobs_key = key
        return jobs

    def metrics_book(self, static: ClusterStatic, nodes, build: Callable[[], T]) -> T:
        """metrics.MetricsBook of the node set `nodes` (a tuple of node indices, None = all) for `static`:
        kept while the shape is unchanged, built by `build()` when missing. Caller holds `lock`."""
        if self._books[0] is not static:
            self._books = (static, {})
        books = self._books[1]
        book = books.get(nodes)
        if book is None:
            book = books[nodes] = build()
        return book

    def feasibility(self, static: ClusterStatic, build: Callable[[], T]) -> T:
        """plugins.feasibility's tables for `static`: built once by `build()` and kept while the shape is
        unchanged (a static that is not the kept one gets a fresh, unkept build)."""
        if static is not self._static:
            return build()
        with self.lock:
            if self._feasibility is None:
                self._feasibility = build()
            return self._feasibility

    def scan(self, snapshot: Snapshot):
        """jobindex.Facts of the snapshot's jobs and nodes: what a cycle would get by a scan of every job and
        node, from a jobindex.SnapshotIndex brought up to date from the last snapshot scanned by identity (only
        objects that left or arrived are looked at)."""
        with self.lock:
            if self._index is None:
                self._index = SnapshotIndex()
                self._index.changed = self.changed_positions
            return self._index.update(snapshot.jobs, snapshot.nodes)


class PendingChanges:
    """The pending jobs that came and went between two cycles, by identity, kept in the engine cache's job
    memo (key ("pending changes", thread): each thread running cycles on one EngineCache keeps its own, so
    none moves another's; `of`) and shared by its users in one cycle (plugins.fairshare.pending_demand,
    actions.allocate): `advance(pending)` once per new list (again with the same list: nothing moves).
    `epoch` counts the lists seen; a user that kept what it derived at epoch e may apply `came` and
    `gone` when `epoch` is e + 1 and `valid`, else it starts over from the whole list (`valid` is also False
    when no job of the last list is in this one: starting over is then less work). Holds the jobs of the
    last list, so an id is never reused while it is kept."""

    __slots__ = ("pending", "ids", "jobs", "came", "gone", "epoch", "valid", "token")

    def __init__(self) -> None:
        self.pending = None  # the last list seen (held: `is` tells the same list)
        self.ids: set = set()  # id() of its jobs
        self.jobs: dict = {}  # id(job) -> job
        self.came: list = []  # jobs of the last list that the one before lacked
        self.gone: list = []  # jobs of the list before that the last one lacks
        self.epoch = 0
        self.valid = False  # False: no list before, or a job twice in it or in the last one (users start over)
        self.token = None  # the producer's token of the last list (jobindex.FactTuple.pending_changes), or None

    @staticmethod
    def of(memo: dict) -> "PendingChanges":
        key = ("pending changes", threading.get_ident())
        kept = memo.get(key)
        if kept is None:
            kept = memo[key] = PendingChanges()
        return kept

    def advance(self, pending: list, given: tuple | None = None) -> "PendingChanges":
        """Bring the changes up to `pending` (class docstring). given: the producer's changes since the list
        seen last (jobindex.FactTuple.pending_changes of the snapshot `pending` comes from, or None): taken as
        they are when their first token is that list's (only the jobs that came and went are looked at)."""
        if pending is self.pending:
            return self
        before = self.pending
        token, self.token = self.token, None if given is None else given[1]
        if given is not None and token is not None and given[0] is token and len(self.ids) == len(before):
            came, gone = given[2], given[3]
            jobs, ids = self.jobs, self.ids
            gone_ids = list(map(id, gone))
            came_ids = set(map(id, came))
            if (len(pending) == len(before) - len(gone) + len(came) and len(came_ids) == len(came)
                    and all(map(jobs.__contains__, gone_ids)) and len(set(gone_ids)) == len(gone_ids)
                    and came_ids.isdisjoint(ids)):
                for i in gone_ids:
                    del jobs[i]
                ids.difference_update(gone_ids)
                ids |= came_ids
                jobs.update(zip(map(id, came), came))
                # valid as the diff below says: False when no job of the last list is kept (users start over)
                self.valid = not gone or len(before) > len(gone)
                self.pending, self.came, self.gone = pending, list(came), list(gone)
                self.epoch += 1
                return self
        if before is not None and len(pending) == len(before) == len(self.ids) and pending == before:
            # the same jobs in the same order (list equality: identity first, C-level; a JobInfo equal but
            # not identical compares its fields, rare, and is then taken as unchanged only if it is the same
            # object, checked below)
            if all(map(is_, pending, before)):
                self.pending, self.came, self.gone, self.valid = pending, [], [], True
                self.epoch += 1
                return self
        if before is not None and len(pending) > len(before) == len(self.ids) and all(map(is_, pending, before)):
            # the last list with jobs added at its end (a replay's arrivals): only those are looked at
            came = pending[len(before):]
            came_ids = set(map(id, came))
            if len(came_ids) == len(came) and self.ids.isdisjoint(came_ids):
                self.ids |= came_ids
                self.jobs.update(zip(map(id, came), came))
                self.pending, self.came, self.gone, self.valid = pending, came, [], True
                self.epoch += 1
                return self
        ids = set(map(id, pending))
        # each list's jobs once (its id set says it all), the last one's too; and some job kept from the last list
        # (when every job is new, as in a platform snapshot, users start over: less work than taking each job out)
        self.valid = before is not None and len(ids) == len(pending) and len(self.ids) == len(before) \
            and not self.ids.isdisjoint(ids)
        jobs = self.jobs
        gone_ids, came_ids = self.ids - ids, ids - self.ids
        self.gone = [jobs.pop(i) for i in gone_ids]
        if came_ids:
            self.came = list(compress(pending, map(came_ids.__contains__, map(id, pending))))
            jobs.update(zip(map(id, self.came), self.came))
        else:
            self.came = []
        if len(jobs) != len(ids):  # a job twice in the list: keep one entry per id
            self.jobs = dict(zip(map(id, pending), pending))
        self.pending, self.ids = pending, ids
        self.epoch += 1
        return self
