"""Facts about a snapshot's jobs and nodes that a cycle would otherwise find by a scan of every one of them,
kept between cycles by identity (EngineCache.scan).

The objects of a snapshot are frozen (JobInfo, NodeInfo, RoleInfo, TaskPlacement): an object seen in the
previous snapshot has the same fields now. `SnapshotIndex.update` compares the object ids of the new
snapshot's jobs and nodes with those of the previous one (set operations on dict keys, no Python loop over
unchanged objects) and applies only the objects that left or arrived. It holds every indexed object, so an
id is never reused while its entry lives. The replay passes the same objects every cycle and only the jobs
that started, ended or changed state are applied; the platform builds new objects each cycle and gets a
full pass (the same work as the scans it replaces).

Figures (exact, for the last snapshot given):
- sharing_jobs: jobs with a role that asks for a fraction or MIG instances (sharing.job_shares);
- sharing_nodes: nodes with MIG or a GPU whose mode is not "exclusive" (sharing.has_sharing's node test);
- short: ids of running jobs with a placement and fewer placed tasks than their roles' tasks (the only
  jobs actions/grow.py may find missing GPUs);
- preemptible_priorities: priority -> count of running preemptible jobs (actions/evict.py: nobody may preempt
  when none has a lower priority than a waiting job); pending_priorities: the same of the pending jobs (their
  highest, highest_pending);
- live: jobs not pending (the running_jobs metric); moving: jobs not pending with `reserved` (the new places
  of jobs being moved, actions/reschedule.hold_moving);
- lowest_pending, timed, pending_timed, pending_elastic: the lowest pending priority, the jobs not pending with a
  time limit (or, stopping, a stop deadline) and the pending jobs with a time limit, the pending jobs asking for
  more tasks than their gang minimum (what a cycle's fixed point rests on: cycle.settled_until);
- per node: ready spares (spares.has_spares), and the healthy GPUs of schedulable nodes per flavor
  (plugins.fairshare.schedulable_gpus, when every node is schedulable: else the caller's own pass).

A producer that knows every change to its jobs (the replay's scheduler.sim.state) keeps a `JobCounts` itself
and hands its figures over with the jobs tuple (`FactTuple`: a tuple with `job_facts`), so no pass over the
jobs is made at all; a tuple without them (any other caller, or a tuple rebuilt from it) is indexed here.
"""
from __future__ import annotations

from itertools import compress
from operator import attrgetter, is_not
from typing import NamedTuple


def changed_positions(nodes: tuple, seen: tuple) -> list[int]:
    """The positions k (of tuples of one length) where nodes[k] is not seen[k]: the nodes a producer replaced since
    the snapshot whose node tuple is `seen`, found C-level. EngineCache.changed_positions keeps the last answer."""
    return list(compress(range(len(nodes)), map(is_not, nodes, seen)))


class Facts(NamedTuple):
    """What a cycle asks of its snapshot's jobs and nodes (SnapshotIndex.facts)."""

    sharing: bool  # sharing.has_sharing: a sharing job, or a node with MIG or a non-exclusive GPU
    short: bool  # some running job with a placement places fewer tasks than its roles' tasks
    lowest_preemptible: int | None  # the lowest priority of a running preemptible job (None: there is none)
    live: int | None  # jobs not pending (running or preempting); None: not known (the same object twice)
    moving: bool  # some job not pending has `reserved` (the new place of a job being moved)
    spares: bool  # spares.has_spares: some node is a ready hot spare
    schedulable: dict | None  # plugins.fairshare.schedulable_gpus(nodes) (a fresh dict); None: not known here
    # (queue, node) -> GPUs of running jobs' tasks there (a fresh dict; plugins.quota.QueueTree charges them), and
    # how many pending jobs hold GPUs (`reserved`); None: not known here (some job object listed twice)
    running_gpus: dict | None = None
    holding: int | None = None
    # jobs being evicted for a beneficiary (state "preempting" with `evicted_for`: actions/evict.withdrawals looks
    # only when there is one); None: not known here
    evicting: int | None = None
    # queue -> GPUs of its running jobs' tasks (running_gpus summed per queue, a fresh dict); None: not known here
    running_queues: dict | None = None
    # the highest priority of a pending job (None: no pending job; actions/evict.py: no waiting job can be above
    # the running preemptible ones when this one is not)
    highest_pending: int | None = None
    # the lowest priority of a pending job (None: no pending job), jobs not pending with a time limit, and the pending
    # jobs with a time limit and those asking for more tasks than their gang minimum (elastic): what a cycle's
    # fixed point depends on (cycle.settled_until); None: not known here
    lowest_pending: int | None = None
    timed: int | None = None
    pending_timed: int | None = None
    pending_elastic: int | None = None


_flavor = attrgetter("flavor")


def _tasks(job) -> int:
    roles = job.roles
    return roles[0].tasks if len(roles) == 1 else sum(r.tasks for r in roles)


def _node_shares(n) -> bool:
    return bool(n.mig) or any(m != "exclusive" for m in n.gpu_modes)


def tally(counts: dict, key, change: int) -> None:
    """counts[key] += change, the key dropped when it reaches 0 (JobCounts' per-key counters hold no zeros)."""
    left = counts.get(key, 0) + change
    if left:
        counts[key] = left
    else:
        del counts[key]


class JobCounts:
    """The job figures of a set of jobs (module docstring), kept by `add` and `remove` of each job."""

    __slots__ = ("sharing_jobs", "short", "preemptible_priorities", "live", "pending_gpus", "moving", "running_gpus",
                 "holding", "evicting", "running_queues", "pending_priorities", "timed", "pending_timed",
                 "pending_elastic")

    def __init__(self) -> None:
        self.live = 0
        self.moving = 0
        self.pending_gpus = 0  # GPUs requested by the pending jobs (JobInfo.gpus_requested)
        self.sharing_jobs = 0
        self.short = 0
        self.preemptible_priorities: dict[int, int] = {}
        self.running_gpus: dict[tuple[str, str], int] = {}  # (queue, node) -> GPUs of running jobs' tasks there
        self.holding = 0  # pending jobs with `reserved` (GPUs held for them)
        self.evicting = 0  # jobs "preempting" with `evicted_for`
        self.running_queues: dict[str, int] = {}  # queue -> GPUs of its running jobs' tasks (running_gpus per queue)
        self.pending_priorities: dict[int, int] = {}  # priority -> count of pending jobs
        # jobs not pending with a time limit, or stopping (preempting) with a stop deadline: those with a known end,
        # actions/backfill.shadow_reservation's only input jobs
        self.timed = 0
        self.pending_timed = 0  # pending jobs with a time limit
        self.pending_elastic = 0  # pending jobs with a role asking for more tasks than its gang minimum

    def add(self, job, sign: int = 1) -> None:
        roles = job.roles
        if job.state == "pending":
            if len(roles) == 1:  # the common pending job, its properties read out
                r = roles[0]
                shares, gpus = r.gpu_milli or r.gpu_memory_mib or r.mig_profile, r.tasks * r.gpus_per_task
                if r.min_available < r.tasks:
                    self.pending_elastic += sign
            else:  # RoleInfo.shares, JobInfo.gpus_requested
                shares, gpus = any(r.shares for r in roles), job.gpus_requested
                if any(r.min_available < r.tasks for r in roles):
                    self.pending_elastic += sign
            if job.time_limit is not None:
                self.pending_timed += sign
            if shares:
                self.sharing_jobs += sign
            self.pending_gpus += sign * gpus
            if job.reserved:
                self.holding += sign
            tally(self.pending_priorities, job.priority, sign)
            return
        if any(r.shares for r in roles):
            self.sharing_jobs += sign
        self.live += sign
        if job.reserved:
            self.moving += sign
        if job.time_limit is not None or job.state == "preempting" and job.stop_deadline is not None:
            self.timed += sign  # a known end: backfill.shadow_reservation's input jobs
        if job.state != "running":
            if job.state == "preempting" and job.evicted_for is not None:
                self.evicting += sign
            return
        per = self.running_gpus
        total = 0
        for t in job.placement:
            if t.gpus:
                tally(per, (job.queue, t.node), sign * len(t.gpus))
                total += len(t.gpus)
        if total:
            tally(self.running_queues, job.queue, sign * total)
        if job.placement and len(job.placement) < _tasks(job):
            self.short += sign
        if job.preemptible:
            tally(self.preemptible_priorities, job.priority, sign)

    def remove(self, job) -> None:
        self.add(job, -1)

    def facts(self) -> tuple:
        """(sharing, short, lowest_preemptible, live, moving, running_gpus (a copy), holding, evicting,
        running_queues (a copy), highest_pending, lowest_pending, timed, pending_timed, pending_elastic) as in
        Facts."""
        per, waiting = self.preemptible_priorities, self.pending_priorities
        return (self.sharing_jobs > 0, self.short > 0, min(per) if per else None, self.live, self.moving > 0,
                dict(self.running_gpus), self.holding, self.evicting, dict(self.running_queues),
                max(waiting) if waiting else None, min(waiting) if waiting else None, self.timed,
                self.pending_timed, self.pending_elastic)


class FactTuple(tuple):
    """A snapshot's jobs tuple with their figures (`job_facts`: JobCounts.facts() of exactly these jobs) from
    a producer that keeps a JobCounts of them; a copy or any other tuple has job_facts None. `pending_from`:
    where the pending jobs begin when the producer lists every job not pending first and then the pending ones
    (the cycle takes them as `jobs[pending_from:]` instead of a pass over every job), else None."""

    job_facts: tuple | None = None
    pending_from: int | None = None
    unique_ids: bool = False  # the producer keeps its jobs by id: no two have the same id
    # (token of the producer's previous snapshot, this snapshot's token, jobs not pending that came, jobs not pending
    # that went) since that snapshot, in no particular order (plugins.quota's kept running tasks per node); None:
    # not known. Kept only with pending_from
    live_changes: tuple | None = None
    # how many jobs not pending have a time limit or, stopping, a stop deadline (JobCounts.timed; 0: backfill's
    # shadow finds no end to wait for without a pass over the jobs); None: not known
    timed: int | None = None
    # (token of the producer's previous snapshot, this snapshot's token, pending jobs that came (in list order),
    # pending jobs that went) since that snapshot: cache.PendingChanges.advance takes them instead of diffing
    # the whole list when the list it saw last is that snapshot's; None: not known
    pending_changes: tuple | None = None


def with_facts(jobs, counts: JobCounts, pending_from: int | None = None, unique_ids: bool = False,
               pending_changes: tuple | None = None, live_changes: tuple | None = None) -> FactTuple:
    """`jobs` (an iterable of the very jobs `counts` counts) as a FactTuple carrying their figures.
    pending_from: the producer lists the jobs not pending first, then from this index on the pending ones
    (kept only when it equals the count of jobs not pending, JobCounts.live); unique_ids: no two jobs have the
    same id (a producer that keeps them in dicts by id); pending_changes, live_changes: FactTuple's (kept only
    with pending_from)."""
    out = FactTuple(jobs)
    out.job_facts = counts.facts()
    if pending_from is not None and pending_from == counts.live:
        out.pending_from = pending_from
        out.pending_changes = pending_changes
        out.live_changes = live_changes
    out.unique_ids = unique_ids
    out.timed = counts.timed
    return out


class SnapshotIndex:
    """Facts about the last snapshot's jobs and nodes (module docstring); `update` brings it to a new one."""

    __slots__ = ("jobs", "nodes", "job_ids", "job_by_id", "node_ids", "node_by_id", "counts", "sharing_nodes",
                 "spare_ready", "unschedulable", "healthy", "last", "changed")

    def __init__(self) -> None:
        self.jobs: tuple | None = None  # the jobs tuple last indexed (held: `is` identifies it)
        self.nodes: tuple | None = None
        self.job_ids: set[int] = set()  # id(job) of the last jobs tuple
        self.job_by_id: dict = {}  # id(job) -> job, for the last jobs tuple
        self.node_ids: set[int] = set()
        self.node_by_id: dict = {}
        self.counts = JobCounts()
        self.sharing_nodes = 0
        self.spare_ready = 0  # nodes that are ready hot spares
        self.unschedulable = 0  # nodes not schedulable (down, or spares)
        self.healthy: dict[str, int] = {}  # flavor -> healthy GPUs of schedulable nodes
        self.last: Facts | None = None  # the Facts of (self.jobs, self.nodes)
        self.changed = changed_positions  # (nodes, seen) -> changed positions (the engine cache's, which keeps one)

    def update(self, jobs: tuple, nodes: tuple) -> Facts:
        """The Facts of a snapshot's jobs and nodes; the jobs are indexed unless they carry their figures."""
        if jobs is self.jobs and nodes is self.nodes and self.last is not None:
            return self.last
        given = getattr(jobs, "job_facts", None)
        if given is None and jobs is not self.jobs:
            ids = set(map(id, jobs))
            prev, counts = self.job_by_id, self.counts
            if not prev or self.job_ids.isdisjoint(ids):  # every job object is new (a platform snapshot): start over
                prev.clear()
                counts = self.counts = JobCounts()  # what taking every job out leaves (zero sums, empty dicts)
                self.job_ids = set()
                prev.update(zip(map(id, jobs), jobs))  # each object once, where it first appears (as below)
                add = counts.add
                for job in prev.values():
                    add(job)
                self.job_ids, self.jobs = ids, jobs
            for i in self.job_ids - ids:
                counts.remove(prev.pop(i))
            added = ids - self.job_ids
            if added:
                for job in compress(jobs, map(added.__contains__, map(id, jobs))):
                    i = id(job)
                    if i not in prev:  # the same object twice in `jobs`: counted once (figures are any / min)
                        prev[i] = job
                        counts.add(job)
            self.job_ids, self.jobs = ids, jobs
        before = self.nodes
        if nodes is not before and before is not None and len(nodes) == len(before) == len(self.node_ids):
            # the same positions (a producer that replaces only the nodes that changed): the changed ones only,
            # found C-level, when their new objects are none of the indexed ones and each once (else the sets)
            at = self.changed(nodes, before)
            prev = self.node_by_id
            new = [nodes[k] for k in at]
            new_ids = set(map(id, new))
            if len(new_ids) == len(new) and new_ids.isdisjoint(self.node_ids):
                old_ids = self.node_ids
                for k in at:
                    old = prev.pop(id(before[k]))
                    old_ids.discard(id(old))
                    self._node(old, -1)
                for node in new:
                    prev[id(node)] = node
                    self._node(node, 1)
                old_ids |= new_ids
                self.nodes = nodes
        if nodes is not self.nodes:
            ids = set(map(id, nodes))
            prev = self.node_by_id
            if prev and self.node_ids.isdisjoint(ids):  # every node object is new: start over
                prev.clear()
                self.node_ids = set()
                self.sharing_nodes = self.spare_ready = self.unschedulable = 0
                self.healthy = {}
            for i in self.node_ids - ids:
                self._node(prev.pop(i), -1)
            added = ids - self.node_ids
            if added:
                for node in compress(nodes, map(added.__contains__, map(id, nodes))):
                    if id(node) not in prev:
                        prev[id(node)] = node
                        self._node(node, 1)
            self.node_ids, self.nodes = ids, nodes
        sharing, short, lowest, live, moving, running, holding, evicting, queues, highest, *settle = \
            given if given is not None else self.counts.facts()
        if given is None and len(self.job_ids) != len(jobs):
            live = running = holding = queues = None  # some job object listed twice: counted once here
            settle = ()
        schedulable = None
        if not self.unschedulable and len(self.node_ids) == len(nodes):  # every node, each once: flavors in node order
            healthy = self.healthy
            if len(healthy) == 1 and nodes:  # every node adds its flavor's key: they all have this one
                schedulable = dict(healthy)
            else:
                schedulable = {f: healthy[f] for f in dict.fromkeys(map(_flavor, nodes))}
        self.jobs = jobs
        self.last = Facts(sharing or self.sharing_nodes > 0, short, lowest, live, moving, self.spare_ready > 0,
                          schedulable, running, holding, evicting, queues, highest, *settle)
        return self.last

    def _node(self, n, sign: int) -> None:
        self.sharing_nodes += sign * _node_shares(n)
        if n.spare and n.state == "ready":
            self.spare_ready += sign
        if n.schedulable:
            self.healthy[n.flavor] = self.healthy.get(n.flavor, 0) + sign * (n.gpus - len(n.unhealthy))
        else:
            self.unschedulable += sign
