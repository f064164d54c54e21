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
  when none has a lower priority than a waiting job).
"""
from __future__ import annotations

from typing import NamedTuple


class Facts(NamedTuple):
    """What a cycle asks of its snapshot's jobs and nodes (SnapshotIndex.facts)."""

    sharing: bool  # sharing.has_sharing: a sharing job, or a node with MIG or a non-exclusive GPU
    short: bool  # some running job with a placement places fewer tasks than its roles' tasks
    lowest_preemptible: int | None  # the lowest priority of a running preemptible job (None: there is none)


def _tasks(job) -> int:
    roles = job.roles
    return roles[0].tasks if len(roles) == 1 else sum(r.tasks for r in roles)


def _node_shares(n) -> bool:
    return bool(n.mig) or any(m != "exclusive" for m in n.gpu_modes)


class SnapshotIndex:
    """Facts about the last snapshot's jobs and nodes (module docstring); `update` brings it to a new one."""

    __slots__ = ("jobs", "nodes", "job_by_id", "node_by_id", "sharing_jobs", "sharing_nodes", "short",
                 "preemptible_priorities")

    def __init__(self) -> None:
        self.jobs: tuple | None = None  # the jobs tuple last indexed (held: `is` identifies it)
        self.nodes: tuple | None = None
        self.job_by_id: dict = {}  # id(job) -> job, for the last jobs tuple
        self.node_by_id: dict = {}
        self.sharing_jobs = 0
        self.sharing_nodes = 0
        self.short: set[int] = set()
        self.preemptible_priorities: dict[int, int] = {}

    def update(self, jobs: tuple, nodes: tuple) -> SnapshotIndex:
        if jobs is not self.jobs:
            cur = dict(zip(map(id, jobs), jobs))
            prev = self.job_by_id
            for i in prev.keys() - cur.keys():
                self._job(i, prev[i], -1)
            for i in cur.keys() - prev.keys():
                self._job(i, cur[i], 1)
            self.job_by_id, self.jobs = cur, jobs
        if nodes is not self.nodes:
            cur = dict(zip(map(id, nodes), nodes))
            prev = self.node_by_id
            for i in prev.keys() - cur.keys():
                self.sharing_nodes -= _node_shares(prev[i])
            for i in cur.keys() - prev.keys():
                self.sharing_nodes += _node_shares(cur[i])
            self.node_by_id, self.nodes = cur, nodes
        return self

    def _job(self, i: int, job, sign: int) -> None:
        if any(r.shares for r in job.roles):
            self.sharing_jobs += sign
        if job.state != "running":
            return
        if job.placement and len(job.placement) < _tasks(job):
            if sign > 0:
                self.short.add(i)
            else:
                self.short.discard(i)
        if job.preemptible:
            per = self.preemptible_priorities
            left = per.get(job.priority, 0) + sign
            if left:
                per[job.priority] = left
            else:
                del per[job.priority]

    def facts(self) -> Facts:
        """The Facts of the last snapshot given to `update`."""
        per = self.preemptible_priorities
        return Facts(self.sharing_jobs > 0 or self.sharing_nodes > 0, bool(self.short), min(per) if per else None)
