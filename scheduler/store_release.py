"""The release step at the start of every scheduling cycle (store.run_cycle_once calls it before the
snapshot, in a transaction of its own), at cluster time `clock`:

1. preempting jobs whose `preempt_deadline` has passed release every GPU at once and go back to pending
   whole (attempts + 1, original submit time, no backoff: the job was preempted, it did not fail);
2. releasing surplus tasks whose `release_deadline` has passed free their GPUs and go back to pending
   (the job keeps running with fewer tasks);
3. gangs bound more than GANG_START_TIMEOUT_SECONDS ago whose tasks have not all reported running
   (job state "admitted", only when TASKS_START_IMMEDIATELY is off) are requeued whole with backoff.

Every transition is an Event. Each write is a compare-and-set (lifecycle.py), so a job that finished
or was cancelled meanwhile is left alone.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from gpuplatform.lifecycle import release_tasks, requeue_job
from gpuplatform.models import Event, Job, Task

log = logging.getLogger("scheduler.store")


@dataclass
class ReleaseStats:
    requeued: list = field(default_factory=list)  # job ids back to pending after their grace period
    tasks_released: int = 0
    timed_out: list = field(default_factory=list)  # job ids requeued by the gang-start timeout


def release_expired(clock: datetime, *, cycle_number: int | None = None) -> ReleaseStats:
    stats = ReleaseStats()
    with transaction.atomic():
        expired = list(Job.objects.filter(Q(preempt_deadline__lte=clock) | Q(preempt_deadline__isnull=True),
                                          state=Job.State.PREEMPTING).order_by("id").values_list("id", flat=True))
        for job_id in expired:
            if requeue_job(job_id, at=clock, kind="requeued", reason="preempted: grace period over",
                           backoff=False, from_states=(Job.State.PREEMPTING,), cycle=cycle_number):
                stats.requeued.append(job_id)

        by_job: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
        for tid, jid, role, index in (Task.objects.filter(state=Task.State.RELEASING, release_deadline__lte=clock)
                                      .values_list("id", "job_id", "role__name", "index")):
            by_job[jid].append((tid, role, index))
        names = dict(Job.objects.filter(pk__in=list(by_job)).values_list("id", "name"))
        events = []
        for jid, tasks in sorted(by_job.items()):
            moved = release_tasks([t[0] for t in tasks], at=clock)
            stats.tasks_released += moved
            if moved:
                events.append(Event(time=clock, kind="tasks_released", job_id=jid, cycle=cycle_number,
                                    message=f"{names.get(jid, jid)}: {moved} surplus task(s) released their GPUs "
                                            f"after the grace period; the job keeps running with fewer tasks",
                                    data={"tasks": [[r, i] for _, r, i in tasks]}))
        Event.objects.bulk_create(events)

        timeout = float(getattr(settings, "GANG_START_TIMEOUT_SECONDS", 300))
        stuck = list(Job.objects.filter(state=Job.State.ADMITTED, bound_at__lte=clock - timedelta(seconds=timeout))
                     .order_by("id").values_list("id", flat=True))
        for job_id in stuck:
            waiting = list(Task.objects.filter(job_id=job_id, state=Task.State.BOUND)
                           .values_list("role__name", "index", "node__name"))
            if requeue_job(job_id, at=clock, kind="gang_start_timeout", backoff=True,
                           reason=f"{len(waiting)} task(s) did not report running within {timeout:.0f} s",
                           from_states=(Job.State.ADMITTED,), cycle=cycle_number,
                           data={"not_running": [list(t) for t in waiting]}):
                stats.timed_out.append(job_id)
    if stats.requeued or stats.tasks_released or stats.timed_out:
        log.info("release step: %d job(s) requeued after grace, %d surplus task(s) released, %d gang(s) timed out",
                 len(stats.requeued), stats.tasks_released, len(stats.timed_out))
    return stats
