"""One cycle's working context, shared by the actions (Volcano's Session, kept small).

A `Session` holds the cycle's mutable state (ClusterState, QueueTree usage), its inputs (snapshot,
config), the static feasibility rule, the GPUs held out of everyone's pool (`holds`) and the holds in
force after the cycle (`nominated`). Its public API is what every action needs:

- `flavors(job)`: the GPU flavors the job may run on, in the order to try them;
- `tier_cap(job)` / `tier_levels(job)`: the highest tier the job may span, and the tiers searched in order
  (from its preferred tier upward when it has one);
- `try_place(job, flavor, target=, within=)`: the gang + topology + binpack search, applied to the state
  (`search` is the same with the tier cap, minimum and room the caller has already computed);
- `holds` (`Holds`) and `nominate(job, tasks)`: GPUs kept for a job, during and after the cycle;
- `add_tasks(job, flavor, have, domain, cap=, budget=)`: an elastic job's tasks above what it has, from a
  domain outward up to its tier cap (at start, and for running jobs: actions/grow.py).

The actions are functions over it (actions/allocate.py, backfill.py, preempt.py, reclaim.py, evict.py);
none keeps a reference to another action's internals. Units: GPUs, seconds of the cluster clock.
"""
from __future__ import annotations

from bisect import bisect_left
from operator import attrgetter

from .cache import EngineCache
from .plugins.feasibility import Capacity
from .plugins.gang import PackFailure, pack_gang
from .plugins.predicates import allowed_flavors
from .plugins.quota import INF, QueueTree
from .plugins.topology_policy import candidate_domains, node_order, tier_cap
from .snapshot import Binding, CycleConfig, JobInfo, PendingReason, RoleInfo, Snapshot, TaskPlacement
from .state import ClusterState
from .statement import Statement

_gpu_numa = attrgetter("gpu_numa")

_OFF = ("off",)
_STRICT = ("strict",)
_STRICT_THEN_PREFER = ("strict", "prefer")
_NONE: frozenset = frozenset()
_PLAIN = [("off", _NONE)]
# Session.search refuses without walking the domains when the cluster has fewer free GPUs of the flavor than the job's
# minimum, and stops at its first failed domain when the whole cluster is short of slots for the job's first GPU role
# (no domain can place it; the refusal names that first domain, as the full walk's does). False: the full walk, for
# tests that compare the two (tests/core/test_s20_hopeless_search.py)
STOP_WHEN_HOPELESS = True


def _lead_domain(state: ClusterState, tier: int, flavor: str, need: int) -> tuple[int, int] | None:
    """For a one-node task of `need` GPUs of `flavor`: (the domain of `tier` holding the node with the fewest
    free GPUs >= need, among the domains with such a node the first in candidate_domains' order; that node's
    free GPUs), or None when no node of a tier domain has need free GPUs. From the exact-fit index
    (ClusterState.exact_fit_domains: no node scan, no walk over the domains)."""
    by_free = state.exact_fit_domains(tier, flavor)
    for fit in range(need, len(by_free)):
        hits = by_free[fit]
        if hits:
            break
    else:
        return None
    if len(hits) == 1:
        for first in hits:
            return first, fit
    # the first of candidate_domains' order: least free, then the fullest parent, the fewest nodes, the name (the
    # last two as one number, ClusterStatic.size_name_rank)
    dom_free, parents, order = state.dom_free, state.tree.parent, state.static.size_name_rank

    def rank(d: int) -> tuple:
        parent = parents[d]
        return (dom_free[parent].get(flavor, 0) if parent >= 0 else 0, order[d])

    if len(hits) <= 8:
        return min(hits, key=lambda d: (dom_free[d].get(flavor, 0), rank(d))), fit
    # many: the buckets of domains by free GPUs (state.domains_with_free), least free first; the first that
    # holds a hit holds the least-free ones, and among them rank decides
    key = (tier, flavor)
    keys, buckets = state.bucket_keys[key], state.buckets[key]
    for i in range(bisect_left(keys, need), len(keys)):
        members = buckets.get(keys[i])
        if members and not members.isdisjoint(hits):
            both = members & hits
            if len(both) == 1:
                for first in both:
                    return first, fit
            return min(both, key=rank), fit
    return None  # not reached: a hit has a node of >= need free GPUs, so its domain is in a bucket >= need


def _node_fit_first(state: ClusterState, tier: int, domains, flavor: str, need: int, lead: list):
    """Reorder `domains` (the tier's domains in best-fit order, candidate_domains) for a one-node task of
    `need` GPUs of `flavor`: first the domain holding the node with the fewest free GPUs >= need (among the
    domains with such a node, the first in candidate_domains' order: _lead_domain), then the others in their
    order. Sets lead[:] = [domain, its node's free GPUs] while that domain is tried."""
    found = _lead_domain(state, tier, flavor, need)
    if found is None:
        yield from domains
        return
    first = found[0]
    lead[:] = found
    yield first
    lead.clear()  # the lead domain has been tried: the others keep their own node order
    for d in domains:
        if d != first:
            yield d


def _exact_fit_first(state: ClusterState, order: list[int], free: int) -> None:
    """Move the first node of `order` with exactly `free` free GPUs to the front (in place; no-op when none)."""
    for i, k in enumerate(order):
        if len(state.free[k]) == free:
            if i:
                order.insert(0, order.pop(i))
            return


class Holds:
    """GPUs held out of everyone's pool for one key (a job id for a nomination, or the backfill
    reservation's key). Only GPUs free at hold time are taken; `release` / `retake` open and close the
    hold around the holder's own attempt (or a backfill job that ends before the reservation)."""

    def __init__(self, state: ClusterState):
        self.state = state
        self.held: dict[object, list[tuple[int, tuple[int, ...]]]] = {}  # key -> (node index, GPUs) taken now
        self.wanted: dict[object, list[tuple[int, tuple[int, ...]]]] = {}  # key -> (node index, GPUs) to hold

    def hold(self, key, tasks: tuple[TaskPlacement, ...]) -> int:
        """Hold the tasks' GPUs for `key` (those free now; the rest on `retake`). Returns GPUs taken."""
        wanted = []
        for t in tasks:
            k = self.state.node_index.get(t.node)
            if k is not None:
                wanted.append((k, tuple(t.gpus)))
        self.wanted[key] = wanted
        return self.retake(key)

    def retake(self, key) -> int:
        """Take again the GPUs wanted for `key` that are free now. Returns GPUs taken."""
        held, taken, state = [], 0, self.state
        free_of, take = state.free, state.take
        for k, gpus in self.wanted.get(key, ()):
            free = free_of[k]  # a node's few free GPUs: a list lookup, no set built
            mine = tuple([g for g in gpus if g in free])
            if mine:
                take(k, mine, 0, 0)
                held.append((k, mine))
                taken += len(mine)
        self.held[key] = held
        return taken

    def release(self, key) -> None:
        """Give the GPUs held for `key` back to the pool (the hold is still wanted: `retake` restores it)."""
        for k, gpus in self.held.pop(key, ()):
            self.state.give(k, gpus, 0, 0)

    def drop(self, key) -> None:
        """Release the hold and forget it."""
        self.release(key)
        self.wanted.pop(key, None)

    def holding(self, key) -> bool:
        """Whether a hold for `key` is in force (taken, possibly of no GPU), not released or dropped."""
        return key in self.held

    def gpus_held(self, key) -> int:
        """GPUs taken for `key` now."""
        return sum(len(g) for _, g in self.held.get(key, ()))

    def wanted_by_others(self, key) -> dict[str, frozenset]:
        """{node name: GPU indices} that the holds of keys other than `key` want (eviction beneficiaries, drains,
        this cycle's EASY reservation), taken or still in use: what a reservation for `key` must not count as
        coming free (actions/backfill.py)."""
        out: dict[str, set] = {}
        nodes = self.state.nodes
        for other, taken in self.wanted.items():
            if other != key:
                for k, gpus in taken:
                    out.setdefault(nodes[k].name, set()).update(gpus)
        return {name: frozenset(g) for name, g in out.items()}

    def taken_by_others(self, key) -> tuple:
        """((other key, GPUs) ...), by key, of the GPUs that the hold of `key` wants and another hold has taken now
        (two holds that want the same GPU: an eviction's beneficiary on GPUs a drain waits for, or holds made before
        drains kept clear of each other); () when none. A waiting holder's reason names them (actions/allocate.py)."""
        wanted, held = self.wanted.get(key), self.held
        if not wanted or len(held) < 2 - (key not in held):
            return ()
        have: dict = {}
        for k, gpus in held.get(key, ()):
            have.setdefault(k, set()).update(gpus)
        need: dict = {}  # node index -> GPUs wanted, not held by this key
        for k, gpus in wanted:
            on = have.get(k)
            rest = [g for g in gpus if g not in on] if on else gpus
            if rest:
                need.setdefault(k, set()).update(rest)
        out = []
        for other, taken in held.items():
            if other != key:
                n = 0
                for k, gpus in taken:
                    on = need.get(k)
                    if on:
                        n += sum(1 for g in gpus if g in on)
                if n:
                    out.append((other, n))
        return tuple(sorted(out, key=lambda kv: str(kv[0])))

    def by_node(self) -> dict[str, tuple[int, ...]]:
        """Every GPU taken now, all keys together: {node name: sorted GPU indices} (CycleResult.held; holds take
        only free GPUs, so no GPU is in two holds and the count is sum(map(gpus_held, held)))."""
        out: dict[str, set[int]] = {}
        for taken in self.held.values():
            for k, gpus in taken:
                out.setdefault(self.state.nodes[k].name, set()).update(gpus)
        return {name: tuple(sorted(g)) for name, g in sorted(out.items())}


class Session:
    """One cycle's context for the actions (module docstring). Built once per cycle by run_cycle."""

    __slots__ = ("state", "queues", "config", "snapshot", "tree", "now", "capacity", "holds", "nominated", "_levels",
                 "_numa_known", "sharing", "_by_name", "_quick", "_last_take", "_off")

    def __init__(self, state: ClusterState, queues: QueueTree, config: CycleConfig, snapshot: Snapshot, *,
                 cache: EngineCache | None = None):
        """cache: the engine's EngineCache (its static-feasibility tables are reused), or None."""
        self.state, self.queues, self.config, self.snapshot = state, queues, config, snapshot
        self.tree = state.tree  # domain_tree.DomainTree
        self.now = snapshot.now  # seconds of the cluster clock
        self.capacity = Capacity(state, cache)
        self.holds = Holds(state)
        self.nominated: dict = {}  # job id -> tasks held for it after this cycle (CycleResult.nominations)
        self._levels: dict[int, tuple] = {}  # tier cap -> (the tiers searched, every tier up to it), ascending
        self._numa_known: bool | None = None  # whether any node reports its GPUs' NUMA layout (computed once)
        # GPU shares in this cycle (sharing._Walk: place(job), complete(job, binding) for a mixed job's whole-GPU
        # part, `mixed` ids): the allocate walk places sharing jobs through it; None: no sharing in this cycle
        self.sharing = None
        self._by_name: dict[tuple[int, str], list[int]] = {}  # (leaf domain, flavor) -> its nodes by (name, index)
        self._quick: dict[tuple[int, str], int] = {}  # (shape id, flavor) -> _one_task_tier
        # (ClusterState.moves, gpus, tier, flavor, node, domain) of _one_task_take's last placement, or None
        self._last_take: tuple | None = None
        self._off: dict[str, str] = {}  # flavor -> _off_text (the snapshot's nodes: the same all cycle)

    def nominate(self, job: JobInfo, tasks: tuple[TaskPlacement, ...], *, all_gpus: bool = False) -> None:
        """Hold the tasks' GPUs for the job from now on, and after this cycle (a Nomination), charged to
        its queue (QueueTree.charge_hold; all_gpus: also those its victims still occupy)."""
        self.holds.hold(job.id, tasks)
        self.nominated[job.id] = tasks
        self.queues.charge_hold(job.id, job.queue, tasks, all_gpus=all_gpus)

    # -- the job's shape ----------------------------------------------------------------------------
    def flavors(self, job: JobInfo) -> list[str]:
        """The flavors the job may run on (predicates.allowed_flavors), most free GPUs first, then by
        name; [] when none of the cluster's flavors is allowed."""
        flavors = self.state.flavors
        if len(flavors) == 1:  # the common one-flavor cluster: no set algebra, nothing to order
            for only in flavors:
                for role in job.roles:
                    if role.flavors and role.gpus_per_task and only not in role.flavors:
                        return []
                return [only]
        allowed = allowed_flavors(job.roles, flavors)
        root = self.tree.root
        return sorted(allowed, key=lambda f: (-self.state.domain_free(root, f), f))

    def tier_cap(self, job: JobInfo) -> int:
        """The highest tier the job's gang may span (plugins.topology_policy.tier_cap)."""
        return tier_cap(job, self.tree.top_tier, topology=self.config.topology)

    def tier_levels(self, job: JobInfo) -> list[int]:
        """The tiers whose domains are searched for the job, in order: every tier up to `tier_cap`, lowest
        first (the most compact placement wins); with a `preferred_tier`, the search starts there and
        falls back upward (soft topology: the job asks for that level, e.g. a leaf switch, and its gang
        is best-fit among that tier's domains rather than squeezed into the tightest lower domain; tiers
        below it are not tried on their own, though packing inside the chosen domain still fills its
        fullest lower domains first). A preferred tier above every tier up to the cap is ignored. With
        topology off, only the top tier (one domain)."""
        return self._tier_levels(job, self.tier_cap(job))

    def _tier_levels(self, job: JobInfo, cap: int) -> list[int]:
        """tier_levels with the job's tier cap already known (the list may be shared: read only)."""
        kept = self._levels.get(cap)
        if kept is None:
            tree = self.tree
            every = [t for t in tree.tier_levels if t <= cap] if self.config.topology else [tree.top_tier]
            # no domains at all: a job naming no tier below the root is placed over the whole cluster, as when the
            # cluster was one domain; its nodes' own tier-1 domains serve the jobs that name tier 1 (a preferred
            # tier 1 is searched first, from every level)
            kept = self._levels[cap] = ([tree.top_tier] if tree.no_topology and cap >= tree.top_tier else every, every)
        levels, every = kept
        preferred = job.preferred_tier
        if preferred is not None and self.config.topology:
            upward = [t for t in every if t >= preferred]
            if upward:
                return upward
        return levels

    # -- placement ----------------------------------------------------------------------------------
    def try_place(self, job: JobInfo, flavor: str, *, target: float, within: int | None = None
                  ) -> Binding | PendingReason:
        """Search a placement of the job on `flavor` GPUs: every role's minimum in one domain of the job's
        tier levels (best fit, tiers in `tier_levels` order), then tasks above the minimum while the
        placement stays within `target` GPUs (INF = no bound). No quota is checked and no usage charged.
        within: a domain index: search only inside it. On success the placement is applied to the state
        (the caller keeps it, or gives it back with trial.release_binding); otherwise the state is
        unchanged and the PendingReason says why (no_packing, insufficient_gpus or no_domain)."""
        need = job.gpus_min
        return self.search(job, flavor, cap=self.tier_cap(job), need=need, room=max(target, need), within=within)

    def search(self, job: JobInfo, flavor: str, *, cap: int, need: int, room: float, within: int | None = None,
               shape: int | None = None) -> Binding | PendingReason:
        """try_place with what the caller already computed: cap = tier_cap(job), need = job.gpus_min,
        room = the most GPUs the placement may take (>= need; INF = no bound). shape: the job's shape id
        (Admission.facts: its roles, numa, tier cap and preferred tier), under which whether the job takes
        the one-task shortcut (_one_task) and at which tier is remembered for the cycle; None: worked out.

        Per tier, the domains are tried in passes from the strictest rule to the loosest the job allows:
        first with every task inside one NUMA node and every sub-group whole, then (numa "prefer", soft
        groups) without; a hard rule (numa "single", a hard group) is never relaxed. A job that needs none
        of this (the common case) makes one pass.

        Without the walk (the same refusals, issue 16): fewer free GPUs of the flavor in the whole cluster than the
        minimum (no domain has them: the walk would skip every one); and the walk stops at its first domain short
        of slots for the first GPU role when the whole cluster is (so is every domain: no later one places it)."""
        if within is None and STOP_WHEN_HOPELESS and self.state.dom_free[self.tree.root].get(flavor, 0) < need:
            return self._insufficient(flavor, need)
        if within is None:  # one task of one role on the plain pass: its first try without a node order
            first = self._quick.get((shape, flavor)) if shape is not None else None
            if first is None:
                first = self._one_task_tier(job, flavor, self._tier_levels(job, cap))
                if shape is not None:
                    self._quick[(shape, flavor)] = first
            if first:
                placed = self._one_task(job, job.roles[0], flavor, first)
                if placed is not None:
                    return placed
        state, tree, capacity, topology = self.state, self.tree, self.capacity, self.config.topology
        levels = [tree.tiers[within]] if within is not None else self._tier_levels(job, cap)
        extra = (room - need) if room != INF else INF
        packing_failure: tuple[int, RoleInfo, str] | None = None  # the first failed domain, its role, the pass
        roles = job.roles
        if len(roles) == 1:  # the common job of one role: nothing to order
            gpu_roles = [roles[0]] if roles[0].gpus_per_task and roles[0].effective_min else []
        else:
            gpu_roles = sorted((r for r in roles if r.gpus_per_task and r.effective_min),
                               key=lambda r: (-r.gpus_per_task, -r.cpu_milli, r.name))  # pack_gang's order
        passes = self._passes(job, (flavor,))
        binpack = self.config.binpack
        # a job of one GPU task (one node, whatever its tier): the node is chosen by best fit across the tier's
        # domains, not inside the best-fit domain by aggregate free GPUs (which can break a whole node while
        # another domain has a node the task fills exactly)
        one_node = binpack and topology and within is None and passes is _PLAIN and len(gpu_roles) == 1 \
            and gpu_roles[0].tasks == 1 and not any(r.gpus_per_task and r.tasks and r is not gpu_roles[0]
                                                    for r in job.roles)
        lead: list[int] = []  # [domain, free GPUs of the node to try first] while that domain is tried
        hopeless = False  # no domain can hold the first GPU role's minimum (set at the first failure)
        for tier in levels:
            if hopeless:
                break
            for numa, grouped in passes:
                if hopeless:
                    break
                if within is not None:
                    domains = [within]
                elif not topology:
                    domains = [tree.root]
                else:
                    domains = candidate_domains(state, tier, flavor, need, binpack=self.config.binpack)
                    if one_node:
                        domains = _node_fit_first(state, tier, domains, flavor, need, lead)
                for d in domains:
                    if state.domain_free(d, flavor) < need or not capacity.domain_fits(job, flavor, d):
                        continue  # not enough free now, or nodes too small for its tasks even when empty
                    # cheap necessary condition: each GPU role's minimum fits the nodes' free GPUs taken whole
                    # tasks at a time (no node scan); when it fails, pack_gang would fail too
                    short = None
                    for r in gpu_roles:
                        if state.pack_slots(d, flavor, r.gpus_per_task) < r.effective_min:
                            short = r
                            break
                    if short is not None and (packing_failure is not None or short is gpu_roles[0]):
                        # pack_gang places roles in gpu_roles' order from an empty statement: the first role short
                        # of slots is the one it reports; for a later role it could report an earlier one, so
                        # unless a failure is already recorded, fall through and let it name the role
                        if packing_failure is None:
                            packing_failure = (d, short, "")
                            # the whole cluster short of slots for the first GPU role: so is every domain (a
                            # domain's slots are a sum over some of the cluster's nodes), so no later domain, pass
                            # or tier places the job, and this first failure is the refusal: the walk stops here
                            if STOP_WHEN_HOPELESS and short is gpu_roles[0] \
                                    and state.pack_slots(tree.root, flavor, short.gpus_per_task) < short.effective_min:
                                hopeless = True
                                break
                        continue
                    if numa == "off" and not grouped:  # the common job: one node order, first fit
                        order = node_order(state, d, flavor, need, binpack=binpack)
                        if lead and d == lead[0]:
                            _exact_fit_first(state, order, lead[1])
                        cpu_nodes = self._cpu_nodes(d, order) if any(not r.gpus_per_task for r in job.roles) else []
                        placed = pack_gang(state, job, order, cpu_nodes, extra_budget=extra)
                    else:
                        placed = self._pack_in(job, d, {r.name: flavor for r in gpu_roles}, {flavor: need}, numa,
                                               grouped, extra)
                    if isinstance(placed, PackFailure):
                        packing_failure = packing_failure or (d, placed.role, self._rule_text(job, placed.role, numa,
                                                                                               grouped))
                        continue
                    if within is None and topology:
                        # tasks above the minimum that did not fit the minimum's domain go to the wider domains
                        # the job's topology allows (up to its tier cap): at start a job takes every task that fits
                        used = sum(len(t.gpus) for t in placed)
                        wider = self.add_tasks(job, flavor, placed, d, cap=cap,
                                               budget=room - used if room != INF else INF)
                        if wider:
                            placed = placed + wider
                            d = self.enclosing(d, [state.node_index[t.node] for t in wider])
                    return Binding(job_id=job.id, tasks=placed, domain=tree.names[d], tier=tree.tiers[d])
        if packing_failure is not None:
            d, role, rule = packing_failure
            return PendingReason(
                "no_packing",
                f"no node packing fits: {state.domain_free(d, flavor)} free {flavor} GPUs in {tree.names[d]} but no "
                f"node arrangement holds role {role.name}: {role.effective_min} tasks x {role.gpus_per_task} GPUs"
                f"{rule}")
        if state.domain_free(tree.root, flavor) < need:
            return self._insufficient(flavor, need)
        best = max(tree.by_tier.get(cap, ()), key=lambda d: state.domain_free(d, flavor), default=tree.root)
        return PendingReason(
            "no_domain", f"no tier-{cap} domain has {need} free {flavor} GPUs (most: "
            f"{state.domain_free(best, flavor)} in {tree.names[best]})")

    def _insufficient(self, flavor: str, need: int) -> PendingReason:
        """search's refusal of a job whose minimum, `need` GPUs of `flavor`, is more than the cluster has free now."""
        total_free = self.state.domain_free(self.tree.root, flavor)
        return PendingReason("insufficient_gpus", f"needs {need} {flavor} GPUs at once; {total_free} free"
                                                  f"{self._off_text(flavor)}")

    def _one_task_tier(self, job: JobInfo, flavor: str, levels: list[int]) -> int:
        """The tier search tries first when the job takes the one-task shortcut (_one_task: one role of one
        task, on the plain pass, binpack and topology on), else 0."""
        roles = job.roles
        if len(roles) != 1 or not levels or not self.config.topology or not self.config.binpack:
            return 0
        role = roles[0]
        if role.tasks != 1 or not role.gpus_per_task or role.min_available <= 0 \
                or self._passes(job, (flavor,)) is not _PLAIN:
            return 0
        return levels[0]

    def _one_task(self, job: JobInfo, role: RoleInfo, flavor: str, tier: int) -> Binding | None:
        """search's first try for a job of one role of one task (the plain pass, binpack, topology on), made
        without the domain's node order: the lead domain (_lead_domain) at the job's first tier and in it the
        node search would try first, when that domain is a leaf (nodes only). There node_order puts first the
        node of least free GPUs >= the task's, the least name among equals, which is a node with exactly the
        lead's free count (no tier domain has a node with fewer that still holds the task), and
        _exact_fit_first keeps it there; the domain passes search's checks (it has a node holding the task,
        so its free GPUs, domain_fits and pack_slots allow it). When that node holds the task (CPU and memory
        too: first fit takes it), the task goes there, GPUs by pick_gpus, as pack_gang would place it; the
        job has no tasks above its minimum, so add_tasks adds none. None, with the state unchanged, when any
        of this does not hold: search then runs in full and reaches the same answer its own way."""
        taken = self._one_task_take(role.gpus_per_task, role.cpu_milli, role.memory_mib, flavor, tier)
        if taken is None:
            return None
        name, picked, d = taken
        tree = self.tree
        return Binding(job.id, (TaskPlacement(role.name, 0, name, picked),), tree.names[d], tree.tiers[d])

    def _one_task_take(self, gpus: int, cpu: int, mem: int, flavor: str, tier: int):
        """_one_task's work for a task of `gpus` GPUs (> 0), `cpu` millicores and `mem` MiB: (the node's name, the
        GPU indices taken, the lead domain's index), applied to the state, or None with the state unchanged.

        The node the last call placed a task of the same (tier, flavor, gpus) on is taken again without the lead
        domain's search when nothing else moved since (ClusterState.moves) and it still has `gpus` free: that call
        found no node of a tier domain with free GPUs in [gpus, fit) (fit: the node's free GPUs then) and only this
        node changed, so its fit - gpus free GPUs are now the fewest >= gpus, on this node alone: _lead_domain
        gives its (leaf) domain, which no other node of the flavor shares that count with."""
        state = self.state
        last = self._last_take
        if last is not None and last[0] == state.moves and last[1] == gpus and last[2] == tier and last[3] == flavor \
                and len(state.free[last[4]]) >= gpus:
            k, d = last[4], last[5]
        else:
            found = _lead_domain(state, tier, flavor, gpus)
            if found is None:
                return None
            d, fit = found
            if self.tree.children[d]:
                return None
            free = state.free
            by_name = self._by_name.get((d, flavor))
            if by_name is None:
                names = state.static.node_names
                by_name = self._by_name[(d, flavor)] = sorted(state.static.direct_by_flavor[d].get(flavor, ()),
                                                              key=lambda k: (names[k], k))
            for k in by_name:
                if len(free[k]) == fit:
                    break
            else:
                return None
        node = state.nodes[k]
        if not node.schedulable or ((cpu or mem) and not state.fits(k, gpus, cpu, mem)):  # its GPUs are free
            return None
        picked = state.pick_gpus(k, gpus)
        state.take(k, picked, cpu, mem)
        self._last_take = (state.moves, gpus, tier, flavor, k, d)
        return node.name, picked, d

    def _off_text(self, flavor: str) -> str:
        """For a whole-GPU gang short of free GPUs: the GPUs of `flavor` on schedulable nodes in mode shared or
        mig (sharing.py: they take fractions or MIG instances only, never a whole-GPU task, so they are not
        counted free), as " (N more ... )", then those taking no work now (_out_text); "" when there are none.
        Worked out once per flavor in a cycle."""
        text = self._off.get(flavor)
        if text is None:
            text = self._off[flavor] = self._off_count(flavor)
        return text

    def _off_count(self, flavor: str) -> str:
        off = sum(1 for n in self.snapshot.nodes if n.gpu_modes and n.flavor == flavor and n.schedulable
                  for m in n.gpu_modes[:n.gpus] if m in ("shared", "mig"))
        text = "" if not off else (f" (+{off} in mode shared or mig: {'it takes' if off == 1 else 'they take'} "
                                   f"fractions or MIG instances only, not whole-GPU tasks)")
        return text + self._out_text(flavor, off)

    def _out_text(self, flavor: str, off: int) -> str:
        """The GPUs of `flavor` that take no work now: on nodes not ready, draining, cordoned or held as hot spares,
        or unhealthy (the cluster's GPUs less those ClusterState counts healthy and the `off` GPUs in mode shared or
        mig, which it does not count either), as " (+N on nodes taking no work now ...)", or "" when every GPU may
        take work (new-user trial 22b: a gang waiting for a dead node
        read "needs 4 H200 GPUs at once; 0 free", nothing saying half the cluster was not ready)."""
        state = self.state
        total = state.static.flavor_gpus.get(flavor, 0)
        if len(state.static.flavor_gpus) == 1:
            usable = sum(state.healthy_gpus)
        else:
            usable = sum(h for n, h in zip(state.nodes, state.healthy_gpus) if n.flavor == flavor)
        out = total - usable - off
        if out <= 0:
            return ""
        return f" (+{out} on nodes taking no work now: not ready, draining, cordoned or spare; or unhealthy)"

    def enclosing(self, d: int, nodes: list[int]) -> int:
        """The lowest domain at or above domain d that holds every node index in `nodes`."""
        chains = [self.tree.node_chain[k] for k in nodes]
        while not all(d in chain for chain in chains):
            d = self.tree.parent[d]
        return d

    def add_tasks(self, job: JobInfo, flavor: str, have, d: int, *, cap: int, budget: float
                  ) -> tuple[TaskPlacement, ...]:
        """Place tasks of the job's GPU roles that `have` (its TaskPlacements) lacks, on `flavor` nodes,
        while they fit and take at most `budget` GPUs: first inside domain d, then in each wider domain
        up to tier `cap` (the tier cap: a hard topology keeps them inside it). Binpack node order. The
        placements are applied to the state; returns them (possibly none). Elastic tasks only: the gang's
        minimum is already placed."""
        placed = {(t.role, t.index) for t in have}
        missing = [r for r in job.roles if r.gpus_per_task and sum(1 for t in have if t.role == r.name) < r.tasks]
        if not missing or budget < min(r.gpus_per_task for r in missing):
            return ()
        state, tree = self.state, self.tree
        stmt = Statement(state)
        roles = sorted(missing, key=lambda r: (-r.gpus_per_task, -r.cpu_milli, r.name))
        while d >= 0 and tree.tiers[d] <= cap:
            for role in roles:
                order = node_order(state, d, flavor, role.gpus_per_task, binpack=self.config.binpack)
                cursor = 0
                for index in range(role.tasks):
                    if (role.name, index) in placed:
                        continue
                    if role.gpus_per_task > budget:
                        break
                    while cursor < len(order) and not state.fits(order[cursor], role.gpus_per_task, role.cpu_milli,
                                                                 role.memory_mib):
                        cursor += 1
                    if cursor >= len(order):
                        break
                    stmt.allocate(order[cursor], role=role.name, index=index, gpus=role.gpus_per_task,
                                  cpu=role.cpu_milli, mem=role.memory_mib)
                    placed.add((role.name, index))
                    budget -= role.gpus_per_task
            d = tree.parent[d]
        return stmt.commit()

    def search_mixed(self, job: JobInfo, flavor_of: dict[str, str], *, cap: int, room: float
                     ) -> Binding | PendingReason:
        """The search for a heterogeneous job: GPU role name -> the flavor it runs on (roles on different
        flavors). Every role's minimum is placed in one domain of the job's tier levels at once (the gang
        rule across roles); the domain needs each flavor's minimum free. Domains of a tier are tried best
        fit on their total free GPUs of the job's flavors. Applied to the state on success, like search."""
        state, tree, topology = self.state, self.tree, self.config.topology
        need_by: dict[str, int] = {}
        for r in job.roles:
            if r.gpus_per_task and r.name in flavor_of:
                need_by[flavor_of[r.name]] = need_by.get(flavor_of[r.name], 0) + r.effective_min * r.gpus_per_task
        need = job.gpus_min
        extra = (room - need) if room != INF else INF
        failure: tuple[int, RoleInfo, str] | None = None
        passes = self._passes(job, tuple(need_by))
        for tier in self._tier_levels(job, cap):
            domains = sorted((d for d in (tree.by_tier.get(tier, ()) if topology else [tree.root])
                              if all(state.domain_free(d, f) >= n for f, n in need_by.items())),
                             key=lambda d: (sum(state.domain_free(d, f) for f in need_by), tree.names[d]),
                             reverse=not self.config.binpack)
            for numa, grouped in passes:
                for d in domains:
                    placed = self._pack_in(job, d, flavor_of, need_by, numa, grouped, extra)
                    if isinstance(placed, PackFailure):
                        failure = failure or (d, placed.role, self._rule_text(job, placed.role, numa, grouped))
                        continue
                    return Binding(job_id=job.id, tasks=placed, domain=tree.names[d], tier=tree.tiers[d])
        wants = ", ".join(f"{n} {f}" for f, n in sorted(need_by.items()))
        if failure is not None:
            d, role, rule = failure
            return PendingReason("no_packing", f"no node packing fits in {tree.names[d]}: role {role.name} "
                                               f"({role.effective_min} tasks x {role.gpus_per_task} "
                                               f"{flavor_of[role.name]} GPUs){rule}")
        short = [f"{state.domain_free(tree.root, f)} of {n} {f}" for f, n in sorted(need_by.items())
                 if state.domain_free(tree.root, f) < n]
        if short:
            return PendingReason("insufficient_gpus", f"needs {wants} GPUs at once; free: {', '.join(short)}")
        return PendingReason("no_domain", f"no tier-{cap} domain has {wants} free GPUs at once")

    def numa_known(self) -> bool:
        """Whether any node of the snapshot reports its GPUs' NUMA layout (computed once per cycle)."""
        known = self._numa_known
        if known is None:
            known = self._numa_known = any(map(_gpu_numa, self.snapshot.nodes))
        return known

    def _passes(self, job: JobInfo, flavors: tuple[str, ...]) -> list[tuple[str, frozenset]]:
        """The (numa mode, grouped role names) passes of the search, strictest first (search docstring).
        NUMA counts only for a task of more than one GPU that some NUMA node of its flavors could hold
        (a task larger than every NUMA node, e.g. a whole node's GPUs, is never aligned: no pass for it)."""
        numa_modes = _OFF
        if self.numa_known() or job.numa == "single":
            max_zone = self.capacity.max_zone
            zone = max_zone.get(flavors[0], 0) if len(flavors) == 1 else max((max_zone.get(f, 0) for f in flavors),
                                                                             default=0)
            for r in job.roles:
                if 1 < r.gpus_per_task <= zone:
                    numa_modes = _STRICT if job.numa == "single" else _STRICT_THEN_PREFER
                    break
        hard = soft = _NONE
        for r in job.roles:
            if r.group_size and r.group_highest_tier is not None and self.config.topology:
                if r.group_mode == "hard":
                    hard = hard | {r.name}
                else:
                    soft = soft | {r.name}
        if numa_modes is _OFF and not hard and not soft:
            return _PLAIN
        group_sets = [hard | soft, hard] if soft else [hard]
        return [(n, g) for n in numa_modes for g in group_sets]

    @staticmethod
    def _rule_text(job: JobInfo, role: RoleInfo, numa: str, grouped: frozenset) -> str:
        parts = []
        if role.name in grouped:
            parts.append(f"in groups of {role.group_size} tasks inside one tier-{role.group_highest_tier} domain")
        if numa == "strict" and role.gpus_per_task > 1:
            parts.append("with each task's GPUs inside one NUMA node" + (" (numa: single)" if job.numa == "single"
                                                                          else ""))
        host = [f"{role.cpu_milli} milli-CPU" if role.cpu_milli else "",
                f"{role.memory_mib} MiB of memory" if role.memory_mib else ""]
        if any(host):  # CPU and memory count in packing: name them, they may be what blocks
            parts.append("with " + " and ".join(h for h in host if h) + " free per task")
        return (" " + " and ".join(parts)) if parts else ""

    def _pack_in(self, job: JobInfo, d: int, flavor_of: dict[str, str], need_by: dict[str, int], numa: str,
                 grouped: frozenset, extra: float):
        """pack_gang inside domain d: each GPU role on the node order of its flavor, the grouped roles' groups
        inside the units below d (when d itself is above their group tier)."""
        state, binpack = self.state, self.config.binpack
        orders_by_flavor = {f: node_order(state, d, f, n, binpack=binpack) for f, n in need_by.items()}
        first = next(iter(orders_by_flavor.values()), [])
        orders = {r: orders_by_flavor[f] for r, f in flavor_of.items()} if len(orders_by_flavor) > 1 else None
        if any(not r.gpus_per_task for r in job.roles):
            merged = [k for o in orders_by_flavor.values() for k in o]
            cpu_nodes = self._cpu_nodes(d, merged)
        else:
            cpu_nodes = []
        units = None
        if grouped:
            tier = self.tree.tiers[d]
            units = {r.name: self._units(d, flavor_of[r.name], r) for r in job.roles
                     if r.name in grouped and r.name in flavor_of and tier > r.group_highest_tier}
        zone = max((self.capacity.max_zone.get(f, 0) for f in need_by), default=0)
        return pack_gang(state, job, first, cpu_nodes, extra_budget=extra, numa=numa, units=units, orders=orders,
                         numa_cap=zone)

    def _units(self, d: int, flavor: str, role: RoleInfo) -> list[list[int]]:
        """The units a group of `role` must fit in below domain d: the node order of each highest domain of
        tier <= its group tier, and each node below d outside any such domain on its own."""
        tree, state, static = self.tree, self.state, self.state.static
        top, binpack = role.group_highest_tier, self.config.binpack
        need = role.group_size * role.gpus_per_task
        out: list[list[int]] = []
        stack = [d]
        while stack:
            e = stack.pop()
            for c in tree.children[e]:
                if state.domain_free(c, flavor) <= 0:
                    continue
                if tree.tiers[c] <= top:
                    out.append(node_order(state, c, flavor, need, binpack=binpack))
                else:
                    stack.append(c)
            for k in static.direct_by_flavor[e].get(flavor, ()):
                if state.free[k]:
                    out.append([k])
        return out

    def _cpu_nodes(self, d: int, order: list[int]) -> list[int]:
        """Nodes for roles with no GPUs: the GPU order first, then the domain's other ready nodes."""
        seen = set(order)
        rest = [k for k in self.tree.nodes_under[d] if k not in seen and self.state.nodes[k].schedulable]
        return order + rest
