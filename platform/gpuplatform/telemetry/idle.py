"""Idle allocations (docs/telemetry.md): a running job whose GPUs all stayed under IDLE_SM_PERCENT for
IDLE_MINUTES is marked idle.

`detect_idle(now)` (Celery beat, every minute), for each running job that holds GPUs:

- marks it idle when it has been running at least IDLE_MINUTES, telemetry covers the whole window (its
  first sample in the window is within 2 sample periods of the window's start) and no sample of any of its
  GPUs reached IDLE_SM_PERCENT: an IdleAllocation from the last sample that did (else its first sample since
  it started), and a `job_idle` Event. A job without telemetry (simulated, a node without NVML) is never
  marked: no telemetry is not idleness. With its queue's `idle_timeout_minutes` set, the owner is told at
  marking (`idle_timeout_warning` Event naming when it will be stopped);
- ends the idle period when a sample reached the threshold since (`job_active_again` Event) or the job is
  no longer running;
- stops (cancels, with the queue's grace) a job idle longer than its queue's `idle_timeout_minutes`.

`idle_allocations(team_ids=None, now=None)` lists the open ones with the GPU-hours each wasted so far.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Min

from .. import clock
from ..audit import record_event
from ..models import Allocation, GpuSample, IdleAllocation, Job
from ..wording import count

LEVELS = (GpuSample.RAW, GpuSample.MINUTE)


def detect_idle(now: datetime | None = None) -> dict:
    """Apply the rules above at `now` (default: the cluster clock). Returns {"marked", "ended", "stopped"}
    (job ids)."""
    now = now or clock.now()
    threshold, minutes = settings.IDLE_SM_PERCENT, settings.IDLE_MINUTES
    window = now - timedelta(minutes=minutes)
    slack = timedelta(seconds=2 * settings.TELEMETRY_SECONDS + 60)  # + 60: the window may start in a minute row
    marked, ended, stopped = [], [], []
    gpus_of: dict[int, list[int]] = {}
    for job_id, gpu_id in Allocation.objects.filter(released_at__isnull=True, job__state=Job.State.RUNNING) \
            .values_list("job_id", "gpu_id"):
        gpus_of.setdefault(job_id, []).append(gpu_id)
    open_idle = {i.job_id: i for i in IdleAllocation.objects.filter(ended_at__isnull=True).select_related("job__queue")}
    with transaction.atomic():
        for job_id, idle in open_idle.items():
            if job_id not in gpus_of:  # the job ended or stopped running
                idle.ended_at = idle.job.finished_at or now
                idle.save(update_fields=["ended_at"])
                ended.append(job_id)
                continue
            busy = GpuSample.objects.filter(gpu_id__in=gpus_of[job_id], level__in=LEVELS, time__gt=idle.since,
                                            sm__gte=threshold).aggregate(t=Min("time"))["t"]
            if busy is not None:
                idle.ended_at = busy
                idle.save(update_fields=["ended_at"])
                record_event("job_active_again", f"{idle.job.name}: GPUs busy again (SM >= {threshold:g} %)",
                             job_id=job_id, time=now, data={"idle_since": idle.since.isoformat()})
                ended.append(job_id)
        jobs = {j.pk: j for j in Job.objects.filter(pk__in=gpus_of, started_at__lte=window).select_related("queue")}
        for job_id, job in jobs.items():
            if job_id in open_idle and job_id not in ended:
                continue
            gpus = gpus_of[job_id]
            agg = GpuSample.objects.filter(gpu_id__in=gpus, level__in=LEVELS, time__gte=window, sm__isnull=False) \
                .aggregate(first=Min("time"), top=Max("sm"))
            if agg["first"] is None or agg["first"] > window + slack or agg["top"] >= threshold:
                continue
            last_busy = GpuSample.objects.filter(gpu_id__in=gpus, level__in=LEVELS, sm__gte=threshold,
                                                 time__gte=job.started_at).aggregate(t=Max("time"))["t"]
            if last_busy is None:  # never busy: idle since its first sample
                last_busy = GpuSample.objects.filter(gpu_id__in=gpus, level__in=LEVELS, time__gte=job.started_at,
                                                     sm__isnull=False).aggregate(t=Min("time"))["t"]
            since = max(last_busy or agg["first"], job.started_at)
            IdleAllocation.objects.create(job=job, since=since, marked_at=now, gpus=len(gpus))
            record_event("job_idle", f"{job.name}: {count(len(gpus), 'GPU')} under {threshold:g} % SM for {minutes:g} min",
                         job=job, time=now, data={"since": since.isoformat(), "gpus": len(gpus)})
            timeout = job.queue.idle_timeout_minutes
            if timeout:
                stop_at = since + timedelta(minutes=timeout)
                IdleAllocation.objects.filter(job=job, ended_at__isnull=True).update(warned_at=now)
                record_event("idle_timeout_warning", f"{job.name}: idle; queue {job.queue.name} stops idle jobs after "
                             f"{timeout} min: stopped at {stop_at:%Y-%m-%d %H:%M} UTC unless its GPUs get busy",
                             job=job, time=now, data={"stop_at": stop_at.isoformat()})
            marked.append(job_id)
    for idle in IdleAllocation.objects.filter(ended_at__isnull=True, job__state=Job.State.RUNNING,
                                              job__queue__idle_timeout_minutes__isnull=False).select_related("job__queue"):
        timeout = idle.job.queue.idle_timeout_minutes
        if timeout and now - idle.since >= timedelta(minutes=timeout) and idle.warned_at is not None:
            from ..services import cancel_job

            cancel_job(idle.job, reason=f"idle GPU timeout: under {threshold:g} % SM for {timeout} min", at=now)
            stopped.append(idle.job_id)
    return {"marked": marked, "ended": ended, "stopped": stopped}


def idle_allocations(team_ids=None, now: datetime | None = None, limit: int | None = None) -> list[dict]:
    """Open idle allocations, most GPU-hours wasted first: [{"job", "job_name", "team", "queue", "gpus",
    "since", "wasted_gpu_hours"}]. `team_ids`: only these teams' jobs (None = all)."""
    now = now or clock.now()
    qs = IdleAllocation.objects.filter(ended_at__isnull=True).select_related("job__team", "job__queue")
    if team_ids is not None:
        qs = qs.filter(job__team_id__in=list(team_ids))
    out = [{"job": i.job_id, "job_name": i.job.name, "team": i.job.team.name, "queue": i.job.queue.name,
            "gpus": i.gpus, "since": i.since, "wasted_gpu_hours": i.gpus * max(0.0, (now - i.since).total_seconds()) / 3600}
           for i in qs]
    out.sort(key=lambda r: -r["wasted_gpu_hours"])
    return out[:limit] if limit else out
