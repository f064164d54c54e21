"""store.SnapshotMemo (issue 16): build_snapshot reuses a JobInfo only when every input it was built from is equal,
so a read with the memo is always equal to a read without it, whatever was written in between, and any write
that touches a job's row, its roles or its placements (including update(), which no timestamp notices) gives a
new JobInfo."""
from __future__ import annotations

from datetime import datetime, timezone as dt_timezone

from gpuplatform.models import Job, JobRole, Task
from gpuplatform.scheduling import store
from scheduler.core.snapshot import Binding, CycleResult, TaskPlacement

CLOCK = datetime(2026, 3, 1, 12, 0, tzinfo=dt_timezone.utc)


def _read(memo):
    with_memo, _ = store.build_snapshot(CLOCK.timestamp(), memo=memo)
    without, _ = store.build_snapshot(CLOCK.timestamp())
    assert with_memo == without  # every field of every node, job, queue
    return {j.id: j for j in with_memo.jobs}


def test_unchanged_jobs_are_reused_and_every_write_is_seen(submit):
    memo = store.SnapshotMemo()
    running = submit("running", tasks=1, gpus=2)
    store.apply_result(CycleResult(bindings=[Binding(running.pk, (TaskPlacement("worker", 0, "n1", (0, 1)),),
                                                     "nvl-a1", 1)]), clock=CLOCK, cycle_number=1)
    waiting = submit("waiting", tasks=2, gpus=1)
    other = submit("other", tasks=1, gpus=1)
    first = _read(memo)
    second = _read(memo)
    assert set(first) == {running.pk, waiting.pk, other.pk}
    assert all(second[j] is first[j] for j in first)  # nothing written: the same objects

    # writes that bypass save() and timestamps: the job row, a role, a task (pending count), a placement
    Job.objects.filter(pk=waiting.pk).update(priority=7)
    JobRole.objects.filter(job_id=other.pk).update(cpu_milli=500)
    Task.objects.filter(job_id=running.pk).update(node_id=Task.objects.get(job_id=running.pk).node_id)  # same value
    third = _read(memo)
    assert third[waiting.pk] is not second[waiting.pk] and third[waiting.pk].priority == 7
    assert third[other.pk] is not second[other.pk] and third[other.pk].roles[0].cpu_milli == 500
    assert third[running.pk] is second[running.pk]  # its inputs are equal again

    store.apply_result(CycleResult(bindings=[Binding(other.pk, (TaskPlacement("worker", 0, "n2", (3,)),),
                                                     "nvl-a1", 1)]), clock=CLOCK, cycle_number=2)
    Task.objects.filter(job_id=waiting.pk, index=1).update(state="running")  # one pending task fewer
    fourth = _read(memo)
    assert fourth[other.pk].state == "running" and fourth[other.pk].placement[0].gpus == (3,)
    assert fourth[waiting.pk].roles[0].tasks == 1 and fourth[waiting.pk] is not third[waiting.pk]
    assert fourth[running.pk] is third[running.pk]

    Job.objects.filter(pk=running.pk).update(state="succeeded")  # gone from the read: dropped from the memo
    _read(memo)
    assert running.pk not in memo.jobs and set(memo.jobs) == {waiting.pk, other.pk}
