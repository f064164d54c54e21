"""Hierarchical queue usage, limits and entitlement, per GPU flavor (docs/quotas.md).

A queue's usage is its own jobs' GPUs plus its children's (charged up the chain): the GPUs of its running
jobs, and the GPUs held for its pending jobs (eviction beneficiaries, drain reservations) that no running
job occupies. A job being evicted (state "preempting") counts for nobody: its GPUs are already promised to
the holder. A job may start only if, at every level from its queue up to the root, usage + request <=
limit for the flavor it lands on (a limit of None means the level sets no cap of its own).

Entitlement (`entitlement`, the one definition the actions use): what a queue deserves of a flavor and
may defend against reclaim or take back by reclaim. A top-level queue is entitled to its quota. A child is
entitled to its own quota plus the part of its parent's entitlement that no child's quota claims (so a
child without a quota of its own lives on its parent's). A queue that sets no quota for any flavor is a
grouping node: it deserves what its children's quotas add up to, plus what its parent leaves unassigned.
Reclaim between two queues checks only the levels below the ancestor they share (`claim_room`): a move
between siblings leaves every shared ancestor's usage unchanged, so it cannot be blocked by them.
Units: GPUs.
"""
from __future__ import annotations

import math
import threading
from collections import defaultdict
from operator import attrgetter, itemgetter

from ..jobindex import FactTuple
from ..snapshot import JobInfo, QueueInfo, Snapshot

INF = math.inf
_static_fields = attrgetter("name", "parent", "weight", "quotas")  # QueueTree.static_key's entry of a queue
_node_of = itemgetter(1)  # (queue, node) -> node
_reserved = attrgetter("reserved")


class _Statics:
    """What a QueueTree derives from its queues' names, parents, weights and quotas alone (chains, children,
    entitlements: static within a cycle, and across cycles while those are the same), kept in the engine
    cache's job memo (key ("queue statics", thread)) under `key`, filled on demand."""

    __slots__ = ("key", "chains", "entitled", "kids")

    def __init__(self, key):
        self.key = key
        self.chains: dict[str, tuple[str, ...]] = {}
        self.entitled: dict[tuple, float] = {}
        self.kids: dict | None = None


_UNSET = object()


class _RunningKept:
    """QueueTree.running_on's answers kept across cycles in the engine cache's job memo (key ("running on", thread)):
    per node, the GPUs of each running job of a known queue with a task there (node -> id(job) -> GPU indices),
    brought up to date from the jobs not pending that came and went as a producer hands them
    (FactTuple.live_changes: the replay's state records them per change; a job changing state is a new object), so
    no cycle passes over every running job. `token`: the producer's token of the snapshot it is up to date with
    (None: none). Valid while the queues' names are the same (`statics`, QueueTree's kept statics: which queues are
    known). Holds the jobs it indexes, so an id is never reused while it is kept."""

    __slots__ = ("statics", "jobs", "by_node", "token", "versions", "epoch", "charges")

    def __init__(self, statics):
        self.statics = statics
        self.jobs: dict[int, JobInfo] = {}  # id(job) -> job, the jobs not pending as of `token`
        self.by_node: dict[str, dict[int, tuple]] = {}  # node -> id(job) -> its running GPUs there
        self.token = None
        # per node, a count of the changes to its entry (by_node), and of the rebuilds: a stamp of the nodes of a
        # hold's tasks (`stamp`) is the same only while running_on's answer for each of them is
        self.versions: dict[str, int] = {}
        self.epoch = 0
        # id(holder) -> (the holder, its stamp, GPUs per flavor charged for its reserved tasks: QueueTree.held's)
        self.charges: dict[int, tuple] = {}

    def stamp(self, tasks) -> tuple:
        versions = self.versions
        return (self.epoch, *[versions.get(t.node, 0) for t in tasks])

    def rebuild(self, live, known) -> None:
        """Index `live` (the snapshot's jobs not pending) from scratch."""
        self.jobs.clear()
        self.by_node.clear()
        self.versions.clear()
        self.charges.clear()
        self.epoch += 1
        self.apply(live, (), known)

    def apply(self, came, gone, known) -> None:
        """The jobs of `gone` left, those of `came` arrived (the producer's changes since the indexed snapshot)."""
        jobs, by_node, versions = self.jobs, self.by_node, self.versions
        for job in gone:
            i = id(job)
            if jobs.pop(i, None) is None:
                continue
            for t in job.placement:
                per = by_node.get(t.node)
                if per is not None and per.pop(i, None) is not None:
                    versions[t.node] = versions.get(t.node, 0) + 1
                    if not per:
                        del by_node[t.node]
        for job in came:
            i = id(job)
            jobs[i] = job
            if job.state == "running" and known(job.queue):
                for t in job.placement:
                    versions[t.node] = versions.get(t.node, 0) + 1
                    per = by_node.get(t.node)
                    if per is None:
                        by_node[t.node] = {i: tuple(t.gpus)}
                    else:
                        had = per.get(i)
                        per[i] = tuple(t.gpus) if had is None else (*had, *t.gpus)


def queue_chain(queues: dict[str, QueueInfo], name: str) -> tuple[str, ...]:
    """The queue `name` and its ancestors in `queues` (name -> QueueInfo), leaf first; an unknown parent (or a
    cycle) ends the chain; (name,) for an unknown queue."""
    out, q, seen = [], name, set()
    while q is not None and q in queues and q not in seen:
        out.append(q)
        seen.add(q)
        q = queues[q].parent
    return tuple(out) or (name,)


def least_limit(queues: dict[str, QueueInfo], chain, flavor: str) -> tuple[float, str | None]:
    """(the smallest limit for `flavor` along `chain` (queue names, queue_chain), the queue that sets it): a job
    needing more GPUs can never run in the chain's leaf; (INF, None) when none is set. Units: GPUs."""
    best, who = INF, None
    for q in chain:
        info = queues.get(q)
        quota = info.quotas.get(flavor) if info else None
        if quota is not None and quota.limit is not None and quota.limit < best:
            best, who = quota.limit, q
    return best, who


def claimed(queue, quota_of, children_of, seen: frozenset = frozenset()) -> float:
    """What `queue`'s quota claims of one flavor in its parent's sum (GPUs): its quota, 0 when it has quotas for other
    flavors only, and for a grouping node (a queue with no quota for any flavor) what its children claim, recursively.
    The one rule behind the engine's entitlements (QueueTree) and the platform's quota-sum checks
    (gpuplatform.quota_rules). quota_of(q): q's quota of the flavor (0 as above), None for a grouping node;
    children_of(q): q's children (any hashable ids). A queue met again below itself (a loop) claims 0."""
    own = quota_of(queue)
    if own is not None:
        return own
    if queue in seen:
        return 0
    seen = seen | {queue}
    return sum(claimed(c, quota_of, children_of, seen) for c in children_of(queue))


class QueueTree:
    def __init__(self, snapshot: Snapshot, static=None, facts=None, memo: dict | None = None):
        """static: the snapshot's domain_tree.ClusterStatic, when the caller has it (saves two node scans).
        facts: the snapshot's jobindex.Facts, when the caller has them (EngineCache.scan): the running jobs' GPUs
        per (queue, node) and the count of holding jobs then come from them instead of a pass over every job
        (the same charges: integer sums per (queue, flavor)). memo: the engine cache's job memo, or None: the
        chains, children and entitlements are then kept there while the queues' names, parents, weights and
        quotas are the same (`static_key`; a QueueInfo's recent usage may change)."""
        self.queues: dict[str, QueueInfo] = {q.name: q for q in snapshot.queues}
        self.open_world = not self.queues  # no queues defined: every job's queue is accepted, no caps
        self.usage: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        # (name, parent, weight, quotas) per queue: what fair shares and entitlements read of the queues
        self.static_key = tuple(map(_static_fields, snapshot.queues))
        kept = None
        if memo is not None:
            slot = ("queue statics", threading.get_ident())
            kept = memo.get(slot)
            if kept is None or kept.key != self.static_key:
                kept = memo[slot] = _Statics(self.static_key)
            self.static_key = kept.key
        self._statics = kept
        self._chains: dict[str, tuple[str, ...]] = {} if kept is None else kept.chains
        self.version = 0  # bumped by every charge, the only writer of usage
        # a limit at or above the cluster's whole capacity of a flavor can only bind when the cluster is
        # full, which says "no free GPUs", not "over the limit": such limits are treated as no cap
        self.capacity: dict[str, int] = defaultdict(int)
        if static is not None:
            node_flavor = static.node_flavor
            self.capacity.update(static.flavor_gpus)
        else:
            node_flavor = {n.name: n.flavor for n in snapshot.nodes}
            for n in snapshot.nodes:
                self.capacity[n.flavor] += n.gpus
        self._node_flavor = node_flavor
        self._entitled: dict[tuple[str, str], float] = {} if kept is None else kept.entitled
        self._kids: dict[str | None, list[str]] | None = None if kept is None else kept.kids
        self.held: dict = {}  # pending job id -> (queue, flavor -> GPUs) charged for its hold
        self._running_on: dict[str, set[int]] = {}  # node -> GPUs of running jobs there, for the nodes asked
        # the running jobs' tasks per node kept across cycles (_RunningKept), looked up on the first running_on call
        self._memo, self._kept_running = memo, _UNSET
        # running jobs' GPUs summed per (queue, flavor) first, then charged once each (the same usage as a
        # charge per task, without walking every queue chain once per task)
        totals: dict[tuple[str, str], int] = {}
        holders = []  # pending jobs holding GPUs (charged below)
        open_world, names, flavor_of = self.open_world, self.queues, node_flavor.get
        running = facts.running_gpus if facts is not None and facts.holding is not None else None
        by_queue = facts.running_queues if running is not None else None
        if by_queue is not None and len(self.capacity) == 1 and all(map(node_flavor.__contains__,
                                                                         map(_node_of, running))):
            # one flavor on every node, and every running task on a known node: the per-queue sums are the totals
            # (integers, exact in any order; usage's keys may come in another order, which nothing reads)
            (flavor,) = self.capacity
            # charged up each chain here, summed per level first (the same usage, its keys in the same order of
            # first charge; one defaultdict per level made once instead of a lambda call and a += per charge)
            sums: dict[str, int] = {}
            chains, chain, charged = self._chains, self.chain, 0
            for queue, gpus in by_queue.items():
                if open_world or queue in names:
                    charged += 1
                    for q in chains.get(queue) or chain(queue):
                        sums[q] = sums.get(q, 0) + gpus
            usage = self.usage
            for q, gpus in sums.items():
                usage[q] = defaultdict(int, ((flavor, gpus),))
            self.version += charged
        elif running is not None:  # kept per change by the caller's index: no pass over the jobs
            for (queue, node), gpus in running.items():
                if open_world or queue in names:
                    key = (queue, flavor_of(node, ""))
                    totals[key] = totals.get(key, 0) + gpus
        # the jobs not pending, and the pending ones: a producer's FactTuple lists them apart (pending_from), and
        # only jobs not pending can run (running_on's pass) and only pending ones hold (the holders, in order)
        jobs = snapshot.jobs
        start = jobs.pending_from if facts is not None and type(jobs) is FactTuple else None
        self._live = jobs if start is None else jobs[:start]
        # the producer's changes to the jobs not pending since its previous snapshot (FactTuple.live_changes): the
        # kept running tasks per node (_RunningKept), when there is one up to date with that snapshot, move with them
        self._live_changes = jobs.live_changes if start is not None else None
        if self._live_changes is not None and memo is not None and kept is not None:
            running_kept = memo.get(("running on", threading.get_ident()))
            if running_kept is not None and running_kept.statics is kept \
                    and running_kept.token is self._live_changes[0] and running_kept.token is not None:
                running_kept.apply(self._live_changes[2], self._live_changes[3], self.known)
                running_kept.token = self._live_changes[1]
        if running is not None:
            if facts.holding:
                holders = [j for j in filter(_reserved, jobs if start is None else jobs[start:])
                           if j.state == "pending" and (open_world or j.queue in names)]
        else:
            for job in snapshot.jobs:  # one pass: the jobs' state, queue and placement only
                state = job.state
                if state == "running":
                    if open_world or job.queue in names:
                        for t in job.placement:
                            if t.gpus:
                                key = (job.queue, flavor_of(t.node, ""))
                                totals[key] = totals.get(key, 0) + len(t.gpus)
                elif state == "pending" and job.reserved and (open_world or job.queue in names):
                    holders.append(job)
                # else being evicted: its GPUs are promised to the holder
        usage, chain = self.usage, self.chain
        for (queue, flavor), gpus in totals.items():  # self.charge(queue, flavor, gpus), inlined
            for q in chain(queue):
                usage[q][flavor] += gpus
        self.version += len(totals)
        for queue, resource, amount in snapshot.share_usage:  # running fractions and MIG instances (sharing.py)
            if self.known(queue):
                self.charge(queue, resource, amount)
        if holders:
            kept = self._kept_running
            if kept is _UNSET:
                kept = self._kept_running = self._running_kept()
            if kept is None:
                self.running_on({t.node for job in holders for t in job.reserved})  # one pass for them all
                for job in holders:
                    self.charge_hold(job.id, job.queue, job.reserved)
            else:
                for job in holders:
                    self._charge_reserved(job, kept)

    def running_on(self, nodes) -> dict[str, set[int]]:
        """node -> GPU indices of jobs running there at snapshot time (known queues; not those being
        evicted), filled for `nodes` (one pass over the snapshot's jobs for those not asked before)."""
        known = self._running_on
        missing = {n for n in nodes if n not in known}
        if missing:
            kept = self._kept_running
            if kept is _UNSET:
                kept = self._kept_running = self._running_kept()
            if kept is not None:  # the same sets from the kept index of the running tasks per node
                by_node = kept.by_node
                for n in missing:
                    found_on = known[n] = set()
                    per = by_node.get(n)
                    if per:
                        for gpus in per.values():
                            found_on.update(gpus)
                return known
            found: dict[str, set[int]] = {n: set() for n in missing}
            for job in self._live:  # the jobs not pending (running ones among them): the nodes first, then the queue
                if job.state == "running":
                    for t in job.placement:
                        if t.node in missing and self.known(job.queue):
                            found[t.node].update(t.gpus)
            known.update(found)
        return known

    def _running_kept(self) -> "_RunningKept | None":
        """The memo's _RunningKept (key ("running on", thread)) up to date with this snapshot's jobs not pending (made
        from them when there is none, or it is not up to date), or None: no memo, or a snapshot whose producer does
        not hand its changes (FactTuple.live_changes; running_on's pass then)."""
        memo, statics, live_changes = self._memo, self._statics, self._live_changes
        if memo is None or statics is None or live_changes is None:
            return None
        slot = ("running on", threading.get_ident())
        kept = memo.get(slot)
        if kept is None or kept.statics is not statics:
            kept = memo[slot] = _RunningKept(statics)
        if kept.token is not live_changes[1]:  # (__init__ brought a kept one from the previous snapshot forward)
            kept.rebuild(self._live, self.known)
            kept.token = live_changes[1]
        return kept

    def _charge_reserved(self, job: JobInfo, kept: _RunningKept) -> None:
        """charge_hold(job.id, job.queue, job.reserved), its GPUs per flavor taken from the kept index's last answer
        for the same job object while no running job came to or left a node of its reserved tasks since
        (_RunningKept.stamp): the same charges, in the same order."""
        stamp = kept.stamp(job.reserved)
        entry = kept.charges.get(id(job))
        if entry is not None and entry[0] is job and entry[1] == stamp:
            self._hold(job.id, job.queue, entry[2])
            return
        self.charge_hold(job.id, job.queue, job.reserved)
        if len(kept.charges) > 1024:
            kept.charges.clear()
        kept.charges[id(job)] = (job, stamp, dict(self.held[job.id][1]))

    def charge_hold(self, job_id, queue: str, tasks, *, all_gpus: bool = False) -> None:
        """Charge GPUs held for a pending job to its queue: those of `tasks` (TaskPlacements) that no job
        running at snapshot time occupies (a drain reservation's GPUs still running their own job count
        once, there), or all of them (`all_gpus`: the eviction phase has uncharged the victims already).
        Replaces any hold charged for the job before."""
        per_flavor: dict[str, int] = defaultdict(int)
        running = None if all_gpus else self.running_on({t.node for t in tasks})
        for t in tasks:
            busy = running[t.node] if running is not None else ()
            free = sum(1 for g in t.gpus if g not in busy)
            if free:
                per_flavor[self._node_flavor.get(t.node, "")] += free
        self._hold(job_id, queue, per_flavor)

    def _hold(self, job_id, queue: str, per_flavor: dict[str, int]) -> None:
        """The job's hold charged anew: the one charged before dropped, then `per_flavor` (flavor -> GPUs)."""
        self.drop_hold(job_id)
        for flavor, gpus in per_flavor.items():
            self.charge(queue, flavor, gpus)
        self.held[job_id] = (queue, dict(per_flavor))

    def drop_hold(self, job_id) -> None:
        """Uncharge the hold charged for a pending job (it starts, or its hold is given up)."""
        queue, per_flavor = self.held.pop(job_id, (None, {}))
        for flavor, gpus in per_flavor.items():
            self.charge(queue, flavor, -gpus)

    def known(self, name: str) -> bool:
        return self.open_world or name in self.queues

    def chain(self, name: str) -> tuple[str, ...]:
        """The queue and its ancestors, leaf first. Unknown parents end the chain."""
        chain = self._chains.get(name)
        if chain is None:
            chain = self._chains[name] = queue_chain(self.queues, name)
        return chain

    def charge(self, queue: str, flavor: str, gpus: int) -> None:
        self.version += 1  # usage changed: values derived from it (e.g. shares) are stale
        for q in self.chain(queue):
            self.usage[q][flavor] += gpus

    def headroom(self, queue: str, flavor: str) -> tuple[float, str | None]:
        """(GPUs of `flavor` the queue may still take, the queue whose limit binds or None)."""
        best, who = INF, None
        for q in self.chain(queue):
            info = self.queues.get(q)
            quota = info.quotas.get(flavor) if info else None
            if quota is not None and quota.limit is not None and quota.limit < self.capacity[flavor]:
                room = quota.limit - self.usage[q][flavor]
                if room < best:
                    best, who = room, q
        return best, who

    def _quota(self, name: str, flavor: str) -> int | None:
        """The queue's quota of `flavor`; None for a grouping node (a queue with no quota for any flavor)."""
        info = self.queues.get(name)
        if info is None or not info.quotas:
            return None
        quota = info.quotas.get(flavor)
        return quota.quota if quota else 0

    def children(self, name: str | None) -> list[str]:
        """The queues whose parent is `name` (None: the top-level queues, and those whose parent is unknown), in
        the queues' order. Static (kept with the chains); do not mutate."""
        return self._children(name)

    def _children(self, name: str | None) -> list[str]:
        kids = self._kids
        if kids is None:
            kids = self._kids = defaultdict(list)
            for q, info in self.queues.items():
                kids[info.parent if info.parent in self.queues else None].append(q)
            if self._statics is not None:
                self._statics.kids = kids
        return kids.get(name, [])

    def _claimed(self, name: str, flavor: str) -> float:
        """What a queue's quota claims of its parent's entitlement (a grouping node: its children's): `claimed`."""
        return claimed(name, lambda q: self._quota(q, flavor), self._children)

    def entitlement(self, queue: str, flavor: str) -> float:
        """GPUs of `flavor` the queue deserves (module docstring): a top-level queue its quota (a grouping
        node its children's quotas); a child its quota (a grouping node its children's) plus its parent's
        entitlement that no child's quota claims. Static within a cycle (quotas only)."""
        key = (queue, flavor)
        value = self._entitled.get(key)
        if value is None:
            value = self._claimed(queue, flavor)
            parent = self.queues[queue].parent if queue in self.queues else None
            if parent in self.queues:
                kids = self._entitled.get((parent, flavor, "children"))  # what the siblings' quotas claim
                if kids is None:
                    kids = self._entitled[(parent, flavor, "children")] = sum(
                        self._claimed(c, flavor) for c in self._children(parent))
                unassigned = self.entitlement(parent, flavor) - kids
                value += max(0.0, unassigned)
            self._entitled[key] = value
        return value

    def below_common(self, queue: str, other: str) -> tuple[str, ...]:
        """The levels of `queue`'s chain strictly below the lowest ancestor it shares with `other`'s chain
        (its whole chain when they share none), leaf first."""
        theirs = set(self.chain(other))
        out = []
        for q in self.chain(queue):
            if q in theirs:
                break
            out.append(q)
        return tuple(out)

    def claim_room(self, levels, flavor: str) -> float:
        """GPUs of `flavor` a claim may add at every one of `levels` staying within its entitlement:
        min over them of entitlement - usage (INF for no level)."""
        room = INF
        for q in levels:
            room = min(room, self.entitlement(q, flavor) - self.usage[q][flavor])
        return room

    def entitlement_room(self, queue: str, flavor: str) -> tuple[float, str | None]:
        """(GPUs of `flavor` the queue may still take without borrowing, the level of its chain that binds):
        min over the chain of entitlement - usage; (INF, None) for a queue outside the tree."""
        if self.open_world or queue not in self.queues:
            return INF, None
        best, who = INF, None
        entitled, usage = self._entitled, self.usage
        for q in self.chain(queue):
            e = entitled.get((q, flavor))  # entitlement(q, flavor), kept
            if e is None:
                e = self.entitlement(q, flavor)
            room = e - usage[q][flavor]
            if room < best:
                best, who = room, q
        return best, who

    def within_entitlement(self, queue: str, flavor: str, gpus: int) -> bool:
        """Whether `gpus` more of `flavor` keep the queue and every ancestor within its entitlement (the
        job would not borrow). Always True with no queues defined."""
        return self.entitlement_room(queue, flavor)[0] >= gpus

    def flavor_share(self, queue: str, flavor: str) -> float:
        """usage / entitlement of one flavor (borrowed usage above a zero entitlement counts as 1e6 +
        usage, after every queue within its entitlement)."""
        used = self.usage.get(queue, {}).get(flavor, 0)
        if not used:
            return 0.0
        deserved = self.entitlement(queue, flavor) if queue in self.queues else 0
        return used / deserved if deserved > 0 else 1e6 + used

    def static_limit(self, queue: str, flavor: str) -> tuple[float, str | None]:
        """The smallest limit on the chain for `flavor`: a job needing more can never run in this queue."""
        return least_limit(self.queues, self.chain(queue), flavor)

    def static_entitlement(self, queue: str, flavor: str) -> tuple[float, str | None]:
        """(the smallest entitlement to `flavor` along the queue's chain, the level that has it): what a job that may
        not borrow (a non-preemptible one) can ever hold there, whatever runs; (INF, None) with no queues defined or
        for a queue outside the tree. Static within a cycle (quotas only). Units: GPUs."""
        if self.open_world or queue not in self.queues:
            return INF, None
        best, who = INF, None
        for q in self.chain(queue):
            e = self.entitlement(q, flavor)
            if e < best:
                best, who = e, q
        return best, who

    def share(self, queue: str) -> float:
        """Dominant share: max over flavors of usage / quota (DRF's dominant resource, Ghodsi et al.,
        NSDI 2011, with per-flavor quotas as the denominators). Usage without quota counts as
        1e6 + usage, so queues living on borrowed GPUs only come after every queue within quota."""
        info = self.queues.get(queue)
        used = self.usage.get(queue, {})
        best = 0.0
        for flavor, gpus in used.items():
            if not gpus:
                continue
            quota = info.quotas.get(flavor) if info else None
            best = max(best, gpus / quota.quota if quota and quota.quota else 1e6 + gpus)
        return best

    def weight(self, queue: str) -> float:
        info = self.queues.get(queue)
        return info.weight if info else 1.0


def count_text(x: float) -> str:
    """A count as people read it: an integer without a decimal point (3.0 -> '3'), else '%g' (2.5)."""
    return str(int(x)) if math.isfinite(x) and x == int(x) else f"{x:g}"


def never_within_quota(level: str, entitled: float) -> str:
    """Why a non-preemptible job whose minimum exceeds `entitled`, the smallest entitlement along its queue's chain
    (QueueTree.static_entitlement, at `level`), can never start: such a job may not borrow (it could never be
    reclaimed), and no wait raises an entitlement. The words of the terminal never_fits_queue_quota reason of the
    whole-GPU allocator (actions/allocate.Admission) and of the GPU-sharing pass (sharing.limit_never_fits)."""
    return (f"non-preemptible jobs run only within quota (they may not borrow) and queue {level} is entitled to "
            f"{count_text(entitled)} (its quota plus what its parents leave unassigned, docs/quotas.md); submit it "
            f"preemptible or raise the quota")


def borrow_refusal(tree: QueueTree, queue: str, key: str, need: float, within: tuple[float, str | None] | None = None,
                   unit: str = "GPUs") -> str | None:
    """Why a non-preemptible job may not take `need` more of `key` (a flavor's GPUs, a sharing job's GPU-equivalents
    or a MIG resource's instances) in `queue` now, or None: such a job may not borrow (it could never be reclaimed),
    so it runs only within the entitlement of every level of its queue's chain (QueueTree.entitlement_room; docs/
    quotas.md). The one rule of the whole-GPU allocator (actions/allocate.Admission) and of the GPU-sharing pass
    (sharing._over_quota). within: entitlement_room(queue, key) when the caller has it (kept), else read here.
    Returns the message of the "queue_limit" reason, naming the level that binds."""
    room, level = within if within is not None else tree.entitlement_room(queue, key)
    if need <= room + 1e-9:
        return None
    used = tree.usage[level][key]
    return (f"non-preemptible jobs run only within quota: queue {level} uses {count_text(used)} of its quota of "
            f"{count_text(used + room)} {key} {unit} (its entitlement, docs/quotas.md), job needs {count_text(need)}")


def job_order_key(job: JobInfo) -> tuple:
    """Within a queue: higher priority first, then earlier (original) submission, then id."""
    return (-job.priority, job.submit_time, str(job.id))


def queue_order_key(job, fair_share: bool = True) -> tuple:
    """A job's place in its queue's order as the allocate walk takes it (_QueueOrder.job_key): job_order_key with
    fair share, else first come first served (submission, then id). `job`: anything with priority, submit_time
    (seconds) and id."""
    return job_order_key(job) if fair_share else (job.submit_time, str(job.id))


def in_queue_places(considered: list, waiting: list, key_of: dict, queue_of: dict) -> list:
    """The pending jobs in one order: `considered` (job ids, in the order a cycle considered them) with each job of
    `waiting` (ids the cycle did not consider: in their requeue backoff) where it stands in its queue, just before
    the first considered job of its queue that comes after it in the queue's order (`key_of`: job id ->
    queue_order_key; `queue_of`: job id -> queue), else after every considered job, in that order. A job waiting
    out a backoff is considered again, in its place, once the backoff ends (new-user trial 24, F3: put last, a job
    requeued after a node was lost read #2 behind a job submitted after it, and started first)."""
    places: dict = defaultdict(list)  # queue -> [(key, position in considered)]
    for i, job in enumerate(considered):
        places[queue_of[job]].append((key_of[job], i))
    before: dict = defaultdict(list)  # position in considered -> the waiting jobs placed just before it
    last = []
    for job in sorted(waiting, key=key_of.__getitem__):
        key = key_of[job]
        spot = next((i for k, i in places.get(queue_of[job], ()) if k > key), None)
        (last if spot is None else before[spot]).append(job)
    out = []
    for i, job in enumerate(considered):
        out.extend(before.get(i, ()))
        out.append(job)
    return out + last
