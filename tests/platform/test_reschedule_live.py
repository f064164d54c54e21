"""Rescheduling in the live cycle (store.run_cycle_once): a migratable job is moved with its checkpoint grace,
the freed NVLink domain is held for the job blocked by fragmentation, the moved job keeps its new place
through its requeue and restarts there; the submission fields' rules (service and API)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone as tz

import pytest

from gpuplatform import services
from gpuplatform.models import Allocation, Event, Job, SchedulerCycle
from gpuplatform.scheduling import store
from scheduler.core.snapshot import Binding, CycleConfig, CycleResult, TaskPlacement

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)
ON = CycleConfig(reschedule=True, reschedule_every=1, reschedule_min_wait=600)


def at(seconds: float) -> datetime:
    return CLOCK + timedelta(seconds=seconds)


def start(job, node: str, clock=CLOCK):
    tasks = (TaskPlacement("worker", 0, node, tuple(range(8))),)
    store.apply_result(CycleResult(bindings=[Binding(job.pk, tasks, "nvl", 1)]), clock=clock,
                       cycle_number=SchedulerCycle.objects.count() + 1)


def gpus(job):
    return sorted(set(Allocation.objects.filter(job=job, released_at__isnull=True).values_list("gpu__node__name",
                                                                                             flat=True)))


def test_live_move_frees_a_domain_and_the_moved_job_restarts_on_its_held_place(submit):
    """small_spec: nvl-a1 = n0, n1 and nvl-a2 = n2, n3 (8 H100 each). fixed runs on n0, mover on n2: 16 GPUs
    free but no domain holds a 2 x 8 hard tier-1 gang."""
    fixed = submit("fixed", tasks=1, gpus=8, submitted_at=at(-4000))
    mover = submit("mover", tasks=1, gpus=8, submitted_at=at(-4000), migratable=True,
                   min_run_before_move_seconds=600, checkpoint_grace_seconds=30)
    start(fixed, "n0", at(-3600))
    start(mover, "n2", at(-3600))
    Job.objects.filter(pk__in=[fixed.pk, mover.pk]).update(state="running", started_at=at(-3600))
    big = submit("big", tasks=2, gpus=8, topology_mode="hard", highest_tier=1, submitted_at=at(-900))
    store.run_cycle_once(clock=at(0), config=CycleConfig())  # off: it only waits
    assert Job.objects.get(pk=big.pk).state == "pending" and Job.objects.get(pk=mover.pk).state == "running"
    store.run_cycle_once(clock=at(1), config=ON)
    mover.refresh_from_db(), big.refresh_from_db()
    assert mover.state == "preempting" and mover.preempt_deadline == at(31)  # its own checkpoint grace
    assert {n for _, _, n, _ in big.reserved} == {"n2", "n3"}
    assert [n for _, _, n, _ in mover.reserved] == ["n1"]  # its new place, held at once
    moved = Event.objects.get(kind="moved")
    assert moved.job_id == mover.pk and moved.data["beneficiary"] == big.pk
    decision = Event.objects.get(kind="reschedule")
    assert decision.job_id == big.pk and decision.data["domain"] == "nvl-a2"
    store.run_cycle_once(clock=at(10), config=ON)  # inside the grace: holds stay, nothing else moves
    assert Job.objects.get(pk=mover.pk).reserved and Event.objects.filter(kind="moved").count() == 1
    store.run_cycle_once(clock=at(31), config=ON)  # grace over: requeued with its hold, both start
    mover.refresh_from_db(), big.refresh_from_db()
    assert mover.state in ("admitted", "running") and gpus(mover) == ["n1"] and mover.attempts == 1
    assert big.state in ("admitted", "running") and gpus(big) == ["n2", "n3"]
    assert Job.objects.get(pk=fixed.pk).state == "running" and gpus(fixed) == ["n0"]
    snap, _ = store.build_snapshot(at(40).timestamp())
    assert [m.job_id for m in snap.recent_moves] == [mover.pk]  # the bounds see it: never moved twice


def test_not_migratable_is_never_moved(submit):
    fixed = submit("fixed", tasks=1, gpus=8, submitted_at=at(-4000))
    other = submit("other", tasks=1, gpus=8, submitted_at=at(-4000))
    start(fixed, "n0", at(-3600))
    start(other, "n2", at(-3600))
    Job.objects.filter(pk__in=[fixed.pk, other.pk]).update(state="running", started_at=at(-3600))
    submit("big", tasks=2, gpus=8, topology_mode="hard", highest_tier=1, submitted_at=at(-900))
    store.run_cycle_once(clock=at(1), config=ON)
    assert set(Job.objects.filter(pk__in=[fixed.pk, other.pk]).values_list("state", flat=True)) == {"running"}
    assert not Event.objects.filter(kind="moved").exists()


@pytest.mark.parametrize("field,value", [("migratable", "yes"), ("min_run_before_move_seconds", -1),
                                         ("min_run_before_move_seconds", 8 * 86400), ("checkpoint_grace_seconds", 0),
                                         ("checkpoint_grace_seconds", 1.5)])
def test_migration_fields_are_checked_by_the_service(submit, field, value):
    with pytest.raises(services.ValidationError) as exc:
        submit("bad", **{field: value})
    assert field in exc.value.errors
