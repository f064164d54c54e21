""""Borrowed", defined once for every page, chart, table and API figure.

A queue borrows the GPUs it holds above its quota (all flavors summed): borrowed = max(0, used - quota),
where used = the GPUs its live jobs hold (admitted, running, preempting). Which GPUs those are, when a
picture needs them one by one (the topology map): the queue's live jobs in start order fill the quota
first; the GPUs after the quota is full are the borrowed ones, so a gang that crosses the quota is
partly within it and partly borrowed, and the map's count equals the queue tree's. Borrowed GPUs are
the ones reclaim takes back first.
"""
from __future__ import annotations

from collections import defaultdict

from .gpu_request import as_gpus

__all__ = ["BORROWED_DEFINITION", "borrowed", "borrowed_gpu_ids"]

BORROWED_DEFINITION = (
    "Borrowed: the GPUs a queue holds above its quota (all flavors summed), max(0, used - quota). On the map, "
    "a queue's jobs in start order fill its quota first and the GPUs after that are the borrowed ones, so "
    "the map counts exactly what the queue tree counts. Reclaim takes borrowed GPUs back first.")


def borrowed(used: int | float, quota: int | None) -> int | float:
    """GPUs above quota: max(0, used - quota) (quota None counts as 0); GPU-equivalents when used is (3.5)."""
    return as_gpus(max(0, (used or 0) - (quota or 0)))


def borrowed_gpu_ids(jobs, allocations: dict[int, int], quotas: dict[int, int]) -> set[int]:
    """The GPU ids that are borrowed. jobs: live job dicts with `id` and `queue_id`, in start order;
    allocations: {gpu_id: job_id} of the live allocations; quotas: {queue_id: quota GPUs}. Per queue,
    len(result) == borrowed(used, quota)."""
    gpus_of: dict[int, list[int]] = defaultdict(list)
    for gpu_id, job_id in allocations.items():
        gpus_of[job_id].append(gpu_id)
    filled: dict[int, int] = defaultdict(int)
    out: set[int] = set()
    for j in jobs:
        room = quotas.get(j["queue_id"], 0) or 0
        for gpu_id in sorted(gpus_of.get(j["id"], ())):
            filled[j["queue_id"]] += 1
            if filled[j["queue_id"]] > room:
                out.add(gpu_id)
    return out
