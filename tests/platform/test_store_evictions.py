"""store.py / store_evict.py / store_release.py: evictions, holds, decisions, grace periods and requeues."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone as tz

import pytest

from gpuplatform import services
from gpuplatform.models import Allocation, Event, Job, Node, Queue, QueueSample, SchedulerCycle, Task
from gpuplatform.scheduling import store
from gpuplatform.scheduling.release import release_expired
from scheduler.core.snapshot import (
    Binding, CycleResult, Eviction, Nomination, PendingReason, TaskPlacement,
)

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)


def at(seconds: float) -> datetime:
    return CLOCK + timedelta(seconds=seconds)


def start(job, *placements, clock=CLOCK, number=None):
    """Bind `job` with one task per (node, gpus) placement, through apply_result."""
    tasks = tuple(TaskPlacement("worker", i, node, gpus) for i, (node, gpus) in enumerate(placements))
    number = number or SchedulerCycle.objects.count() + 1
    stats = store.apply_result(CycleResult(bindings=[Binding(job.pk, tasks, "nvl-a1", 1)]), clock=clock,
                               cycle_number=number)
    assert stats.binds == 1
    return tasks


def live_gpus(job):
    return sorted(Allocation.objects.filter(job=job, released_at__isnull=True)
                  .values_list("gpu__node__name", "gpu__index"))


def decision(beneficiary, victims, rule="reclaim"):
    return {"rule": rule, "beneficiary": beneficiary.pk, "queue": beneficiary.queue.name,
            "victims": [{"job": v.pk, "tasks": list(t), "gpus": g} for v, t, g in victims],
            "usage_before": {"alpha": {"H100": 16}}, "usage_after": {"alpha": {"H100": 8}}}


def test_whole_and_partial_evictions_holds_and_decision_events(submit):
    Queue.objects.filter(name="alpha").update(preemption_grace_seconds=45)
    whole = submit("whole", tasks=1, gpus=8)
    part = submit("part", tasks=2, gpus=4, roles=[{"name": "worker", "tasks": 2, "gpus_per_task": 4, "min_available": 1}])
    start(whole, ("n0", tuple(range(8))))
    start(part, ("n1", (0, 1, 2, 3)), ("n1", (4, 5, 6, 7)))
    ben = submit("beneficiary", tasks=1, gpus=8)
    other = submit("other", tasks=1, gpus=4)
    held = (TaskPlacement("worker", 0, "n0", tuple(range(8))),)
    result = CycleResult(
        evictions=[Eviction(whole.pk, (), 8, "reclaim", ben.pk, "reclaim: gang of whole"),
                   Eviction(part.pk, (("worker", 1),), 4, "reclaim", ben.pk, "reclaim: 1 surplus task of part")],
        nominations=[Nomination(ben.pk, held, "hold")],
        decisions=[decision(ben, [(whole, (), 8), (part, [("worker", 1)], 4)])],
        estimated_start={other.pk: at(600).timestamp()},
        pending={ben.pk: PendingReason("nominated", "waiting"), other.pk: PendingReason("insufficient_gpus", "x")},
        fair_share={"alpha": {"H100": 12.5}, "root": {"H100": 32.0}})
    stats = store.apply_result(result, clock=at(10), cycle_number=10)
    assert (stats.evictions, stats.stale_skipped) == (2, 0)
    whole.refresh_from_db(), part.refresh_from_db(), ben.refresh_from_db(), other.refresh_from_db()
    assert whole.state == "preempting" and whole.preempt_deadline == at(55)
    assert part.state == "running"
    assert sorted(Task.objects.filter(job=part).values_list("index", "state", "release_deadline")) == [
        (0, "running", None), (1, "releasing", at(55))]
    assert ben.reserved == [["worker", 0, "n0", list(range(8))]]
    assert other.reservation_start == at(600) and ben.reservation_start is None
    assert live_gpus(whole) == [("n0", i) for i in range(8)]  # GPUs held until the grace period ends
    ev = Event.objects.get(kind="reclaim")
    assert ev.job_id == ben.pk and ev.cycle == 10
    assert [v["name"] for v in ev.data["victims"]] == ["whole", "part"]
    assert ev.data["usage_before"] == {"alpha": {"H100": 16}} and ev.data["usage_after"] == {"alpha": {"H100": 8}}
    assert set(Event.objects.filter(kind="reclaimed").values_list("job_id", flat=True)) == {whole.pk, part.pk}
    assert SchedulerCycle.objects.get(number=10).evictions == 2
    shares = dict(QueueSample.objects.filter(time=at(10)).values_list("queue__name", "fair_share"))
    assert shares == {"alpha": 12.5, "root": 32.0, "beta": None}
    # `held`: GPUs reserved for ben (queue alpha) and held, not allocated (the cycle's holds, CycleResult.held: none
    # here), rolled up to root (issue 13: the queue chart's held series). ben's 8 reserved GPUs are whole's, which
    # still uses them in its grace: its queue's used GPUs, not held too (new-user trial 19, F8: both were stacked)
    held_by_queue = dict(QueueSample.objects.filter(time=at(10)).values_list("queue__name", "held"))
    assert held_by_queue == {"alpha": 0, "root": 0, "beta": 0}

    snap, _ = store.build_snapshot(at(20).timestamp())
    jobs = {j.id: j for j in snap.jobs}
    assert jobs[whole.pk].state == "preempting" and len(jobs[whole.pk].placement) == 1
    assert jobs[part.pk].state == "running" and [t.index for t in jobs[part.pk].placement] == [0]
    assert jobs[part.pk].roles[0].tasks == 2  # placed + being released (RoleInfo.tasks of a running job)
    releasing = jobs[store.releasing_id(part.pk)]
    assert releasing.state == "preempting" and releasing.placement == (TaskPlacement("worker", 1, "n1", (4, 5, 6, 7)),)
    assert jobs[ben.pk].reserved == held

    # the next cycle no longer holds anything for `ben`: the hold is cleared, with an Event
    store.apply_result(CycleResult(), clock=at(20), cycle_number=11)
    ben.refresh_from_db(), other.refresh_from_db()
    assert ben.reserved is None and other.reservation_start is None
    assert Event.objects.filter(kind="hold_dropped", job=ben).exists()
    assert set(QueueSample.objects.filter(time=at(20)).values_list("held", flat=True)) == {0}


def test_release_after_grace_requeues_whole_with_original_submit_time(submit):
    Queue.objects.filter(name="alpha").update(preemption_grace_seconds=30)
    victim = submit("victim", tasks=2, gpus=4, submitted_at=at(-100))
    part = submit("part", roles=[{"name": "worker", "tasks": 2, "gpus_per_task": 4, "min_available": 1}])
    start(victim, ("n0", (0, 1, 2, 3)), ("n0", (4, 5, 6, 7)))
    start(part, ("n1", (0, 1, 2, 3)), ("n1", (4, 5, 6, 7)))
    ben = submit("ben", tasks=1, gpus=8)
    store.apply_result(CycleResult(evictions=[Eviction(victim.pk, (), 8, "preempt", ben.pk, "m"),
                                              Eviction(part.pk, (("worker", 1),), 4, "preempt", ben.pk, "m")],
                                   nominations=[Nomination(ben.pk, (TaskPlacement("worker", 0, "n0", tuple(range(8))),), "hold")],
                                   decisions=[decision(ben, [(victim, (), 8)], rule="preempt")]),
                       clock=at(0), cycle_number=5)
    assert release_expired(at(29)).requeued == []  # still inside the grace period
    assert Job.objects.get(pk=victim.pk).state == "preempting"
    stats = release_expired(at(30))
    assert stats.requeued == [victim.pk] and stats.tasks_released == 1
    victim.refresh_from_db()
    assert (victim.state, victim.attempts, victim.submitted_at, victim.not_before) == ("pending", 1, at(-100), None)
    assert victim.started_at is None and victim.preempt_deadline is None
    assert live_gpus(victim) == [] and set(Allocation.objects.filter(job=victim).values_list("released_at", flat=True)) == {at(30)}
    assert set(Task.objects.filter(job=victim).values_list("state", "node")) == {("pending", None)}
    part.refresh_from_db()
    assert part.state == "running" and live_gpus(part) == [("n1", i) for i in range(4)]
    assert sorted(Task.objects.filter(job=part).values_list("index", "state")) == [(0, "running"), (1, "pending")]
    assert Event.objects.filter(kind="requeued", job=victim).count() == 1
    assert Event.objects.filter(kind="tasks_released", job=part).count() == 1
    snap, _ = store.build_snapshot(at(31).timestamp())
    jobs = {j.id: j for j in snap.jobs}
    assert jobs[victim.pk].attempts == 1 and jobs[victim.pk].submit_time == at(-100).timestamp()
    # the released task waits to be placed again (the job may grow back into it: issue 11)
    assert store.releasing_id(part.pk) not in jobs and jobs[part.pk].roles[0].tasks == 2


def test_stale_eviction_decision_is_skipped_and_logged(submit, caplog):
    victim = submit("victim", tasks=1, gpus=8)
    start(victim, ("n0", tuple(range(8))))
    ben = submit("ben", tasks=1, gpus=8)
    services.finish_job(victim, at=at(5))  # finished between the snapshot and the apply
    caplog.set_level("INFO", logger="gpuplatform.scheduling.store")
    stats = store.apply_result(CycleResult(
        evictions=[Eviction(victim.pk, (), 8, "preempt", ben.pk, "m")],
        nominations=[Nomination(ben.pk, (TaskPlacement("worker", 0, "n0", tuple(range(8))),), "hold")],
        decisions=[decision(ben, [(victim, (), 8)], rule="preempt")]), clock=at(6), cycle_number=3)
    assert (stats.evictions, stats.stale_skipped) == (0, 1)
    assert Job.objects.get(pk=victim.pk).state == "succeeded"
    assert Job.objects.get(pk=ben.pk).reserved is None  # no hold without its evictions
    assert not Event.objects.filter(kind__in=("preempt", "preempted")).exists()
    assert "stale eviction decision" in caplog.text


def test_preemption_end_to_end_beneficiary_binds_on_its_held_gpus(submit):
    """The real engine: a high-priority job preempts low-priority ones in its queue; after the grace period
    it binds exactly on the GPUs held for it; the victims, requeued, never land on them."""
    Queue.objects.filter(name="alpha").update(preemption_grace_seconds=20)
    lows = [submit(f"low{i}", tasks=1, gpus=8, priority=0, submitted_at=at(-50 + i)) for i in range(4)]
    store.run_cycle_once(clock=at(0))
    assert set(Job.objects.filter(pk__in=[j.pk for j in lows]).values_list("state", flat=True)) == {"running"}
    high = submit("high", tasks=1, gpus=8, priority=10, submitted_at=at(1))
    store.run_cycle_once(clock=at(1))
    high.refresh_from_db()
    assert high.state == "pending" and high.reserved
    held = {(node, g) for _, _, node, gpus in high.reserved for g in gpus}
    victims = list(Job.objects.filter(state="preempting"))
    assert len(victims) == 1
    assert Event.objects.get(kind="preempt").data["beneficiary"] == high.pk
    for t in (5, 10, 15):  # inside the grace period: nothing moves, the hold stays
        store.run_cycle_once(clock=at(t))
        assert Job.objects.get(pk=high.pk).state == "pending" and Job.objects.get(pk=victims[0].pk).state == "preempting"
    store.run_cycle_once(clock=at(21))
    high.refresh_from_db()
    assert high.state == "running" and high.reserved is None
    assert set(live_gpus(high)) == held
    victim = Job.objects.get(pk=victims[0].pk)
    assert victim.state == "pending" and victim.attempts == 1 and victim.submitted_at == at(-50 + lows.index(victim))
    for t in (22, 40):
        store.run_cycle_once(clock=at(t))
    assert set(live_gpus(high)) == held and Job.objects.get(pk=victim.pk).state == "pending"
    assert not Allocation.objects.filter(job=victim, released_at__isnull=True).exists()


def test_gang_start_timeout_requeues_with_the_base_backoff_every_time(submit, settings):
    """A gang start timeout is a platform fault (diagnosis `platform`): each requeue waits the base backoff, not
    doubled by the attempts before it (trial 23; until then 60, 120, ... 3600; lifecycle.own_failures)."""
    Node.objects.update(executor="agent")  # a node agent confirms each start
    settings.GANG_START_TIMEOUT_SECONDS = 300
    job = submit("gang", tasks=2, gpus=8, submitted_at=at(-10))
    waits, now = [], at(0)
    for attempt in range(1, 9):
        store.run_cycle_once(clock=now)
        job.refresh_from_db()
        assert job.state == "admitted" and job.bound_at == now and job.started_at is None
        assert set(Task.objects.filter(job=job).values_list("state", flat=True)) == {"bound"}
        first = Task.objects.filter(job=job).first()
        assert services.report_task_running(first, at=now)  # one of two tasks starts
        store.run_cycle_once(clock=now + timedelta(seconds=299))
        assert Job.objects.get(pk=job.pk).state == "admitted"
        now += timedelta(seconds=300)
        store.run_cycle_once(clock=now)
        # the started task's process is stopped first (trial 20, F10): requeued at the agents' stop deadline
        assert Job.objects.get(pk=job.pk).state == "preempting"
        store.run_cycle_once(clock=now + timedelta(seconds=30))
        job.refresh_from_db()
        assert (job.state, job.attempts, job.submitted_at) == ("pending", attempt, at(-10))
        assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()
        waits.append((job.not_before - now).total_seconds())
        # attempts count from 0, as the API's attempts list: attempt - 1 ended, attempt comes (trial 13, F9)
        assert job.pending_reason.startswith(f"requeued after attempt {attempt - 1}; attempt {attempt} retries at")
        ended = job.attempt_records.order_by("-number").values_list("number", flat=True).first()
        assert ended == attempt - 1 and f"after attempt {ended};" in job.pending_reason  # the API's attempt number
        now = job.not_before
    assert waits == [60] * 8
    assert Event.objects.filter(kind="gang_start_timeout", job=job).count() == 8


def test_report_task_running_starts_the_job_when_every_task_runs(submit, settings):
    Node.objects.update(executor="agent")  # a node agent confirms each start
    job = submit("gang", tasks=2, gpus=4)
    store.run_cycle_once(clock=at(0))
    t0, t1 = Task.objects.filter(job=job).order_by("index")
    assert services.report_task_running(t0, at=at(3))
    assert not services.report_task_running(t0, at=at(4))  # idempotent
    assert Job.objects.get(pk=job.pk).state == "admitted"
    services.report_task_running(t1, at=at(5))
    job.refresh_from_db()
    assert (job.state, job.started_at, job.bound_at) == ("running", at(5), at(0))
    assert Event.objects.filter(kind="running", job=job).exists()
    store.run_cycle_once(clock=at(1000))  # no timeout for a running gang
    assert Job.objects.get(pk=job.pk).state == "running"
    services.cancel_job(job, at=at(1001))  # processes on node agents: SIGTERM now, SIGKILL at the deadline
    job.refresh_from_db()
    assert (job.state, job.stop_target, job.preempt_deadline) == ("preempting", "cancelled", at(1031))
    store.run_cycle_once(clock=at(1031))
    assert Job.objects.get(pk=job.pk).state == "cancelled"
    with pytest.raises(services.ValidationError):
        services.report_task_running(t0)


def test_backoff_pending_reason_comes_from_the_engine(submit):
    job = submit("j", tasks=1, gpus=1)
    Job.objects.filter(pk=job.pk).update(not_before=at(100), attempts=2)
    store.run_cycle_once(clock=at(0))
    job.refresh_from_db()
    assert job.state == "pending" and "requeued after attempt 1; attempt 2 retries at" in job.pending_reason
    store.run_cycle_once(clock=at(100))
    assert Job.objects.get(pk=job.pk).state == "running"
