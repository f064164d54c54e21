"""Decayed queue usage kept in the database (Queue.recent_usage), for fair-share ordering with memory.

On by default (settings.SCHEDULER_USAGE_HALF_LIFE_SECONDS, 7 days like Slurm's PriorityDecayHalfLife;
0 in the environment turns it off). After each cycle every queue's recent usage
becomes decay_usage(previous, usage now, seconds since the last update, half-life) (the engine's formula,
scheduler.core.plugins.fairshare.decay_usage); the next snapshot passes it to the engine as
QueueInfo.recent_usage and the engine orders queues by it.
"""
from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import transaction

from gpuplatform.models import Queue
from gpuplatform.scheduling.locks import lock_queue_tree
from scheduler.core import CycleConfig
from scheduler.core.snapshot import DEFAULT_USAGE_HALF_LIFE
from scheduler.core.plugins.fairshare import decay_usage


def default_config() -> CycleConfig:
    return CycleConfig(usage_half_life=getattr(settings, "SCHEDULER_USAGE_HALF_LIFE_SECONDS", DEFAULT_USAGE_HALF_LIFE),
                       reschedule=getattr(settings, "SCHEDULER_RESCHEDULE", True))


@transaction.atomic
def record(queue_usage: dict[str, dict[str, float]], clock: datetime, config: CycleConfig) -> int:
    """Fold this cycle's usage (queue -> flavor -> GPUs, after the cycle's admissions) into every queue's
    decayed usage. Returns the number of queues updated; 0 when the half-life is off. A queue new since the last
    cycle folds in from 0 at that cycle's time; at the first cycle of all, each queue starts at its usage.

    Holds the queue tree's lock shared (scheduling.locks.lock_queue_tree), taken first, before the queue rows'
    locks: a queue change (a move, a quota, a delete, a close) holds it exclusive and a queue row, and its deferred
    foreign key checks at commit lock the parent's row; the cycle locking every queue meanwhile deadlocked with it
    (new-user trial 17b, F11: "scheduling cycle N failed ... deadlock detected" beside a queue move). Now one waits
    for the other's commit. Shared, it does not wait for submissions (which hold it shared too); this transaction
    is the cycle's own (run_cycle_once: apply_result's have ended) and holds no queue row before it. The rows are
    locked FOR NO KEY UPDATE (their keys do not change), so a foreign key check on them does not wait either."""
    half_life = config.usage_half_life
    if not half_life:
        return 0
    lock_queue_tree(shared=True)
    updated = []
    queues = list(Queue.objects.select_for_update(no_key=True).only("id", "name", "recent_usage", "recent_usage_at"))
    # A queue created since the last cycle had no usage before it: it starts from 0 at that cycle's time and ramps
    # up as the formula says (new-user trial 16, F11: it started at its first cycle's whole usage, as if it had used
    # that for ever). At the first cycle of all (no queue has a time yet) every queue starts at its usage now.
    last = max((q.recent_usage_at for q in queues if q.recent_usage_at is not None), default=None)
    for queue in queues:
        since = queue.recent_usage_at or last
        elapsed = max(0.0, (clock - since).total_seconds()) if since is not None else half_life * 50
        queue.recent_usage = {f: round(v, 4) for f, v in decay_usage(queue.recent_usage or {},
                                                                     queue_usage.get(queue.name, {}),
                                                                     elapsed, half_life).items()}
        queue.recent_usage_at = clock
        updated.append(queue)
    Queue.objects.bulk_update(updated, ["recent_usage", "recent_usage_at"])
    return len(updated)
