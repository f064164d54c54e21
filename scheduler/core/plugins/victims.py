"""Who may be evicted, and in what order (least work lost first).

Units, in order: surplus tasks of elastic gangs (tasks above their role's min_available, highest index
first), then whole gangs; within each kind, lowest priority first, then most recently started, then
fewest GPUs. A preempting job is never a victim again; a non-preemptible job is never a victim.

Rules (Volcano's preempt / reclaim actions, Kueue's classical preemption):
- preempt: same leaf queue, strictly lower priority.
- reclaim: another queue that is borrowing: some level of the victim's queue chain that the
  beneficiary's chain does not share is above its entitlement before the unit is taken (QueueTree
  .entitlement; the unit that crosses the line may take it below: a gang reaching past its queue's
  entitlement does not protect it), and no such level drops below its guarantee. The levels the two chains
  share are not checked (Kueue's and KAI's semantics): a reclaim between siblings is their parent's own
  business, and a parent's guarantee protects it from other queues, not one child from another (trial 21,
  F16: a parent whose guarantee equalled its quota let a child above its quota keep a sibling below its own
  waiting for good). GPUs such a move frees beyond what the beneficiary takes are idle, and the parent,
  below its guarantee, may take them back by reclaim.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from operator import is_, itemgetter

from ..snapshot import JobInfo, TaskPlacement
from .quota import QueueTree


@dataclass(frozen=True, slots=True)
class Unit:
    job: JobInfo
    tasks: tuple[TaskPlacement, ...]
    whole: bool
    gpus: int = field(init=False, compare=False)  # GPUs of the tasks (computed once: read per unit by the searches)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", sum(len(t.gpus) for t in self.tasks))


_first = itemgetter(0)
# per thread: `jobs`, id(job) -> (job, its surplus entries, its whole entry) of the last call; `last`, (that call's
# running jobs, its units)
_kept = threading.local()


def _job_units(job: JobInfo) -> tuple[list[tuple[tuple, Unit]], tuple[tuple, Unit]]:
    """A running preemptible job's (surplus entries, whole entry): (sort key, Unit), from the JobInfo alone."""
    start = job.start_time or 0.0
    surplus = []
    by_role: dict[str, list[TaskPlacement]] = defaultdict(list)
    for t in job.placement:
        by_role[t.role].append(t)
    mins = {r.name: r.min_available for r in job.roles}
    for role, tasks in by_role.items():
        tasks.sort(key=lambda t: t.index, reverse=True)
        for t in tasks[: max(0, len(tasks) - mins.get(role, len(tasks)))]:
            surplus.append(((job.priority, -start, -t.index, str(job.id)), Unit(job, (t,), whole=False)))
    unit = Unit(job, job.placement, whole=True)
    return surplus, ((job.priority, -start, unit.gpus, str(job.id)), unit)


def victim_units(running: list[JobInfo]) -> list[Unit]:
    """The evictable units of `running`, in order (module docstring). A job's units and sort keys are derived
    from its JobInfo alone, so they are kept per job object from one call to the next (per thread; each entry
    holds its job, so an id is never reused while kept; only the last call's jobs are kept): a caller that
    passes the same frozen objects cycle after cycle (the replay) builds each job's units once; the very same jobs in
    the same order as the last call's (both eviction rounds of a cycle; a cycle where no running job came or went) get
    the last call's list again (callers read it, never change it)."""
    last = getattr(_kept, "last", None)
    if last is not None and len(last[0]) == len(running) and all(map(is_, running, last[0])):
        return last[1]
    kept = getattr(_kept, "jobs", None) or {}
    now: dict[int, tuple] = {}
    surplus: list[tuple[tuple, Unit]] = []
    whole: list[tuple[tuple, Unit]] = []
    for job in running:
        if job.state != "running" or not job.preemptible or not job.placement:
            continue
        entry = kept.get(id(job))
        if entry is None or entry[0] is not job:
            entry = (job, *_job_units(job))
        now[id(job)] = entry
        if entry[1]:
            surplus.extend(entry[1])
        whole.append(entry[2])
    _kept.jobs = now
    surplus.sort(key=_first)
    whole.sort(key=_first)
    units = [u for _, u in surplus] + [u for _, u in whole]
    _kept.last = (tuple(running), units)
    return units


class ReclaimLedger:
    """Tentative usage of the queues that victims come from, so several victims of one queue never take
    it below its quota (or a level below its guarantee).

    Kept per ledger (one victim search): each victim queue's levels (its chain less the beneficiary's), and
    per (level, flavor) its guarantee and entitlement (static within a cycle); `delta` holds the GPUs taken per
    (level, flavor), only ever growing (nothing is given back). The usage read is the QueueTree's, level by level
    (its defaultdicts fill in the same keys in the same order). The levels both chains share are not checked
    (module docstring)."""

    def __init__(self, queues: QueueTree, beneficiary_queue: str, flavor_of: dict[str, str]):
        self.queues = queues
        self.shared = set(queues.chain(beneficiary_queue))
        self.flavor_of = flavor_of
        self.delta: dict[tuple[str, str], int] = {}
        self._levels_of: dict[str, list[str]] = {}  # victim queue -> its levels below the shared ancestor
        self._bounds: dict[tuple[str, str], tuple[int, float]] = {}  # (level, flavor) -> (guarantee, entitlement)
        self._closed: set[tuple[str, str]] = set()  # (victim queue, flavor) refused for good (claim)
        # victim queue -> why its first refused unit was refused, in the order of those refusals (written only when a
        # unit is refused): ("guarantee", the level that would drop below its guarantee, flavor, that guarantee) or
        # ("entitlement", the queue, flavor, its entitlement) when no level of its below the shared ancestor borrows
        self.refused: dict[str, tuple[str, str, str, float]] = {}

    def _levels(self, queue: str) -> list[str]:
        levels = self._levels_of.get(queue)
        if levels is None:
            levels = self._levels_of[queue] = [q for q in self.queues.chain(queue) if q not in self.shared]
        return levels

    def _per_flavor(self, tasks: tuple[TaskPlacement, ...]):
        """(flavor, GPUs) pairs of the tasks, flavors in first-seen order."""
        if len(tasks) == 1:
            t = tasks[0]
            return ((self.flavor_of[t.node], len(t.gpus)),)
        out: dict[str, int] = {}
        flavor_of = self.flavor_of
        for t in tasks:
            f = flavor_of[t.node]
            out[f] = out.get(f, 0) + len(t.gpus)
        return out.items()

    def _bound(self, q: str, flavor: str) -> tuple[int, float]:
        info = self.queues.queues.get(q)
        quota = info.quotas.get(flavor) if info else None
        bound = self._bounds[(q, flavor)] = (quota.guarantee if quota else 0, self.queues.entitlement(q, flavor))
        return bound

    def _allows(self, queue: str, levels: list[str], per_flavor) -> bool:
        usage, delta, bounds = self.queues.usage, self.delta, self._bounds
        for flavor, gpus in per_flavor:
            borrowing = False
            for q in levels:
                key = (q, flavor)
                bound = bounds.get(key) or self._bound(q, flavor)
                now = usage[q][flavor] - delta.get(key, 0)
                if now - gpus < bound[0]:
                    if queue not in self.refused:
                        self.refused[queue] = ("guarantee", q, flavor, bound[0])
                    return False
                if now > bound[1]:
                    borrowing = True
            if not borrowing:
                self._closed.add((queue, flavor))
                if queue not in self.refused:
                    self.refused[queue] = ("entitlement", queue, flavor, bounds[(levels[0], flavor)][1])
                return False
        return True

    def claim(self, job: JobInfo, tasks: tuple[TaskPlacement, ...]) -> bool:
        """Whether the rule allows taking the tasks (no level of V's below its guarantee after, some level above
        its entitlement before, in each flavor; the shared levels are not checked, module docstring),
        and then takes them: whether the tasks were taken. Nothing is
        given back: a ledger lives for one victim search, whose caller drops it.

        Once a unit of queue V was refused because no level of V was above its entitlement in some flavor f
        (every level read), every later unit of V whose tasks are all on f is refused at once: the levels'
        usage is fixed and what is taken only grows, so the same check would refuse it, reading the same usage
        entries."""
        queue = job.queue
        levels = self._levels(queue)
        if not levels:
            return False
        if len(tasks) == 1:
            t = tasks[0]
            flavor = self.flavor_of[t.node]
            if (queue, flavor) in self._closed:
                return False
            per_flavor = ((flavor, len(t.gpus)),)
        else:
            per_flavor = self._per_flavor(tasks)
            if len(per_flavor) == 1 and (queue, next(iter(per_flavor))[0]) in self._closed:
                return False
        if not self._allows(queue, levels, per_flavor):
            return False
        self._add(levels, per_flavor)
        return True

    def _add(self, levels: list[str], per_flavor) -> None:
        delta = self.delta
        for flavor, gpus in per_flavor:
            for q in levels:
                key = (q, flavor)
                delta[key] = delta.get(key, 0) + gpus

