"""New-user trial 22, G7: after a node's agent died under a 2-task gang, the attempt read "...; its other processes:
every task exited 30 s before its grace period ended": which grace period, and why 30 s before? The requeue's reason
now says plainly what happened to the job's other tasks: they were stopped with it (and, past the stop's deadline,
those still running were killed)."""
from __future__ import annotations

from gpuplatform.execution import expire_stops
from gpuplatform.models import Attempt, Event
from gpuplatform.scheduling.failures import detect_failures
from tests.platform.test_execution import (  # noqa: F401  (agents: a fixture)
    EIGHT, agents, at, bind, report, start_all, tasks_of,
)
from tests.platform.test_s20_survivors import beat


def _lose_n0(submit):
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    beat("n0", "n1", t=0)
    beat("n1", t=170)
    detect_failures(at(190))
    return job


def test_the_other_task_that_exits_on_sigterm_is_said_stopped_with_the_job(submit, agents):
    job = _lose_n0(submit)
    _, t1 = tasks_of(job)
    assert report(t1, "exited", 200, signal=15) == (True, "")
    reason = Event.objects.get(job=job, kind="requeued_after_failure").data["reason"]
    assert reason.endswith("; the job's other tasks (worker[1] on n1) were stopped with it"), reason
    assert "grace period" not in reason and "before" not in reason
    summary = Attempt.objects.get(job=job, number=0).diagnosis["summary"]
    assert "grace period" not in summary, summary


def test_one_still_running_at_the_deadline_is_said_killed(submit, agents):
    job = _lose_n0(submit)
    assert expire_stops(at(220)) == [job.pk]
    job.refresh_from_db()
    assert job.pending_reason.endswith("the job's other tasks (worker[1] on n1) were stopped with it; those still "
                                       "running at the stop's deadline were killed"), job.pending_reason
