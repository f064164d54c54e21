"""The preempt action (inside a queue) and the reclaim action (across queues).

preempt: a pending job may evict preemptible gangs of strictly lower priority in its own queue, when and
only when that lets it start; the queue's limit still applies (victims' GPUs count as released).
reclaim: a job of a queue below its quota, which it is entitled to fill (usage + request <= quota at
every level of its queue chain below the top), takes back GPUs that other queues borrowed above their
quota, never taking a victim queue below its quota or any level below its guarantee. It aims at
min(the job's full request, its entitlement), so an elastic job gets its whole quota back in one go.
"""
from __future__ import annotations

from ..plugins.victims import ReclaimLedger, Unit
from ..snapshot import Eviction, JobInfo, PendingReason
from .evict import find_victims


def _evictions(units: list[Unit], rule: str, job: JobInfo) -> list[Eviction]:
    """One Eviction per victim job: its chosen units merged; all of its tasks = the whole gang."""
    by_job: dict = {}
    for u in units:
        victim, tasks = by_job.get(u.job.id, (u.job, ()))
        by_job[u.job.id] = (victim, tasks + u.tasks)
    out = []
    for victim, tasks in by_job.values():
        gone = {(t.role, t.index) for t in tasks}
        left = {r.name: sum(1 for t in victim.placement if t.role == r.name and (t.role, t.index) not in gone)
                for r in victim.roles}
        if any(0 < left[r.name] < r.min_available for r in victim.roles):
            tasks = victim.placement  # never leave a gang below its minimum: evict it whole
        whole = len(tasks) == len(victim.placement)
        keys = () if whole else tuple(sorted((t.role, t.index) for t in tasks))
        what = "gang" if whole else f"{len(keys)} surplus task(s)"
        out.append(Eviction(job_id=victim.id, tasks=keys, gpus=sum(len(t.gpus) for t in tasks), rule=rule,
                            beneficiary=job.id,
                            message=f"{rule}: {what} of {victim.name or victim.id} (queue {victim.queue}, priority "
                                    f"{victim.priority}) evicted for {job.name or job.id} (queue {job.queue})"))
    return out


def preempt(allocator, job: JobInfo, flavor: str, units: list[Unit]):
    candidates = [u for u in units if u.job.queue == job.queue and u.job.priority < job.priority]
    if not candidates:
        return None
    room, _ = allocator.queues.headroom(job.queue, flavor)
    freeable = sum(u.gpus for u in candidates)
    if job.gpus_min > room + freeable:
        return None
    target = int(min(job.gpus_requested, room + freeable))
    found = find_victims(allocator, job, flavor, target=max(target, job.gpus_min), units=candidates,
                         allows=lambda u: True, take=lambda u: None, give_back=lambda u: None, room=room)
    if found is None:
        return None
    placement, victims = found
    return placement, _evictions(victims, "preempt", job)


def entitlement(queues, job: JobInfo, flavor: str) -> float:
    """GPUs of `flavor` the job's queue may still fill within its quota, at every level but the top."""
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


def reclaim(allocator, job: JobInfo, flavor: str, units: list[Unit], flavor_of: dict[str, str]):
    queues = allocator.queues
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
    found = find_victims(allocator, job, flavor, target=target, units=candidates,
                         allows=lambda u: ledger.allows(u.job, u.tasks), take=lambda u: ledger.take(u.job, u.tasks),
                         give_back=lambda u: ledger.give_back(u.job, u.tasks), room=limit_room)
    if found is None:
        return None
    placement, victims = found
    return placement, _evictions(victims, "reclaim", job)


def _reclaim_may_help(queues, job: JobInfo, flavor: str) -> bool:
    """Cheap screen: the job is entitled to its request within quota, and no limit of its own queue binds."""
    if entitlement(queues, job, flavor) < job.gpus_min:
        return False
    room, limiter = queues.headroom(job.queue, flavor)
    return room >= job.gpus_min or limiter != job.queue


EVICT_CODES = {"insufficient_gpus", "no_domain", "no_packing", "queue_limit"}


def run_evictions(allocator, reasons: dict) -> tuple[list[Eviction], list[dict]]:
    """Try preempt, then reclaim, for the jobs that could not start, in the order they were tried, at
    most config.max_preemptors of them. Each success evicts victims, holds the beneficiary's GPUs
    (nomination) and records an audit decision with the queues' usage before and after."""
    from ..plugins.victims import victim_units

    config, queues, state = allocator.config, allocator.queues, allocator.state
    if not (config.preemption or config.reclaim):
        return [], []
    running = [j for j in allocator.snapshot.jobs if j.state == "running"]
    lowest_priority: dict[str, int] = {}
    for j in running:
        if j.preemptible:
            lowest_priority[j.queue] = min(lowest_priority.get(j.queue, j.priority), j.priority)
    borrowing = config.reclaim and _anyone_borrowing(queues)
    preemptors = []
    helps: dict[tuple, bool] = {}  # (queue, flavor, GPUs needed) -> _reclaim_may_help; usage is fixed here
    for job in allocator.failed_order:  # cheap screening before any victim search
        reason = reasons.get(job.id)
        if reason is None or reason.code not in EVICT_CODES:
            continue
        may_preempt = config.preemption and lowest_priority.get(job.queue, job.priority) < job.priority
        may_reclaim = False
        if borrowing:
            need = job.gpus_min
            for f in allocator._flavors(job):
                key = (job.queue, f, need)
                helps_f = helps.get(key)
                if helps_f is None:
                    helps_f = helps[key] = _reclaim_may_help(queues, job, f)
                if helps_f:
                    may_reclaim = True
                    break
        if may_preempt or may_reclaim:
            preemptors.append(job)
            if len(preemptors) >= config.max_preemptors:
                break
    if not preemptors:
        return [], []
    flavor_of = {n.name: n.flavor for n in state.nodes}
    queue_of = {j.id: j.queue for j in allocator.snapshot.jobs}
    units = victim_units(running)
    victims_by_id = {j.id: j for j in running}
    evictions: list[Eviction] = []
    decisions: list[dict] = []
    evicted: set[tuple] = set()
    for job in preemptors:
        reason = reasons[job.id]
        found = None
        for flavor in allocator._flavors(job):
            if config.preemption:
                found = preempt(allocator, job, flavor, units)
            if found is None and config.reclaim and _reclaim_may_help(queues, job, flavor):
                found = reclaim(allocator, job, flavor, units, flavor_of)
            if found is not None:
                break
        if found is None:
            continue
        placement, evs = found
        for ev in evs:
            evicted.update((ev.job_id, t.role, t.index) for t in placement_of(victims_by_id, ev))
        units = [u for u in units if not any((u.job.id, t.role, t.index) in evicted for t in u.tasks)]
        involved = {job.queue} | {queue_of[e.job_id] for e in evs}
        before = _usage(queues, involved)
        for ev in evs:
            for t in placement_of(victims_by_id, ev):
                if t.gpus:
                    queues.charge(queue_of[ev.job_id], flavor_of[t.node], -len(t.gpus))
        for t in placement.tasks:
            if t.gpus:
                queues.charge(job.queue, flavor_of[t.node], len(t.gpus))
        allocator.holds.hold(job.id, placement.tasks)
        allocator.nominated[job.id] = placement.tasks
        evictions.extend(evs)
        rule = evs[0].rule
        gpus = sum(e.gpus for e in evs)
        reasons[job.id] = PendingReason("nominated", f"{rule}: {len(evs)} victim(s) releasing {gpus} GPUs for it "
                                                     f"(grace period); it starts on them next")
        decisions.append({"rule": rule, "beneficiary": job.id, "queue": job.queue,
                          "victims": [{"job": e.job_id, "tasks": list(e.tasks), "gpus": e.gpus} for e in evs],
                          "usage_before": before, "usage_after": _usage(queues, involved)})
    return evictions, decisions


def placement_of(jobs: dict, ev: Eviction):
    """The evicted tasks' placements; `jobs`: job id -> JobInfo."""
    victim = jobs[ev.job_id]
    return victim.placement if not ev.tasks else [t for t in victim.placement if (t.role, t.index) in ev.tasks]


def _anyone_borrowing(queues) -> bool:
    for q, per_flavor in queues.usage.items():
        info = queues.queues.get(q)
        for flavor, used in per_flavor.items():
            quota = info.quotas.get(flavor) if info else None
            if used > (quota.quota if quota else 0):
                return True
    return False


def _usage(queues, names: set[str]) -> dict:
    return {q: dict(queues.usage.get(q, {})) for q in sorted(names)}
