"""Backfill without starvation (Slurm's backfill scheduler, EASY backfilling: Lifka 1995; Mu'alem and
Feitelson, IEEE TPDS 2001).

The first job in order that cannot start gets a reservation: running jobs are released, in order of
their expected end (start + time_limit), on a Trial until the job fits; that time is its estimated start
and that placement its reserved GPUs. The reserved GPUs that are free now are held out of the pool for
the rest of the cycle; a later job may use them only if it declares a time limit that ends before the
reservation starts. Jobs with no time limit never use reserved GPUs. Running jobs without a time limit
have no known end, so a reservation behind them cannot be computed (no reservation is made).
"""
from __future__ import annotations

from ..snapshot import Binding, JobInfo, Snapshot
from ..trial import Trial, release_binding


def shadow_reservation(allocator, job: JobInfo, flavor: str, snapshot: Snapshot) -> tuple[float, Binding] | None:
    """(estimated start in seconds of cluster time, the placement then), or None."""
    ends = sorted((j.start_time + j.time_limit, str(j.id), j) for j in snapshot.jobs
                  if j.state != "pending" and j.start_time is not None and j.time_limit is not None)
    if not ends:
        return None
    state, root = allocator.state, allocator.tree.root
    trial = Trial(state)
    found = None
    for end, _, running in ends:
        trial.free_tasks(running, running.placement)
        if state.domain_free(root, flavor) < job.gpus_min:
            continue
        placed = allocator.try_place(job, flavor, target=job.gpus_min)
        if isinstance(placed, Binding):
            release_binding(state, job, placed)
            found = (max(end, snapshot.now), placed)
            break
    trial.undo()
    return found


DRAIN_CANDIDATES = 4  # domains tried per drain reservation


def drain_reservation(allocator, job: JobInfo, flavor: str) -> Binding | None:
    """Where a starving job should wait: in the lowest tier whose domains could hold it once emptied,
    the domains with the most free GPUs (least to drain) are tried in turn; in each, every running task
    is released on a Trial and the job placed. Returns that placement (the state is left unchanged)."""
    state, tree, capacity = allocator.state, allocator.tree, allocator.capacity
    cap = allocator._cap_tier(job)
    levels = [t for t in tree.tier_levels if t <= cap] if allocator.config.topology else [tree.top_tier]
    by_node: dict[str, list] = {}
    for running in allocator.snapshot.jobs:
        if running.state != "pending":
            for t in running.placement:
                by_node.setdefault(t.node, []).append((running, t))
    for tier in levels:
        domains = [d for d in (tree.by_tier[tier] if allocator.config.topology else [tree.root])
                   if capacity.domain_fits(job, flavor, d)]
        if not domains:
            continue
        domains.sort(key=lambda d: (-state.domain_free(d, flavor), tree.names[d]))
        for d in domains[:DRAIN_CANDIDATES]:
            trial = Trial(state)
            for k in tree.nodes_under[d]:
                for running, t in by_node.get(state.nodes[k].name, ()):
                    trial.free_tasks(running, (t,))
            placed = allocator.try_place(job, flavor, target=job.gpus_min, within=d)
            if isinstance(placed, Binding):
                release_binding(state, job, placed)
            trial.undo()
            if isinstance(placed, Binding):
                return placed
        return None
    return None
