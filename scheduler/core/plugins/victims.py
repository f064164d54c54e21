"""Who may be evicted, and in what order (least work lost first).

Units, in order: surplus tasks of elastic gangs (tasks above their role's min_available, highest index
first), then whole gangs; within each kind, lowest priority first, then most recently started, then
fewest GPUs. A preempting job is never a victim again; a non-preemptible job is never a victim.

Rules (Volcano's preempt / reclaim actions, Kueue's classical preemption):
- preempt: same leaf queue, strictly lower priority.
- reclaim: another queue that is borrowing: some level of the victim's queue chain that the
  beneficiary's chain does not share is above its entitlement before the unit is taken (QueueTree
  .entitlement; the unit that crosses the line may take it below: a gang reaching past its queue's
  entitlement does not protect it), and no such level drops below its guarantee.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..snapshot import JobInfo, TaskPlacement
from .quota import QueueTree


@dataclass(frozen=True, slots=True)
class Unit:
    job: JobInfo
    tasks: tuple[TaskPlacement, ...]
    whole: bool

    @property
    def gpus(self) -> int:
        return sum(len(t.gpus) for t in self.tasks)


def victim_units(running: list[JobInfo]) -> list[Unit]:
    surplus: list[tuple[tuple, Unit]] = []
    whole: list[tuple[tuple, Unit]] = []
    for job in running:
        if job.state != "running" or not job.preemptible or not job.placement:
            continue
        start = job.start_time or 0.0
        by_role: dict[str, list[TaskPlacement]] = defaultdict(list)
        for t in job.placement:
            by_role[t.role].append(t)
        mins = {r.name: r.min_available for r in job.roles}
        for role, tasks in by_role.items():
            tasks.sort(key=lambda t: t.index, reverse=True)
            for t in tasks[: max(0, len(tasks) - mins.get(role, len(tasks)))]:
                surplus.append(((job.priority, -start, -t.index, str(job.id)), Unit(job, (t,), whole=False)))
        gpus = sum(len(t.gpus) for t in job.placement)
        whole.append(((job.priority, -start, gpus, str(job.id)), Unit(job, job.placement, whole=True)))
    surplus.sort(key=lambda x: x[0])
    whole.sort(key=lambda x: x[0])
    return [u for _, u in surplus] + [u for _, u in whole]


class ReclaimLedger:
    """Tentative usage of the queues that victims come from, so several victims of one queue never take
    it below its quota (or a level below its guarantee).

    Kept per ledger (one victim search): each victim queue's levels (its chain less the beneficiary's), and
    per (level, flavor) its guarantee and entitlement (static within a cycle); `delta` holds the GPUs taken
    per (level, flavor). The usage read is the QueueTree's, level by level as before (its defaultdicts fill
    in the same keys in the same order)."""

    def __init__(self, queues: QueueTree, beneficiary_queue: str, flavor_of: dict[str, str]):
        self.queues = queues
        self.shared = set(queues.chain(beneficiary_queue))
        self.flavor_of = flavor_of
        self.delta: dict[tuple[str, str], int] = {}
        self._levels_of: dict[str, list[str]] = {}  # victim queue -> its levels below the shared ancestor
        self._bounds: dict[tuple[str, str], tuple[int, float]] = {}  # (level, flavor) -> (guarantee, entitlement)

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

    def allows(self, job: JobInfo, tasks: tuple[TaskPlacement, ...]) -> bool:
        levels = self._levels(job.queue)
        if not levels:
            return False
        return self._allows(levels, self._per_flavor(tasks))

    def _allows(self, levels: list[str], per_flavor) -> bool:
        usage, delta, bounds = self.queues.usage, self.delta, self._bounds
        for flavor, gpus in per_flavor:
            borrowing = False
            for q in levels:
                key = (q, flavor)
                bound = bounds.get(key) or self._bound(q, flavor)
                now = usage[q][flavor] - delta.get(key, 0)
                if now - gpus < bound[0]:
                    return False
                if now > bound[1]:
                    borrowing = True
            if not borrowing:
                return False
        return True

    def claim(self, job: JobInfo, tasks: tuple[TaskPlacement, ...]) -> bool:
        """allows, then take when it does: whether the tasks were taken."""
        levels = self._levels(job.queue)
        if not levels:
            return False
        per_flavor = self._per_flavor(tasks)
        if not self._allows(levels, per_flavor):
            return False
        self._add(levels, per_flavor, 1)
        return True

    def _add(self, levels: list[str], per_flavor, sign: int) -> None:
        delta = self.delta
        for flavor, gpus in per_flavor:
            for q in levels:
                key = (q, flavor)
                delta[key] = delta.get(key, 0) + sign * gpus

    def take(self, job: JobInfo, tasks: tuple[TaskPlacement, ...]) -> None:
        self._add(self._levels(job.queue), self._per_flavor(tasks), 1)

    def give_back(self, job: JobInfo, tasks: tuple[TaskPlacement, ...]) -> None:
        self._add(self._levels(job.queue), self._per_flavor(tasks), -1)
