"""The reclaim action (across queues; Volcano's reclaim action, Kueue's reclaim within a cohort).

A job of a queue below its quota, which it is entitled to fill (usage + request <= quota at every level
of its queue chain below the top), takes back GPUs that other queues borrowed above their quota, never
taking a victim queue below its quota or any level below its guarantee (plugins.victims.ReclaimLedger).
It aims at min(the job's full request, its entitlement), so an elastic job gets its whole quota back in
one go. Called by the eviction phase (actions/evict.py), which applies the result. Units: GPUs.
"""
from __future__ import annotations

from ..plugins.quota import QueueTree
from ..plugins.victims import ReclaimLedger, Unit
from ..session import Session
from ..snapshot import Binding, Eviction, JobInfo
from .victim_search import eviction_records, find_victims


def entitlement(queues: QueueTree, job: JobInfo, flavor: str) -> float:
    """GPUs of `flavor` the job's queue may still fill within its quota, at every level but the top
    (0 when a level sets no quota for the flavor)."""
    chain = queues.chain(job.queue)
    levels = chain[:-1] if len(chain) > 1 else chain
    room = float("inf")
    for q in levels:
        info = queues.queues.get(q)
        quota = info.quotas.get(flavor) if info else None
        if quota is None:
            return 0.0
        room = min(room, quota.quota - queues.usage[q][flavor])
    return room


def reclaim_may_help(queues: QueueTree, job: JobInfo, flavor: str) -> bool:
    """Cheap screen: the job is entitled to its minimum within quota, and no limit of its own queue binds."""
    if entitlement(queues, job, flavor) < job.gpus_min:
        return False
    room, limiter = queues.headroom(job.queue, flavor)
    return room >= job.gpus_min or limiter != job.queue


def anyone_borrowing(queues: QueueTree) -> bool:
    """Whether some queue uses more of some flavor than its quota (else there is nothing to reclaim)."""
    for q, per_flavor in queues.usage.items():
        info = queues.queues.get(q)
        for flavor, used in per_flavor.items():
            quota = info.quotas.get(flavor) if info else None
            if used > (quota.quota if quota else 0):
                return True
    return False


def reclaim(session: Session, job: JobInfo, flavor: str, units: list[Unit], flavor_of: dict[str, str]
            ) -> tuple[Binding, list[Eviction]] | None:
    """(the placement the job starts on once the victims are gone, the Evictions) or None, on `flavor`
    GPUs; units: the evictable units of the running jobs, least work lost first (plugins.victims);
    flavor_of: node name -> flavor."""
    queues = session.queues
    room = entitlement(queues, job, flavor)
    if room < job.gpus_min:
        return None
    target = int(min(job.gpus_requested, room))
    limit_room, limiter = queues.headroom(job.queue, flavor)
    candidates = [u for u in units if u.job.queue != job.queue]
    if limit_room < target:
        # a limit binds (e.g. the root's, set to the cluster's size, when the cluster is full): only victims
        # below the binding level make room under it, and only their GPUs count
        if limiter == job.queue:
            return None
        candidates = [u for u in candidates if limiter in queues.chain(u.job.queue)]
    ledger = ReclaimLedger(queues, job.queue, flavor_of)
    found = find_victims(session, job, flavor, target=target, units=candidates,
                         allows=lambda u: ledger.allows(u.job, u.tasks), take=lambda u: ledger.take(u.job, u.tasks),
                         give_back=lambda u: ledger.give_back(u.job, u.tasks), room=limit_room)
    if found is None:
        return None
    placement, victims = found
    return placement, eviction_records(victims, "reclaim", job)
