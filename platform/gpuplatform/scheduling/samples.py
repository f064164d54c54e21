"""Per-cycle time series for the dashboards (DESIGN section 6): one ClusterSample, one QueueSample per queue.

Called by store.apply_result inside its transaction, after the cycle's bindings are written, so "used"
includes this cycle's starts. Units: GPUs.
"""
from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db.models import Count, F, Sum

from gpuplatform.models import Allocation, ClusterSample, Job, JobRole, Queue, QueueSample, Quota


def write_samples(metrics: dict, *, clock: datetime, cycle_number: int, pending: int,
                  fair_share: dict | None = None) -> None:
    """Insert the ClusterSample from the engine's `metrics` (missing keys default to 0 / {}) and the
    QueueSamples (5 queries). Parents' numbers are the sums of their subtree's usage and demand; quota,
    guarantee and limit are the queue's own, summed over flavors (limit None when no flavor has one).
    `fair_share`: the engine's {queue name: {flavor: GPUs}}; QueueSample.fair_share = its sum over flavors
    (None for a queue the engine gave no share)."""
    m = metrics or {}
    running = Job.objects.filter(state__in=Job.LIVE_STATES).count()
    ClusterSample.objects.create(
        time=clock, cycle=cycle_number,
        schedulable_gpus=int(m.get("schedulable_gpus", 0) or 0), allocated_gpus=int(m.get("allocated_gpus", 0) or 0),
        free_gpus=int(m.get("free_gpus", 0) or 0), allocation_rate=float(m.get("allocation_rate", 0.0) or 0.0),
        fragmentation_rate=float(m.get("fragmentation_rate", 0.0) or 0.0),
        largest_runnable={str(k): v for k, v in (m.get("largest_runnable") or {}).items()},
        domain_completeness=float(m.get("domain_completeness", 0.0) or 0.0),
        pending_jobs=pending, running_jobs=running)

    rows = list(Queue.objects.values_list("id", "parent_id", "name"))
    if not rows:
        return
    queues = [(qid, parent) for qid, parent, _ in rows]
    share = {qid: float(sum((fair_share or {})[name].values())) for qid, _, name in rows if name in (fair_share or {})}
    used = dict(Allocation.objects.filter(released_at__isnull=True).values("job__queue_id")
                .annotate(n=Count("id")).values_list("job__queue_id", "n"))
    demand = dict(JobRole.objects.filter(job__state="pending").values("job__queue_id")
                  .annotate(n=Sum(F("tasks") * F("gpus_per_task"))).values_list("job__queue_id", "n"))
    limits: dict[int, tuple[int, int, int | None]] = {}
    for qid, g, q, lim in Quota.objects.values_list("queue_id", "guarantee", "quota", "limit"):
        og, oq, ol = limits.get(qid, (0, 0, None))
        limits[qid] = (og + g, oq + q, (ol or 0) + lim if lim is not None else ol)
    parent = dict(queues)
    used_total: dict[int, int] = defaultdict(int)
    demand_total: dict[int, int] = defaultdict(int)
    for qid, _ in queues:  # add each queue's own numbers to itself and every ancestor
        node, seen = qid, set()
        while node is not None and node not in seen:
            seen.add(node)
            used_total[node] += used.get(qid, 0)
            demand_total[node] += demand.get(qid, 0) or 0
            node = parent.get(node)
    QueueSample.objects.bulk_create([
        QueueSample(time=clock, queue_id=qid, used=used_total[qid], guarantee=limits.get(qid, (0, 0, None))[0],
                    quota=limits.get(qid, (0, 0, None))[1], limit=limits.get(qid, (0, 0, None))[2],
                    pending_demand=demand_total[qid], fair_share=share.get(qid))
        for qid, _ in queues])
