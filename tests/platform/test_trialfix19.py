"""New-user trial 19 (the execution path): how an evicted gang's stop ended, and a past attempt's log state."""
from __future__ import annotations

import pytest

from gpuplatform import execution
from gpuplatform.lifecycle import evict_job
from gpuplatform.models import Attempt, Event, Job, Task

from tests.platform.test_execution import EIGHT, agents, at, bind, report, start_all, tasks_of  # noqa: F401 (fixture)


def _requeue_reason(job) -> str:
    return Event.objects.filter(job_id=job.pk, kind="requeued").latest("id").data["reason"]


def test_an_evicted_gang_whose_tasks_exit_on_sigterm_is_not_said_to_have_run_out_of_grace(submit, agents):
    """F1: a reclaimed gang whose SIGTERM handler checkpointed and exited 23 s before its deadline was requeued
    "preempted: grace period over" (and its attempt diagnosed so): a user would think the handler was too slow. The
    requeue names the eviction and says the tasks exited before the grace period ended."""
    job = submit("borrow", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    evict_job(job.pk, at=at(100), grace_seconds=30, kind="reclaim",
              reason="reclaim: gang of borrow (queue alpha, priority 0) evicted for x (queue beta)")
    t0, t1 = tasks_of(job)
    report(t0, "exited", 104, exit_code=0)
    report(t1, "exited", 107, exit_code=0)
    job.refresh_from_db()
    assert job.state == "pending"
    reason = _requeue_reason(job)
    assert reason == ("reclaim: gang of borrow (queue alpha, priority 0) evicted for x (queue beta): every task "
                      "exited 23 s before its grace period ended"), reason
    diagnosis = Attempt.objects.get(job=job, number=0).diagnosis
    assert "grace period over" not in diagnosis["summary"], diagnosis


def test_an_evicted_gang_still_running_at_its_deadline_ran_out_of_grace(submit, agents):
    """F1's other side: a gang whose process ignored SIGTERM is requeued at the deadline, and says so."""
    job = submit("stubborn", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    start_all(job)
    evict_job(job.pk, at=at(100), grace_seconds=30, kind="preempted", reason="preempt: gang of stubborn evicted")
    assert execution.expire_stops(at(131)) == [job.pk]
    assert _requeue_reason(job) == "preempt: gang of stubborn evicted: grace period over"


def test_a_past_attempts_log_reports_that_attempts_task_state(submit, agents):
    """F2: reading attempt 0's log of a task now running attempt 1 answered "state": "running" (the current
    attempt's). A past attempt's task has ended: "released" when another task (or no task) ended the attempt,
    "failed" for the task that failed it."""
    job = submit("twice", tasks=2, gpus=8, max_restarts=2)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    t0, t1 = tasks_of(job)
    execution.append_log(t0.node, task_id=t0.pk, attempt=0, offset=0, data="epoch 1\n")
    execution.append_log(t1.node, task_id=t1.pk, attempt=0, offset=0, data="boom\n")
    report(t1, "exited", 50, exit_code=1)  # fails the attempt: the gang is stopped at once (fast recovery)
    report(t0, "exited", 51, signal=15)  # and requeued whole when its survivor has ended (trial 20, F10)
    job.refresh_from_db()
    assert job.state == "pending" and job.attempts == 1, (job.state, job.attempts)
    bind(job, ("n0", EIGHT), ("n1", EIGHT), clock=at(200))
    start_all(job, 201)
    t0, t1 = tasks_of(job)
    assert t0.state == "running"
    old0 = execution.read_log(t0, attempt=0)
    old1 = execution.read_log(t1, attempt=0)
    assert (old0["data"], old0["complete"], old0["state"]) == ("epoch 1\n", True, "released"), old0
    assert (old1["data"], old1["complete"], old1["state"]) == ("boom\n", True, "failed"), old1
    execution.append_log(t0.node, task_id=t0.pk, attempt=1, offset=0, data="resumed\n")
    now = execution.read_log(t0)
    assert (now["attempt"], now["state"], now["complete"]) == (1, "running", False), now


def test_a_queues_held_gpus_are_its_reserved_gpus_not_allocated(submit):
    """F8: a preemptor's reservation on GPUs its victim still runs on in its grace was the queue's `held` on top of the
    victim's used GPUs (the queues chart stacked 6 GPUs in a 4-GPU cluster; the cluster said held 0). A queue's held
    GPUs are those of its jobs' reservations in the cycle's holds (CycleResult.held, what held_gpus counts)."""
    from gpuplatform.models import QueueSample
    from gpuplatform.scheduling.evict import encode_reserved
    from gpuplatform.scheduling.samples import write_samples
    from scheduler.core.snapshot import TaskPlacement

    job = submit("preemptor", tasks=1, gpus=4)
    Job.objects.filter(pk=job.pk).update(reserved=encode_reserved([TaskPlacement("worker", 0, "n0", (0, 1, 2, 3))]))
    metrics = {"schedulable_gpus": 32, "allocated_gpus": 4, "held_gpus": 1, "free_gpus": 27}
    write_samples(metrics, clock=at(0), cycle_number=1, pending=1, held={"n0": (3,)})  # GPUs 0-2: the victim's
    assert QueueSample.objects.get(queue=job.queue, time=at(0)).held == 1
    write_samples(metrics, clock=at(60), cycle_number=2, pending=1, held=None)  # no holds given: every reserved GPU
    assert QueueSample.objects.get(queue=job.queue, time=at(60)).held == 4
