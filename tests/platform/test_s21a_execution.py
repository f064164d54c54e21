"""New-user trial 21 at the database level. F4: the assignments carry each task's state (an agent starts only a bound
task), and a "started" repeated with the same pid (its answer was lost) is accepted without change while another
start of a running task is refused. F12: after a time limit's SIGKILL the job and its attempt carry the task's
signal (one derivation, diagnosis.attempts.attempt_exit), whichever arrives first, the report or the deadline."""
from __future__ import annotations

import pytest

from gpuplatform import execution
from gpuplatform.models import Attempt, Job, Node
from gpuplatform.scheduling import store
from tests.scenarios.test_execution_cases import at, load, pin, report, start_all, submit, tasks_of

pytestmark = pytest.mark.django_db


def test_assignments_say_each_tasks_state_and_a_second_start_is_refused_but_a_repeat_is_not():
    load(["n1"])
    job = submit("gang")
    pin(job, ["n1"])
    (task,) = tasks_of(job)
    (a,) = execution.node_assignments(Node.objects.get(name="n1"), at(1))["tasks"]
    assert (a["action"], a["state"]) == ("run", "bound")
    assert report(task, "started", 2, pid=4242) == (True, "")
    (a,) = execution.node_assignments(Node.objects.get(name="n1"), at(3))["tasks"]
    assert (a["action"], a["state"]) == ("run", "running")
    # the agent sent its start again (the answer was lost): the same supervisor, accepted, nothing changes
    assert report(task, "started", 4, pid=4242) == (True, "already started (a repeat)")
    task.refresh_from_db()
    assert (task.state, task.pid, task.started_at) == ("running", 4242, at(2))
    # a second copy (another supervisor pid) is refused: its agent stops it
    assert report(task, "started", 5, pid=5151) == (False, "task is running, not bound")
    task.refresh_from_db()
    assert (task.state, task.pid) == ("running", 4242)


def _time_limited(name: str):
    load(["n1"])
    job = submit(name, time_limit_seconds=600)
    store.run_cycle_once(clock=at(0))
    start_all(job, 0)
    store.run_cycle_once(clock=at(600))  # the limit: SIGTERM now, SIGKILL at 630
    assert Job.objects.get(pk=job.pk).state == "preempting"
    return job


def _exits(job):
    job.refresh_from_db()
    attempt = Attempt.objects.get(job=job, number=job.attempts)
    return ((job.failed_task, job.exit_code, job.exit_signal),
            (attempt.failed_task, attempt.exit_code, attempt.signal))


def test_a_time_limits_sigkill_reported_after_the_deadline_reaches_the_job_and_its_attempt():
    """The deadline passes first (the job ends failed at 630), the agent's SIGKILL report follows: the task, the job
    and the attempt all say signal 9, no task blamed (it was the platform's kill)."""
    job = _time_limited("late")
    store.run_cycle_once(clock=at(630))
    assert Job.objects.get(pk=job.pk).state == "failed"
    (task,) = tasks_of(job)
    assert report(task, "exited", 631, signal=9) == (True, "")
    task.refresh_from_db()
    assert (task.state, task.exit_signal) == ("released", 9)
    assert _exits(job) == (("", None, 9), ("", None, 9))


def test_a_time_limits_sigkill_reported_before_the_deadline_reaches_the_job_and_its_attempt():
    """The agent's report comes first (its process ended at the SIGKILL, or already at the SIGTERM): the job ends at
    that report and carries the same exit as its task and attempt."""
    job = _time_limited("early")
    (task,) = tasks_of(job)
    assert report(task, "exited", 629, signal=9) == (True, "")
    assert Job.objects.get(pk=job.pk).state == "failed"
    task.refresh_from_db()
    assert task.exit_signal == 9
    assert _exits(job) == (("", None, 9), ("", None, 9))
