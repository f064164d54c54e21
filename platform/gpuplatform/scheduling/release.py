"""The release step at the start of every scheduling cycle (store.run_cycle_once calls it before the
snapshot, in a transaction of its own), at cluster time `clock`:

1. preempting jobs whose `preempt_deadline` has passed, or whose processes on node agents have all
   exited, release every GPU at once and become what their stop says (gpuplatform.execution.stops):
   pending whole (preempted: attempts + 1, original submit time, no backoff), restarted with backoff, or
   ended (cancelled, failed, succeeded);
2. releasing surplus tasks whose `release_deadline` has passed free their GPUs and go back to pending
   (the job keeps running with fewer tasks);
3. gangs still starting (job state "admitted": some task on a node agent has not reported its process
   started) with no start reported for GANG_START_TIMEOUT_SECONDS (since binding or the last task that
   started: progress, not a fixed clock) are requeued whole with backoff (Event gang_start_timeout), once the
   processes of the tasks that did start have ended (stopped now with the agents' stop grace:
   execution.stop_for_fault; those never started are counted ended; at once when none started);
4. jobs that have run for their `time_limit_seconds` are stopped: SIGTERM now, SIGKILL after their
   queue's grace, then failed with end_reason "time limit".

Every transition is an Event (audit.py). Each write is a compare-and-set (lifecycle.py), so a job that finished
or was cancelled meanwhile is left alone.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from django.db.models import Max

from gpuplatform.audit import record_events
from gpuplatform.execution import enforce_time_limits, expire_stops
from gpuplatform.execution.stops import stop_for_fault
from gpuplatform.lifecycle import release_tasks
from gpuplatform.models import Job, Task

log = logging.getLogger("gpuplatform.scheduling.store")


@dataclass
class ReleaseStats:
    requeued: list = field(default_factory=list)  # job ids requeued or ended after their stop (grace over / exited)
    tasks_released: int = 0
    timed_out: list = field(default_factory=list)  # job ids requeued by the gang-start timeout
    time_limited: list = field(default_factory=list)  # job ids stopped by their time limit


def release_expired(clock: datetime, *, cycle_number: int | None = None) -> ReleaseStats:
    stats = ReleaseStats()
    with transaction.atomic():
        stats.requeued = expire_stops(clock, cycle=cycle_number)

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
                events.append({"time": clock, "kind": "tasks_released", "job_id": jid, "cycle": cycle_number,
                               "message": f"{names.get(jid, jid)}: {moved} surplus task(s) released their GPUs "
                                          f"after the grace period; the job keeps running with fewer tasks",
                               "data": {"tasks": [[r, i] for _, r, i in tasks]}})
        record_events(events)

        timeout = float(getattr(settings, "GANG_START_TIMEOUT_SECONDS", 300))
        cutoff = clock - timedelta(seconds=timeout)
        candidates = list(Job.objects.filter(state=Job.State.ADMITTED, bound_at__lte=cutoff)
                          .order_by("id").values_list("id", flat=True))
        progress = dict(Task.objects.filter(job_id__in=candidates, started_at__isnull=False).values("job_id")
                        .annotate(last=Max("started_at")).values_list("job_id", "last"))
        for job_id in candidates:
            if progress.get(job_id) is not None and progress[job_id] > cutoff:
                continue  # still coming up: a task reported its start within the timeout
            waiting = list(Task.objects.filter(job_id=job_id, state=Task.State.BOUND)
                           .values_list("role__name", "index", "node__name"))
            started = Task.objects.filter(job_id=job_id, state=Task.State.RUNNING).count()
            # the tasks that did start are processes on their nodes: the gang keeps its GPUs until they have
            # ended (stopped now; execution.stop_for_fault, trial 20, F10); those that never started are counted
            # ended, and a gang with none started is requeued now, as before
            if stop_for_fault(job_id, at=clock, kind="gang_start_timeout", cycle=cycle_number,
                              end_unstarted=f"never reported started (gang start timeout, {timeout:.0f} s)",
                              reason=f"{len(waiting)} task(s) did not report running and no task started for "
                                     f"{timeout:.0f} s ({started} running)",
                              data={"not_running": [list(t) for t in waiting], "running": started}):
                stats.timed_out.append(job_id)
        stats.time_limited = enforce_time_limits(clock, cycle=cycle_number)
    if stats.requeued or stats.tasks_released or stats.timed_out or stats.time_limited:
        log.info("release step: %d job(s) finalized after their stop, %d surplus task(s) released, %d gang(s) "
                 "timed out, %d job(s) hit their time limit", len(stats.requeued), stats.tasks_released,
                 len(stats.timed_out), len(stats.time_limited))
    return stats
