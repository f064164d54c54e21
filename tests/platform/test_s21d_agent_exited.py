"""A task lost because its node agent exited (the agent ran with --stop-tasks-on-exit: its supervisor stopped the
task; the next agent reports it lost with cause "agent_exited") is a platform fault, as a lost node is: the gang is
requeued whole through stop_for_fault (survivors stopped first, backoff, no restart spent), the reason naming the
node and that its agent exited, the attempt diagnosed platform:agent_exited naming the node (trial 21: a killed demo
restarted with --keep reported its tasks killed by signal 15; the attempt was diagnosed "unknown" and the job spent a
restart or failed). tests/agent/test_s21d_agent_gone.py checks the agent's side. docs/execution.md, "Faults"."""
from __future__ import annotations

from gpuplatform.models import Attempt, Event, Job
from tests.platform.test_execution import (  # noqa: F401  (agents, clients: fixtures)
    EIGHT, agents, assignments, at, bind, clients, live, report, start_all, tasks_of,
)

GONE = ("the node agent (pid 4242) exited while the task ran; its supervisor stopped the task (the agent runs with "
        "--stop-tasks-on-exit): it ended with signal 15 (SIGTERM)")


def test_a_task_lost_because_its_agent_exited_requeues_the_gang_without_spending_a_restart(submit, agents):
    job = submit("gang", tasks=2, gpus=8, max_restarts=0)  # without restarts left a task's failure ends the job
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    t0, t1 = tasks_of(job)
    assert report(t0, "lost", 50, message=GONE, cause="agent_exited") == (True, "")
    job.refresh_from_db()
    # the survivor on n1 is stopped first (its GPUs stay held until its process ends), as for a lost node
    assert (job.state, job.stop_target, job.restarts, job.preempt_deadline) == ("preempting", "recover", 0, at(80))
    assert job.stop_reason.startswith("agent exited on n0: its node agent exited while task worker[0] ran")
    assert assignments("n1", 51)[t1.pk]["action"] == "stop" and len(live(job)) == 16
    failed = Event.objects.get(job=job, kind="task_failed")
    assert (failed.data["cause"], failed.data["node"], failed.data["restart"]) == ("agent_exited", "n0", False)

    assert report(t1, "exited", 55, signal=15) == (True, "")  # the survivor quit on SIGTERM: released
    job.refresh_from_db()
    assert (job.state, job.restarts, job.attempts, job.not_before, live(job)) == ("pending", 0, 1, at(110), [])
    ev = Event.objects.get(job=job, kind="requeued_after_failure")
    assert ev.data["reason"].startswith("agent exited on n0"), ev.data
    assert (ev.data["cause"], ev.data["node"], ev.data["failed_tasks"]) == ("agent_exited", "n0", [["worker", 0, "n0"]])
    a = Attempt.objects.get(job=job, number=0)
    assert (a.failed, a.category, a.outcome, a.fault_at) == (True, "platform", "requeued", at(50))
    d = a.diagnosis
    assert (d["rule"], d["action"], d["node"]) == ("platform:agent_exited", "retry", "n0"), d
    assert d["summary"].startswith("agent exited on n0"), d
    assert Event.objects.get(job=job, kind="diagnosed").data["rule"] == "platform:agent_exited"


def test_a_lone_task_whose_agent_exited_is_requeued_at_once_with_backoff(submit, agents):
    job = submit("solo", tasks=1, gpus=8, max_restarts=1)
    bind(job, ("n0", EIGHT))
    start_all(job)
    assert report(tasks_of(job)[0], "lost", 30, message=GONE, cause="agent_exited") == (True, "")
    job.refresh_from_db()
    assert (job.state, job.restarts, job.attempts, job.not_before) == ("pending", 0, 1, at(90))
    assert not Event.objects.filter(job=job, kind="restarted").exists()
    assert Attempt.objects.get(job=job, number=0).diagnosis["rule"] == "platform:agent_exited"


def test_a_lost_report_without_a_cause_is_still_the_tasks_failure(submit, agents):
    """Agents before the field send none: as before, the task failed (the contrast of the tests above)."""
    job = submit("old", tasks=1, gpus=8, max_restarts=1)
    bind(job, ("n0", EIGHT))
    start_all(job)
    assert report(tasks_of(job)[0], "lost", 30, message=GONE) == (True, "")
    job.refresh_from_db()
    assert (job.state, job.restarts) == ("pending", 1)  # a restart spent
    assert Event.objects.filter(job=job, kind="restarted").exists()
    assert Attempt.objects.get(job=job, number=0).diagnosis["rule"] != "platform:agent_exited"


def test_the_reports_api_takes_the_cause_of_a_lost_report_only(clients, submit):
    agent = clients["agent"]
    job = submit("api", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    task = tasks_of(job)[0]
    url = "/api/v1/nodes/n0/reports/"
    assert agent.post(url, {"tasks": [{"task": task.pk, "attempt": 0, "event": "started", "pid": 9}]},
                      format="json").json()["tasks"][0]["accepted"]
    for bad in ({"task": task.pk, "attempt": 0, "event": "exited", "signal": 15, "cause": "agent_exited"},
                {"task": task.pk, "attempt": 0, "event": "lost", "message": "x", "cause": "gremlins"}):
        answer = agent.post(url, {"tasks": [bad]}, format="json")
        assert answer.status_code == 400 and "tasks[0].cause" in answer.json(), answer.content
    assert Job.objects.get(pk=job.pk).state == "running"
    answer = agent.post(url, {"tasks": [{"task": task.pk, "attempt": 0, "event": "lost", "message": GONE,
                                         "cause": "agent_exited"}]}, format="json")
    assert answer.status_code == 200 and answer.json()["tasks"][0]["accepted"], answer.content
    job.refresh_from_db()
    assert (job.state, job.restarts, job.attempts) == ("pending", 0, 1)
    assert Attempt.objects.get(job=job, number=0).diagnosis["rule"] == "platform:agent_exited"
