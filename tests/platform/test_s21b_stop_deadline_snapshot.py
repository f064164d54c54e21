"""The platform hands the engine each victim's stop deadline (trial 21, F1): build_snapshot's JobInfo.stop_deadline is a
preempting job's preempt_deadline, a releasing entry's tasks' release_deadline, and the forecast's kwargs carry every
queue's grace period, so the forecast frees a victim's GPUs when its stop really ends."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone as tz

from gpuplatform.models import Queue
from gpuplatform.scheduling import store
from gpuplatform.scheduling.forecast import _engine_kwargs
from scheduler.core.snapshot import Binding, CycleResult, Eviction, Nomination, PendingReason, TaskPlacement

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)


def _start(job, *placements, number):
    tasks = tuple(TaskPlacement("worker", i, node, gpus) for i, (node, gpus) in enumerate(placements))
    stats = store.apply_result(CycleResult(bindings=[Binding(job.pk, tasks, "nvl-a1", 1)]), clock=CLOCK,
                               cycle_number=number)
    assert stats.binds == 1


def test_snapshot_carries_the_stop_deadline_of_victims_and_released_tasks(submit):
    Queue.objects.filter(name="alpha").update(preemption_grace_seconds=3600)  # a long checkpoint grace
    whole = submit("whole", tasks=1, gpus=8)
    part = submit("part", tasks=2, gpus=4, roles=[{"name": "worker", "tasks": 2, "gpus_per_task": 4,
                                                   "min_available": 1}])
    _start(whole, ("n0", tuple(range(8))), number=1)
    _start(part, ("n1", (0, 1, 2, 3)), ("n1", (4, 5, 6, 7)), number=2)
    ben = submit("beneficiary", tasks=1, gpus=8)
    held = (TaskPlacement("worker", 0, "n0", tuple(range(8))),)
    when = CLOCK + timedelta(seconds=10)
    result = CycleResult(
        evictions=[Eviction(whole.pk, (), 8, "reclaim", ben.pk, "reclaim: gang of whole"),
                   Eviction(part.pk, (("worker", 1),), 4, "reclaim", ben.pk, "reclaim: 1 surplus task of part")],
        nominations=[Nomination(ben.pk, held, "hold")], pending={ben.pk: PendingReason("nominated", "waiting")})
    assert store.apply_result(result, clock=when, cycle_number=3).evictions == 2
    snap, _ = store.build_snapshot(now=when.timestamp() + 5)
    jobs = {j.id: j for j in snap.jobs}
    deadline = (when + timedelta(seconds=3600)).timestamp()
    assert jobs[whole.pk].state == "preempting" and jobs[whole.pk].stop_deadline == deadline
    releasing = jobs[f"{part.pk}:releasing"]
    assert releasing.state == "preempting" and releasing.stop_deadline == deadline
    assert jobs[part.pk].stop_deadline is None and jobs[ben.pk].stop_deadline is None  # running, pending
    assert _engine_kwargs()["queue_grace"]["alpha"] == 3600.0


def test_snapshot_says_whether_a_stop_ends_the_job(submit):
    """stop_ends: a cancel (or a stop toward failed / succeeded) ends the job; a requeue or restart does not. The rows
    as execution.stops.stop_job leaves a job whose processes still run on node agents (preempting, its target)."""
    from gpuplatform.models import Job

    jobs = {target: submit(f"to-{target}", tasks=1, gpus=1) for target in ("cancelled", "failed", "requeue",
                                                                            "restart", "")}
    for i, job in enumerate(jobs.values()):
        _start(job, ("n0", (i,)), number=i + 1)
    deadline = CLOCK + timedelta(seconds=600)
    for target, job in jobs.items():
        Job.objects.filter(pk=job.pk).update(state="preempting", stop_target=target, preempt_deadline=deadline)
    snap, _ = store.build_snapshot(now=CLOCK.timestamp() + 5)
    seen = {j.id: j for j in snap.jobs}
    assert {t: (seen[j.pk].state, seen[j.pk].stop_ends, seen[j.pk].stop_deadline) for t, j in jobs.items()} == {
        "cancelled": ("preempting", True, deadline.timestamp()), "failed": ("preempting", True, deadline.timestamp()),
        "requeue": ("preempting", False, deadline.timestamp()), "restart": ("preempting", False, deadline.timestamp()),
        "": ("preempting", False, deadline.timestamp())}
