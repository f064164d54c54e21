"""The preempt action (inside a queue; Volcano's preempt action, Kueue's classical preemption within a
ClusterQueue).

A pending job may evict preemptible gangs (or surplus tasks of elastic gangs) of strictly lower priority
in its own queue, when and only when that lets it start; the queue's limit still applies (the victims'
GPUs count as released). It aims at min(its full request, the queue's headroom + the victims' GPUs).
GPUs that preemptions in the queue (in their grace period) free beyond their beneficiaries' holds, of jobs of lower
priority than this one, count as already-taken victims: used first, and nobody else is evicted while they
suffice (reclaim does the same across queues). Called by the eviction phase (actions/evict.py), which
applies the result.
"""
from __future__ import annotations

from ..plugins.victims import Unit
from ..session import Session
from ..snapshot import Binding, Eviction, JobInfo, TaskPlacement
from .victim_search import eviction_records, find_victims


def preempt(session: Session, job: JobInfo, flavor: str, units: list[Unit],
            releasing: list[tuple[JobInfo, tuple[TaskPlacement, ...]]] = ()
            ) -> tuple[Binding, list[Eviction]] | None:
    """(the placement the job starts on once the victims are gone, the Evictions; none when it gets GPUs
    being released) or None, on `flavor` GPUs; units: the evictable units of the running jobs, least work
    lost first (plugins.victims); releasing: (victim, tasks) whose GPUs preemptions in their grace period free and no
    hold wants (evict.py passes only those of preemptions: GPUs reclaimed from a queue are never given back
    to it this way), of which those of this queue and of lower priority are used first."""
    candidates = [u for u in units if u.job.queue == job.queue and u.job.priority < job.priority]
    freed = [(v, ts) for v, ts in releasing if v.queue == job.queue and v.priority < job.priority]
    if not candidates and not freed:
        return None
    room, _ = session.queues.headroom(job.queue, flavor)
    freeable = sum(u.gpus for u in candidates)
    if job.gpus_min > room + freeable:
        return None
    target = int(min(job.gpus_requested, room + freeable))
    found = find_victims(session, job, flavor, target=max(target, job.gpus_min), units=candidates, room=room,
                         releasing=freed)
    if found is None:
        return None
    placement, victims = found
    return placement, eviction_records(victims, "preempt", job)
