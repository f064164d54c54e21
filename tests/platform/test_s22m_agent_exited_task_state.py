"""Trial 22, F5: the task a node agent reported lost with cause agent_exited was recorded `failed` while its attempt
was diagnosed platform:agent_exited and the gang requeued without a restart spent. The task vocabulary has no `lost`
(a new state is a migration); the state it has for a task the platform ended, not the task itself, is `released`, as
a lost node's tasks are (stops.end_lost_tasks): the task is `released`, its end message the agent's words, in the
API, gpuctl and the job page; the attempt blames no task and its fault is still the report's time."""
from __future__ import annotations

import html
import re

from gpuplatform.cli import _task_end
from gpuplatform.models import Attempt, Job, Task
from tests.platform.test_execution import (  # noqa: F401  (agents, clients: fixtures)
    EIGHT, agents, at, bind, clients, report, start_all, tasks_of,
)

GONE = ("the node agent (pid 4242) exited while the task ran; its supervisor stopped the task (the agent runs with "
        "--stop-tasks-on-exit): it ended with signal 15 (SIGTERM)")


def test_the_task_whose_agent_exited_is_released_not_failed(submit, clients, client):
    job = submit("gang", tasks=2, gpus=8, max_restarts=1)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    t0, t1 = tasks_of(job)
    assert report(t0, "lost", 50, message=GONE, cause="agent_exited") == (True, "")
    lost = Task.objects.get(pk=t0.pk)
    assert (lost.state, lost.end_message, lost.ended_at) == ("released", GONE[:200], at(50))
    assert report(t1, "exited", 55, signal=15) == (True, "")
    job.refresh_from_db()
    assert (job.state, job.restarts, job.failed_task) == ("pending", 0, "")
    attempt = Attempt.objects.get(job=job, number=0)
    assert (attempt.category, attempt.failed, attempt.failed_task, attempt.fault_at) == ("platform", True, "", at(50))
    assert attempt.diagnosis["rule"] == "platform:agent_exited"

    # the API and gpuctl say the same (the job is requeued: its tasks are the next attempt's, the past one's log read
    # names the state it ended in)
    member = clients["member"]
    page = member.get(f"/api/v1/jobs/{job.pk}/logs/", {"task": "worker-0", "attempt": 0}).json()
    assert page["state"] == "released", page
    assert _task_end({"state": "released", "end_message": GONE}, "pending") == f"released, {GONE}"


def test_while_the_gang_stops_the_api_and_the_page_show_the_task_released(submit, clients, client):
    job = submit("gang2", tasks=2, gpus=8, max_restarts=1)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    t0, _ = tasks_of(job)
    assert report(t0, "lost", 50, message=GONE, cause="agent_exited") == (True, "")
    assert Job.objects.get(pk=job.pk).state == "preempting"  # its survivor on n1 is being stopped
    body = clients["member"].get(f"/api/v1/jobs/{job.pk}/").json()
    states = {t["name"] if "name" in t else f"{t['role']}-{t['index']}": t["state"] for t in body["tasks"]}
    assert sorted(states.values()) == ["released", "running"], body["tasks"]
    from django.contrib.auth import get_user_model

    client.force_login(get_user_model().objects.get(username="mike"))
    text = html.unescape(client.get(f"/jobs/{job.pk}/").content.decode())
    row = re.search(rf'<tr data-task="{t0.pk}">(.*?)</tr>', text, re.S).group(1)
    assert "badge-released" in row and "badge-failed" not in row and GONE[:60] in row, row


def test_a_lost_report_without_a_cause_is_still_failed(submit, agents):
    job = submit("old", tasks=1, gpus=8, max_restarts=0)
    bind(job, ("n0", EIGHT))
    start_all(job)
    assert report(tasks_of(job)[0], "lost", 30, message=GONE) == (True, "")
    assert Task.objects.get(pk=tasks_of(job)[0].pk).state == "failed"
