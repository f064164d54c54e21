"""Trial 19b, F9 (docs/diagnosis.md): a task that killed its own supervisor (`kill -9 $PPID`) was reported as the
task SIGKILLed, and the diagnosis gave it the OOM killer's hint ("a SIGKILL the platform did not send: the kernel's OOM
killer is the usual sender"). The agent now reports such an end as lost, naming the supervisor's signal
(tests/agent/test_executor.py checks the agent's side); here, what the server makes of that report."""
from __future__ import annotations

from gpuplatform.models import Attempt, Job
from tests.platform.conftest import alpha, cluster, submit  # noqa: F401  (fixtures)
from tests.platform.test_execution import EIGHT, agents, bind, report, start_all, tasks_of  # noqa: F401

LOST = ("the task supervisor was killed by signal 9 (SIGKILL) before it recorded the task's end (not sent by the "
        "platform: a process of the task, a user's kill or the OOM killer); the task's processes were stopped")


def test_a_killed_supervisor_is_a_lost_task_not_an_oom_hint(submit, agents):
    job = submit("selfkill", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    start_all(job)
    task = tasks_of(job)[0]
    assert report(task, "lost", 3, message=LOST) == (True, "")
    job.refresh_from_db()
    assert job.exit_signal is None and job.exit_code is None
    a = Attempt.objects.filter(job=job).order_by("number").first()
    text = repr(a.diagnosis)
    assert "OOM killer is the usual sender" not in text and "host_oom" != a.category, a.diagnosis
    assert a.category == "unknown" and a.diagnosis["rule"] == "agent-supervisor-killed", a.diagnosis
    assert "supervisor was killed by signal 9" in a.diagnosis["summary"], a.diagnosis


def test_the_same_job_ended_by_a_sigkill_keeps_the_oom_hint(submit, agents):
    """The contrast that shows the test above can fail: the task's own SIGKILL (not the platform's) is diagnosed with
    the hint, as before."""
    job = submit("killed", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    start_all(job)
    assert report(tasks_of(job)[0], "exited", 3, signal=9) == (True, "")
    a = Attempt.objects.filter(job=job).order_by("number").first()
    assert "OOM killer is the usual sender" in repr(a.diagnosis), a.diagnosis
    assert Job.objects.get(pk=job.pk).exit_signal == 9
