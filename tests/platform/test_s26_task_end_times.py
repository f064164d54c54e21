"""New-user trial 26, finding 8: a cancelled job's task ended after its job had finished (job finished_at 19:52:46.760,
task ended_at 46.918: the agent's SIGKILL report arrived after the stop's deadline had ended the job). Times are the
server's clock (execution.reports): a task's ended_at is when the platform counted it ended, its report's arrival, or
the job's end when that came first (its GPUs were released then); a job's finished_at is never before a task of it
ended. The GPU-hour ledger reads the allocations' released_at, which is the job's finished_at."""
from __future__ import annotations

import pytest

from gpuplatform import services
from gpuplatform.models import Allocation, Attempt, Job, Task
from gpuplatform.scheduling import store
from tests.platform.test_execution import (  # noqa: F401  (agents: fixture)
    EIGHT, agents, at, bind, report, start_all, tasks_of,
)

pytestmark = pytest.mark.django_db


def ends(job):
    return dict(Task.objects.filter(job=job).values_list("index", "ended_at"))


def test_a_kill_reported_after_the_jobs_end_is_counted_ended_with_the_job(submit, agents):
    """The trial's case: cancelled, the processes outlive the grace, the cycle at the deadline ends the job; the
    agents' SIGKILL reports arrive later. Each task keeps how it ended, ended_at the job's end, not the report's."""
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    services.cancel_job(job, at=at(100))
    store.run_cycle_once(clock=at(130))
    job.refresh_from_db()
    assert (job.state, job.finished_at) == ("cancelled", at(130))
    t0, t1 = tasks_of(job)
    assert report(t0, "exited", 130.158, signal=9) == (True, "")
    assert report(t1, "lost", 131, message="process gone") == (True, "")
    assert ends(job) == {0: at(130), 1: at(130)}
    assert Task.objects.get(pk=t0.pk).exit_signal == 9  # how it ended is kept
    job.refresh_from_db()
    assert job.finished_at == at(130)
    assert set(Allocation.objects.filter(job=job).values_list("released_at", flat=True)) == {at(130)}
    assert Attempt.objects.get(job=job).ended_at == at(130)


def test_a_task_reported_ended_before_its_end_keeps_the_reports_time(submit, agents):
    """A report that arrives while the job is stopping is the task's end (the job ends with its last one)."""
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    services.cancel_job(job, at=at(100))
    t0, t1 = tasks_of(job)
    report(t0, "exited", 103, signal=15)
    report(t1, "exited", 104.5, exit_code=143)
    job.refresh_from_db()
    assert (job.state, job.finished_at) == ("cancelled", at(104.5))
    assert ends(job) == {0: at(103), 1: at(104.5)}


def test_a_job_ended_by_a_cycle_whose_clock_is_behind_a_report_finishes_after_its_tasks(submit, agents):
    """A cycle reads its clock before its release step; a report committed in between ended a task later than that
    clock. The job the cycle ends (deadline passed) finishes when its last task ended, not before it, and its GPUs
    are released then (the ledger's end)."""
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    services.cancel_job(job, at=at(100))
    t0, _ = tasks_of(job)
    report(t0, "exited", 130.2, signal=9)
    store.run_cycle_once(clock=at(130))
    job.refresh_from_db()
    assert job.state == "cancelled"
    assert job.finished_at >= max(e for e in ends(job).values() if e), (job.finished_at, ends(job))
    assert job.finished_at == at(130.2)
    assert set(Allocation.objects.filter(job=job).values_list("released_at", flat=True)) == {at(130.2)}
    assert Attempt.objects.get(job=job).ended_at == at(130.2)
