"""Is the scheduling cycle running? (new-user trial 14, F10: a dead Celery worker went unnoticed: /readyz ready,
jobs "waiting for the next scheduling cycle" forever.)

Every cycle writes a SchedulerCycle row whose `started_at` is the wall clock (also in the demos, whose cluster
clock is simulated). When the newest is older than SCHEDULER_STALL_SECONDS (default: 5 beat periods, at least
30 s), the cycle is stalled: /readyz says so under "scheduler", /metrics has the last cycle's time
(gpuplatform_last_cycle_timestamp_seconds), every signed-in page shows a line, and a pending job's reason says it.
Before the first cycle ever, it is stalled only once a pending job has waited that long. A federation manager
runs no cycle of its own: never stalled.
"""
from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.utils import timezone


def stall_seconds() -> float:
    """How long without a cycle counts as stalled."""
    explicit = getattr(settings, "SCHEDULER_STALL_SECONDS", None)
    if explicit:
        return float(explicit)
    return max(30.0, 5 * float(getattr(settings, "SCHEDULER_CYCLE_SECONDS", 5)))


def last_cycle_at() -> datetime | None:
    """Wall time the newest scheduling cycle started, or None when none ever ran."""
    from gpuplatform.models import SchedulerCycle

    return SchedulerCycle.objects.order_by("-number").values_list("started_at", flat=True).first()


def cycle_stall(now: datetime | None = None) -> str | None:
    """A sentence when no scheduling cycle has run for stall_seconds(); None while cycles run."""
    from gpuplatform.federation.manager import is_manager
    from gpuplatform.models import Job

    if is_manager():
        return None  # a federation manager runs no scheduling cycle of its own: its members do
    now = now or timezone.now()
    limit = stall_seconds()
    every = float(getattr(settings, "SCHEDULER_CYCLE_SECONDS", 5))
    last = last_cycle_at()
    if last is not None:
        age = (now - last).total_seconds()
        if age <= limit:
            return None
        return (f"no scheduling cycle for {age:,.0f} s (expected every {every:g} s): the scheduler (Celery worker "
                f"and beat) may be down; pending jobs wait until it is back")
    oldest = (Job.objects.filter(state=Job.State.PENDING).order_by("submitted_at")
              .values_list("submitted_at", flat=True).first())
    if oldest is None or (now - oldest).total_seconds() <= limit:
        return None
    return (f"no scheduling cycle has run yet and a job has waited {(now - oldest).total_seconds():,.0f} s (expected "
            f"every {every:g} s): the scheduler (Celery worker and beat) may be down")
