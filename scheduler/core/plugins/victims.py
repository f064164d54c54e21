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
    it below its quota (or a level below its guarantee)."""

    def __init__(self, queues: QueueTree, beneficiary_queue: str, flavor_of: dict[str, str]):
        self.queues = queues
        self.shared = set(queues.chain(beneficiary_queue))
        self.flavor_of = flavor_of
        self.delta: dict[tuple[str, str], int] = defaultdict(int)

    def _levels(self, queue: str) -> list[str]:
        return [q for q in self.queues.chain(queue) if q not in self.shared]

    def _per_flavor(self, tasks: tuple[TaskPlacement, ...]) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for t in tasks:
            out[self.flavor_of[t.node]] += len(t.gpus)
        return out

    def allows(self, job: JobInfo, tasks: tuple[TaskPlacement, ...]) -> bool:
        levels = self._levels(job.queue)
        if not levels:
            return False
        for flavor, gpus in self._per_flavor(tasks).items():
            borrowing = False
            for q in levels:
                info = self.queues.queues.get(q)
                quota = info.quotas.get(flavor) if info else None
                guarantee = quota.guarantee if quota else 0
                now = self.queues.usage[q][flavor] - self.delta[(q, flavor)]
                if now - gpus < guarantee:
                    return False
                if now > self.queues.entitlement(q, flavor):
                    borrowing = True
            if not borrowing:
                return False
        return True

    def take(self, job: JobInfo, tasks: tuple[TaskPlacement, ...]) -> None:
        for flavor, gpus in self._per_flavor(tasks).items():
            for q in self._levels(job.queue):
                self.delta[(q, flavor)] += gpus

    def give_back(self, job: JobInfo, tasks: tuple[TaskPlacement, ...]) -> None:
        for flavor, gpus in self._per_flavor(tasks).items():
            for q in self._levels(job.queue):
                self.delta[(q, flavor)] -= gpus
