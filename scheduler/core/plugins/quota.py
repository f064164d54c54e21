"""Hierarchical queue usage and limits, per GPU flavor.

A queue's usage is its own jobs' GPUs plus its children's (charged up the chain). A job may start only
if, at every level from its queue up to the root, usage + request <= limit for the flavor it lands on
(a limit of None means the level sets no cap of its own). Units: GPUs.
"""
from __future__ import annotations

import math
from collections import defaultdict

from ..snapshot import JobInfo, QueueInfo, Snapshot

INF = math.inf


class QueueTree:
    def __init__(self, snapshot: Snapshot, static=None):
        """static: the snapshot's domain_tree.ClusterStatic, when the caller has it (saves two node scans)."""
        self.queues: dict[str, QueueInfo] = {q.name: q for q in snapshot.queues}
        self.open_world = not self.queues  # no queues defined: every job's queue is accepted, no caps
        self.usage: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._chains: dict[str, tuple[str, ...]] = {}
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
        for job in snapshot.jobs:
            if job.state == "pending" or not self.known(job.queue):
                continue
            for t in job.placement:
                if t.gpus:
                    self.charge(job.queue, node_flavor.get(t.node, ""), len(t.gpus))

    def known(self, name: str) -> bool:
        return self.open_world or name in self.queues

    def chain(self, name: str) -> tuple[str, ...]:
        """The queue and its ancestors, leaf first. Unknown parents end the chain."""
        chain = self._chains.get(name)
        if chain is None:
            out, q, seen = [], name, set()
            while q is not None and q in self.queues and q not in seen:
                out.append(q)
                seen.add(q)
                q = self.queues[q].parent
            chain = self._chains[name] = tuple(out) or (name,)
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

    def quota_room(self, queue: str, flavor: str) -> tuple[float, str | None]:
        """(GPUs of `flavor` the queue may take without borrowing, the level that binds): min over the
        chain's levels that set quotas of quota - usage (a flavor a level does not list counts as 0)."""
        best, who = INF, None
        for q in self.chain(queue):
            info = self.queues.get(q)
            if not info or not info.quotas:
                continue
            quota = info.quotas.get(flavor)
            room = (quota.quota if quota else 0) - self.usage[q][flavor]
            if room < best:
                best, who = room, q
        return best, who

    def static_limit(self, queue: str, flavor: str) -> tuple[float, str | None]:
        """The smallest limit on the chain for `flavor`: a job needing more can never run in this queue."""
        best, who = INF, None
        for q in self.chain(queue):
            info = self.queues.get(q)
            quota = info.quotas.get(flavor) if info else None
            if quota is not None and quota.limit is not None and quota.limit < best:
                best, who = quota.limit, q
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


def job_order_key(job: JobInfo) -> tuple:
    """Within a queue: higher priority first, then earlier (original) submission, then id."""
    return (-job.priority, job.submit_time, str(job.id))
