"""Per-cycle time series for the dashboards (DESIGN section 6): one ClusterSample, one QueueSample per queue.

Called by store.apply_result inside its transaction, after the cycle's bindings are written, so "used"
includes this cycle's starts. Units: GPUs.
"""
from __future__ import annotations

from datetime import datetime

from gpuplatform import queries
from gpuplatform.gpu_request import from_milli
from gpuplatform.models import ClusterSample, Job, QueueSample
from gpuplatform.scheduling.evict import HOLDER_STATES, decode_reserved


def write_samples(metrics: dict, *, clock: datetime, cycle_number: int, pending: int,
                  fair_share: dict | None = None, held: dict | None = None) -> None:
    """Insert the ClusterSample from the engine's `metrics` (missing keys default to 0 / {}) and the
    QueueSamples (6 queries; used and pending_demand in GPU-equivalents, queries.queue_gpu_milli; `held` = GPUs in the Job.reserved of the subtree's pending / preempting jobs). Parents' numbers are the sums of their subtree's usage and demand (the queue
    tree: queries.queue_tree); quota, guarantee and limit are the queue's own, summed over flavors
    (queries.queue_quotas: limit None when a flavor has no cap of its own).
    `fair_share`: the engine's {queue name: {flavor: GPUs}}; QueueSample.fair_share = its sum over flavors
    (None for a queue the engine gave no share). `held`: CycleResult.held, the GPUs held_gpus counts
    ({node name: GPU indices}), stored as ClusterSample.held_at for the topology map."""
    m = metrics or {}
    running = Job.objects.filter(state__in=Job.LIVE_STATES).count()
    ClusterSample.objects.create(
        time=clock, cycle=cycle_number,
        schedulable_gpus=int(m.get("schedulable_gpus", 0) or 0), allocated_gpus=int(m.get("allocated_gpus", 0) or 0),
        held_gpus=int(m.get("held_gpus", 0) or 0), held_at={str(n): list(g) for n, g in (held or {}).items()},
        free_gpus=int(m.get("free_gpus", 0) or 0), allocation_rate=float(m.get("allocation_rate", 0.0) or 0.0),
        fragmentation_rate=float(m.get("fragmentation_rate", 0.0) or 0.0),
        largest_runnable={str(k): v for k, v in (m.get("largest_runnable") or {}).items()},
        domain_completeness=float(m.get("domain_completeness", 0.0) or 0.0),
        by_group=m.get("by_group") or {}, pending_jobs=pending, running_jobs=running, sharing=m.get("sharing") or {})

    tree = queries.queue_tree()
    if not tree.rows:
        return
    share = {q["id"]: float(sum(fair_share[q["name"]].values())) for q in tree.rows.values()
             if q["name"] in (fair_share or {})}
    used, demand = queries.queue_gpu_milli()  # thousandths of GPU-equivalents (a 0.25 share counts 0.25)
    # GPUs reserved for jobs not started (evict.apply_holds ran before this) and held, not allocated: of a job's
    # reservation, the GPUs in the cycle's holds (`held`, what held_gpus counts); a reserved GPU its evicted victim
    # still runs on in its grace is that queue's used GPU, not this one's held (new-user trial 19, F8: the queues
    # chart stacked both, 6 GPUs in a 4-GPU cluster). Without `held`, every reserved GPU.
    free_held = None if held is None else {(str(n), g) for n, gpus in held.items() for g in gpus}
    held_by_queue: dict[int, int] = {}
    for qid, reserved in Job.objects.filter(state__in=HOLDER_STATES, reserved__isnull=False).values_list(
            "queue_id", "reserved"):
        tasks = decode_reserved(reserved)
        count = (sum(len(t.gpus) for t in tasks) if free_held is None
                 else sum(1 for t in tasks for g in t.gpus if (t.node, g) in free_held))
        held_by_queue[qid] = held_by_queue.get(qid, 0) + count
    held = held_by_queue
    quotas = queries.queue_quotas()
    own = {qid: (used.get(qid, 0), demand.get(qid) or 0, held.get(qid, 0)) for qid in set(used) | set(demand) | set(held)}
    totals = tree.rollup(own, 3)  # used, pending demand (thousandths) and held GPUs of each queue's subtree
    QueueSample.objects.bulk_create([
        QueueSample(time=clock, queue_id=qid, used=from_milli(totals[qid][0]), pending_demand=from_milli(totals[qid][1]),
                    held=totals[qid][2],
                    guarantee=quotas.get(qid, queries.NO_QUOTA).guarantee, quota=quotas.get(qid, queries.NO_QUOTA).quota,
                    limit=quotas.get(qid, queries.NO_QUOTA).limit, fair_share=share.get(qid))
        for qid in tree.rows])
