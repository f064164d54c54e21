"""New-user trial 26, F3: after a restart, while the new attempt had printed nothing, GET /jobs/{id}/logs/ served
the previous attempt ("attempt": 0, complete, state failed), so `gpuctl logs --follow` printed it and ended at once,
exit 0, while the job ran on. docs/execution.md: left out, `attempt` is the current attempt. The default read is the
current attempt, empty with a note that says where the earlier attempt's output is; ?attempt=0 still serves it."""
from __future__ import annotations

from gpuplatform import execution, services
from gpuplatform.models import Job, Task

from tests.platform.test_execution import (  # noqa: F401  (agents, clients: fixtures)
    EIGHT, agents, bind, clients, log, report, start_all, tasks_of,
)


def restarted(submit, *, output: str = "attempt-zero-output\n"):
    """A job whose attempt 0 printed `output` and failed (exit 3) and whose attempt 1 runs, silent so far."""
    job = submit("gang", tasks=1, gpus=8, max_restarts=1)
    bind(job, ("n0", EIGHT))
    start_all(job)
    (task,) = tasks_of(job)
    if output:
        assert log(task, 0, output)[0]
    report(task, "exited", 10, exit_code=3)
    job.refresh_from_db()
    assert (job.state, job.attempts) == ("pending", 1)
    return job, task


def test_the_default_read_is_the_current_attempt_even_before_it_prints(submit, agents):
    job, task = restarted(submit)
    pending = execution.read_log(Task.objects.get(pk=task.pk))
    assert (pending["attempt"], pending["data"], pending["complete"], pending["state"]) == (1, "", False, "pending")
    assert pending["note"] == (f"task worker-0 has not started yet (not placed on a node): no output so far; attempt 0 "
                               f"has 20 bytes of output: ask for attempt=0 (gpuctl logs {job.pk} --attempt 0)")
    bind(Job.objects.get(pk=job.pk), ("n1", EIGHT))
    start_all(job, 20)
    page = execution.read_log(Task.objects.get(pk=task.pk))
    assert (page["attempt"], page["size"], page["complete"], page["state"]) == (1, 0, False, "running")
    assert page["note"].startswith("task worker-0 has written no output yet; attempt 0 has 20 bytes")
    old = execution.read_log(Task.objects.get(pk=task.pk), attempt=0)  # asked for: the earlier attempt
    assert (old["attempt"], old["data"], old["complete"], old["state"]) == (0, "attempt-zero-output\n", True, "failed")
    assert log(Task.objects.get(pk=task.pk), 0, "attempt one\n", attempt=1)[0]
    page = execution.read_log(Task.objects.get(pk=task.pk))
    assert (page["attempt"], page["data"], page["note"]) == (1, "attempt one\n", "")


def test_a_restart_with_no_earlier_output_says_no_more_than_before(submit, agents):
    job, task = restarted(submit, output="")
    page = execution.read_log(Task.objects.get(pk=task.pk))
    assert (page["attempt"], page["note"]) == (1, "task worker-0 has not started yet (not placed on a node): no "
                                                  "output so far")


def test_the_logs_api_serves_the_running_attempt_and_an_asked_for_old_one(submit, clients):
    job, task = restarted(submit)
    bind(Job.objects.get(pk=job.pk), ("n1", EIGHT))
    start_all(job, 20)
    answer = clients["member"].get(f"/api/v1/jobs/{job.pk}/logs/")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["attempt"], body["data"], body["complete"], body["state"]) == (1, "", False, "running")
    old = clients["member"].get(f"/api/v1/jobs/{job.pk}/logs/?attempt=0").json()
    assert (old["attempt"], old["data"], old["complete"], old["state"]) == (0, "attempt-zero-output\n", True, "failed")
    # cancelled during its grace period: still attempt 1, not complete until its process has ended
    services.cancel_job(Job.objects.get(pk=job.pk), reason="done")
    during = clients["member"].get(f"/api/v1/jobs/{job.pk}/logs/").json()
    assert (during["attempt"], during["complete"]) == (1, False)
    report(Task.objects.get(pk=task.pk), "exited", 30, signal=15)
    after = clients["member"].get(f"/api/v1/jobs/{job.pk}/logs/").json()
    assert Job.objects.get(pk=job.pk).state == "cancelled"
    assert (after["attempt"], after["complete"]) == (1, True)
