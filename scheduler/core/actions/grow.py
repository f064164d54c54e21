"""The grow action: a running elastic job's missing tasks (above min_available, e.g. surplus tasks that were
reclaimed, or that did not fit at start) are placed when they fit (DESIGN section 5).

    grow(session, waiting, facts, evicted) -> list[Binding]   (rule "grow", one per job that got tasks)

Runs after allocate and the eviction phase, so pending jobs, holds and reservations come first: the GPUs
held for beneficiaries, drains and the EASY reservation are out of the pool. A job evicted this cycle,
wholly or some of its tasks (preempt, reclaim, reschedule), does not grow: it is leaving, or giving tasks
back, in this very cycle (a job is never both evicted and given tasks in one cycle). Jobs are taken lowest share
of their flavor first (the allocate order's measure). Each job grows on the flavor it runs on, within
its queue's limits at every level; a non-preemptible job only within its queue's entitlement (it could
never be reclaimed); and a job grows past its queue's entitlement (borrowing) only while no job of
another queue waits this cycle for that flavor within its own entitlement (it would reclaim the new tasks
at once). Topology: the new tasks go first inside the lowest domain holding the job's tasks, then wider,
up to the job's tier cap (a hard constraint keeps them inside its domain of highest_tier). Units: GPUs.
"""
from __future__ import annotations

from typing import Collection

from ..domain_tree import common_domain
from ..plugins.quota import INF
from ..session import Session
from ..snapshot import Binding, JobInfo


def missing_gpus(job: JobInfo, releasing=()) -> int:
    """GPUs of the tasks a running job's roles want that it neither runs nor is releasing (`releasing`:
    TaskPlacements of its surplus tasks still in their grace period)."""
    placed: dict[str, int] = {}
    for t in (*job.placement, *releasing):
        placed[t.role] = placed.get(t.role, 0) + 1
    return sum(max(0, r.tasks - placed.get(r.name, 0)) * r.gpus_per_task for r in job.roles)


def _tasks(job: JobInfo) -> int:
    roles = job.roles
    return roles[0].tasks if len(roles) == 1 else sum(r.tasks for r in roles)


def grow(session: Session, waiting: list[JobInfo], facts=None, evicted: Collection = ()) -> list[Binding]:
    """Bindings of the new tasks of running jobs (module docstring); applied to the state and charged.
    waiting: the pending jobs that did not start this cycle (and hold nothing). facts: the snapshot's
    jobindex.Facts (EngineCache.scan) or None: when no running job places fewer tasks than its roles want
    (Facts.short), none can grow and the jobs are not scanned. evicted: ids of the jobs with an eviction this
    cycle (whole or partial): they do not grow."""
    if facts is not None and not facts.short:
        return []
    state, queues, tree = session.state, session.queues, session.tree
    releasing: dict = {}  # job id -> its surplus tasks being released (not to be placed twice)
    for j in session.snapshot.jobs:
        if j.part_of is not None:
            releasing[j.part_of] = releasing.get(j.part_of, ()) + tuple(j.placement)
    # a job running every task of every role misses none (task indices are unique and below the role's
    # count): only the others are asked (missing_gpus)
    growing = [j for j in session.snapshot.jobs if j.state == "running" and j.placement and queues.known(j.queue)
               and (len(j.placement) < _tasks(j) and missing_gpus(j, releasing.get(j.id, ())))
               and j.id not in evicted]
    if not growing:
        return []
    flavor_of = state.static.node_flavor  # node name -> flavor
    blocked: set[tuple[str, str]] = set()  # (flavor, queue): someone else waits within entitlement there
    for job in waiting:
        for f in session.flavors(job):
            if queues.within_entitlement(job.queue, f, job.gpus_min):
                blocked.add((f, job.queue))

    def flavor(job: JobInfo) -> str:
        return flavor_of.get(next((t.node for t in job.placement if t.gpus), job.placement[0].node), "")

    out: list[Binding] = []
    for job in sorted(growing, key=lambda j: (queues.flavor_share(j.queue, flavor(j)), -j.priority,
                                              j.submit_time, str(j.id))):
        f = flavor(job)
        if state.domain_free(tree.root, f) <= 0:
            continue
        budget, _ = queues.headroom(job.queue, f)
        borrow_ok = job.preemptible and not any(ff == f and q != job.queue for ff, q in blocked)
        if not borrow_ok:
            budget = min(budget, queues.claim_room(queues.chain(job.queue), f) if job.queue in queues.queues else INF)
        if budget <= 0:
            continue
        ks = [state.node_index[t.node] for t in job.placement if t.node in state.node_index]
        if not ks:
            continue
        d = common_domain(tree, ks)
        new = session.add_tasks(job, f, job.placement + releasing.get(job.id, ()), d, cap=session.tier_cap(job),
                                budget=budget)
        if not new:
            continue
        gpus = sum(len(t.gpus) for t in new)
        queues.charge(job.queue, f, gpus)
        d = session.enclosing(d, [state.node_index[t.node] for t in new])
        out.append(Binding(job_id=job.id, tasks=new, domain=tree.names[d], tier=tree.tiers[d], rule="grow"))
    return out
