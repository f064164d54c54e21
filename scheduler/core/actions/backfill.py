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
