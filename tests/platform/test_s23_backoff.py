"""The requeue backoff's exponent counts only the attempts that ended in the job's own failure (trial 23: a job
reclaimed three times by the scheduler, then requeued because its node agent exited, was told to wait 8 minutes --
60 s x 2^3 -- on an idle cluster). Evictions the scheduler made never count; a platform fault gets the base backoff
whatever came before; the job's own failures (restarts) keep doubling. lifecycle.requeue_job, docs/execution.md
("Faults")."""
from __future__ import annotations

from gpuplatform.lifecycle import requeue_job
from gpuplatform.models import Attempt, Event, Job
from tests.platform.test_execution import (  # noqa: F401  (agents, clients: fixtures)
    EIGHT, agents, at, bind, clients, report, start_all, tasks_of,
)
from tests.platform.test_s21d_agent_exited import GONE


def run_once(job, t: float) -> None:
    bind(job, ("n0", EIGHT), clock=at(t))
    start_all(job, t)


def reclaim(job, t: float) -> None:
    """The scheduler's own eviction ending: requeued whole, no backoff (as stops.finish_stop does)."""
    assert requeue_job(job.pk, at=at(t), kind="preempted", reason="reclaimed by q2", backoff=False)


def test_reclaims_do_not_lengthen_the_backoff_of_a_platform_fault(submit, agents):
    job = submit("seven", tasks=1, gpus=8, max_restarts=0)
    for i in range(3):
        run_once(job, 100 * i)
        reclaim(job, 100 * i + 50)
    run_once(job, 300)
    assert report(tasks_of(job)[0], "lost", 330, message=GONE, cause="agent_exited") == (True, "")
    job.refresh_from_db()
    assert (job.state, job.attempts, job.restarts) == ("pending", 4, 0)
    assert job.not_before == at(390)  # the base 60 s, not 60 x 2^3
    ev = Event.objects.get(job=job, kind="requeued_after_failure")
    assert "attempt 4" in ev.message and "retries at " in ev.message and "T12:06:30Z" in ev.message, ev.message
    assert list(Attempt.objects.filter(job=job).values_list("outcome", flat=True)) == ["requeued"] * 4


def test_the_jobs_own_failures_keep_doubling_and_a_later_platform_fault_gets_the_base(submit, agents):
    job = submit("flaky", tasks=1, gpus=8, max_restarts=3)
    run_once(job, 0)
    report(tasks_of(job)[0], "exited", 10, exit_code=1)  # its own failure 1: 60 s
    job.refresh_from_db()
    assert (job.state, job.restarts, job.not_before) == ("pending", 1, at(70))
    run_once(job, 100)
    reclaim(job, 150)  # the scheduler's eviction: no backoff, and not counted below
    run_once(job, 200)
    report(tasks_of(job)[0], "exited", 210, exit_code=1)  # its own failure 2: 120 s
    job.refresh_from_db()
    assert (job.state, job.restarts, job.attempts, job.not_before) == ("pending", 2, 3, at(330))
    run_once(job, 400)
    assert report(tasks_of(job)[0], "lost", 410, message=GONE, cause="agent_exited") == (True, "")
    job.refresh_from_db()  # a platform fault: the base 60 s, not doubled by the two failures before it
    assert (job.state, job.restarts, job.attempts, job.not_before) == ("pending", 2, 4, at(470))
    run_once(job, 500)
    report(tasks_of(job)[0], "exited", 510, exit_code=1)  # its own failure 3: 240 s
    job.refresh_from_db()
    assert (job.state, job.restarts, job.attempts, job.not_before) == ("pending", 3, 5, at(750))
    assert Job.objects.get(pk=job.pk).not_before == at(750)


def test_the_backoff_of_own_failures_stops_at_the_cap(settings):
    from gpuplatform.lifecycle import backoff_seconds
    settings.REQUEUE_BACKOFF_SECONDS, settings.REQUEUE_BACKOFF_CAP_SECONDS = 60, 3600
    assert [backoff_seconds(n) for n in range(1, 9)] == [60, 120, 240, 480, 960, 1920, 3600, 3600]
