"""Drive the platform from a replayed trace on a simulated clock (the demo's workload).

`TraceFeeder.advance(now)` does what the teams and their jobs would do up to cluster time `now`:
submits every trace job whose submit time has passed (services.submit_job, submitted_at on the
simulated clock, duration_seconds from the trace), and finishes every running job whose trace duration
has elapsed since it started (services.finish_job at its exact end time). The scheduling cycle itself is
not here: the caller runs `gpuplatform.scheduling.store.run_cycle_once(clock=now)` after each advance.

`SimClock` maps wall time to cluster time: `speed` simulated seconds per wall second, never jumping more
than `max_step` simulated seconds at once (a slow cycle slows the replay instead of skipping it).
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from django.db import transaction

from . import services
from .models import Job, Queue

log = logging.getLogger("gpuplatform.trace_feeder")

# When a trace does not say where its clock starts, the simulated clock starts here.
DEFAULT_EPOCH = datetime(2017, 9, 4, tzinfo=timezone.utc)


def trace_epoch(trace) -> datetime:
    """The calendar time of the trace's t = 0: stats["origin"] if the importer gives it, else an
    "origin YYYY-MM-DD HH:MM:SS" in its notes, else DEFAULT_EPOCH. Always timezone-aware (UTC)."""
    origin = (getattr(trace, "stats", None) or {}).get("origin")
    if isinstance(origin, datetime):
        return origin if origin.tzinfo else origin.replace(tzinfo=timezone.utc)
    for note in getattr(trace, "notes", ()) or ():
        m = re.search(r"origin (\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)", note)
        if m:
            return datetime.fromisoformat(m.group(1).replace(" ", "T")).replace(tzinfo=timezone.utc)
    return DEFAULT_EPOCH


def busy_start_seconds(trace, capacity_gpus: int, *, fraction: float = 0.9, step: float = 3600.0) -> float | None:
    """The first trace time (a multiple of `step` seconds) at which the jobs the trace has running ask
    for at least `fraction` x `capacity_gpus` GPUs; None if that never happens. One sweep over the jobs."""
    events = []
    for j in trace.jobs:
        gpus = j.tasks * j.gpus_per_task
        events.append((j.submit, gpus))
        events.append((j.submit + j.duration, -gpus))
    if not events:
        return None
    events.sort()
    target = fraction * capacity_gpus
    live, i, t = 0, 0, 0.0
    end = events[-1][0]
    while t <= end:
        while i < len(events) and events[i][0] <= t:
            live += events[i][1]
            i += 1
        if live >= target:
            return t
        t += step
    return None


@dataclass
class FeedStats:
    submitted: int = 0
    finished: int = 0
    rejected: int = 0


class TraceFeeder:
    """Submits a trace's jobs and completes them, on the simulated clock. Not thread-safe; one per loop."""

    def __init__(self, trace, *, epoch: datetime, start_seconds: float = 0.0, warm_start: bool = False,
                 name_prefix: str | None = None, batch: int = 200, skip_ids: set[str] | frozenset = frozenset()):
        self.trace = trace
        # trace job ids (external_id) already in the database: never submitted again (the demo's --keep resumes
        # a kept workload; new-user trial 11, F4)
        self.skip_ids = skip_ids
        self.epoch = epoch
        self.start_seconds = start_seconds
        self.name_prefix = name_prefix if name_prefix is not None else f"{trace.name}-"
        self.batch = batch
        jobs = sorted((j for j in trace.jobs if j.submit >= start_seconds), key=lambda j: j.submit)
        # Warm start: the jobs submitted before the start that the trace still has running at the start
        # come in at once, with their own submit time and their REMAINING run time, so the replay
        # begins on a cluster as busy as the trace's instead of an empty one.
        self._warm = sorted((j for j in trace.jobs if j.submit < start_seconds < j.submit + j.duration),
                            key=lambda j: j.submit) if warm_start else []
        self._jobs = jobs
        self._next = 0
        self._queues: dict[str, Queue | None] = {}
        self.stats = FeedStats()

    @property
    def start(self) -> datetime | None:
        """Cluster time the replay starts at: start_seconds with a warm start, else the first job's submit
        time (None when there is nothing to replay)."""
        if self._warm:
            return self.at(self.start_seconds)
        return self.at(self._jobs[0].submit) if self._jobs else None

    @property
    def warm_jobs(self) -> int:
        return len(self._warm)

    @property
    def remaining(self) -> int:
        return len(self._jobs) - self._next

    def at(self, seconds: float) -> datetime:
        return self.epoch + timedelta(seconds=seconds)

    def _queue(self, name: str) -> Queue | None:
        if name not in self._queues:
            self._queues[name] = Queue.objects.select_related("team").filter(name=name).first()
        return self._queues[name]

    def _submit(self, tj, duration: float, *, warm: bool = False) -> bool:
        queue = self._queue(tj.queue)
        if queue is None or queue.team is None:
            self.stats.rejected += 1
            log.warning("trace job %s: no team queue %r; skipped", tj.id, tj.queue)
            return False
        role = {"name": "worker", "tasks": tj.tasks, "gpus_per_task": tj.gpus_per_task,
                "min_available": tj.min_available or tj.tasks, "cpu_milli": tj.cpu_milli,
                "memory_mib": tj.memory_mib, "flavor": "|".join(tj.flavors)}
        try:
            # a job name follows the platform's name rule (job_rules.NAME_RE); the trace's own id is kept whole
            # in external_id
            name = re.sub(r"[^A-Za-z0-9._-]", "-", f"{self.name_prefix}{tj.id}")[:200].lstrip("._-") or "trace-job"
            services.submit_job(team=queue.team, queue=queue, name=name,
                                roles=[role], priority=tj.priority, duration_seconds=duration,
                                submitted_at=self.at(tj.submit), external_id=str(tj.id), warm_start=warm)
        except services.ValidationError as exc:
            self.stats.rejected += 1
            log.warning("trace job %s rejected: %s", tj.id, exc)
            return False
        return True

    def submit_due(self, now: datetime, *, limit: int | None = None) -> int:
        """Submit the warm-start jobs (first call), then the jobs whose submit time is <= now (at most
        `limit` of those); returns how many were submitted."""
        count = 0
        if self._warm:
            warm, self._warm = self._warm, []
            with transaction.atomic():
                for tj in warm:
                    count += self._submit(tj, tj.submit + tj.duration - self.start_seconds, warm=True)
        arrived = 0
        while self._next < len(self._jobs) and (limit is None or arrived < limit):
            tj = self._jobs[self._next]
            if self.at(tj.submit) > now:
                break
            if str(tj.id) in self.skip_ids:
                self._next += 1
                continue
            arrived += self._submit(tj, tj.duration)  # a failure (database locked) raises: retried next tick
            self._next += 1
        count += arrived
        self.stats.submitted += count
        return count

    def finish_due(self, now: datetime) -> int:
        """Finish every running trace job whose duration has elapsed by `now`, at its exact end time."""
        rows = (Job.objects.filter(state__in=Job.ACTIVE_STATES, duration_seconds__isnull=False,
                                   started_at__isnull=False)
                .values_list("id", "started_at", "duration_seconds"))
        due = sorted((started + timedelta(seconds=duration), pk) for pk, started, duration in rows
                     if started + timedelta(seconds=duration) <= now)
        finished = 0
        for i in range(0, len(due), self.batch):
            with transaction.atomic():
                for end, pk in due[i:i + self.batch]:
                    try:
                        services.finish_job(Job.objects.get(pk=pk), "succeeded", end)
                        finished += 1
                    except services.ValidationError:  # finished or requeued meanwhile
                        pass
        self.stats.finished += finished
        return finished

    def advance(self, now: datetime) -> tuple[int, int]:
        """Finish what has ended, then submit what has arrived, up to `now`. Returns (finished, submitted)."""
        finished = self.finish_due(now)
        submitted = self.submit_due(now)
        return finished, submitted


class SimClock:
    """Cluster time = start + speed x wall seconds elapsed, each tick advancing at most max_step."""

    def __init__(self, start: datetime, *, speed: float, max_step: float | None = None, wall=time.monotonic):
        if speed <= 0:
            raise ValueError("speed must be > 0")
        self.now = start
        self.speed = speed
        self.max_step = max_step
        self._wall = wall
        self._last = wall()

    def tick(self) -> datetime:
        wall = self._wall()
        step = (wall - self._last) * self.speed
        if self.max_step is not None:
            step = min(step, self.max_step)
        self._last = wall
        self.now = self.now + timedelta(seconds=step)
        return self.now
