"""New-user trial 22, G8: in `make demo-local`, a kill -9 of one gpu_agent stopped its tasks within 3 s (their
supervisors watch it), and the demo said so, but the job stayed `running` in the API for ~3.5 min, until heartbeat
expiry (60 s + 120 s) found the node. The demo now reports the exit at once through failures.agent_exited: the node
goes not_ready and the gang is requeued as a lost node's is, within the same second."""
from __future__ import annotations

from gpuplatform.models import Attempt, Event, Node
from gpuplatform.scheduling.failures import agent_exited, detect_failures
from tests.platform.test_execution import (  # noqa: F401  (agents: a fixture)
    EIGHT, agents, assignments, at, bind, report, start_all, tasks_of,
)
from tests.platform.test_s20_survivors import beat


def test_an_agent_exit_requeues_a_gang_wholly_on_its_node_at_once(submit, agents):
    job = submit("solo", tasks=2, gpus=4)
    bind(job, ("n0", [0, 1, 2, 3]), ("n0", [4, 5, 6, 7]))
    start_all(job)
    beat("n0", "n1", t=0)
    found = agent_exited("n0", at=at(5), message="the local demo saw its process end")
    assert (found.not_ready, found.failed_nodes, found.requeued, found.stopping) == (["n0"], ["n0"], [job.pk], [])
    job.refresh_from_db()
    assert (job.state, job.attempts, job.restarts) == ("pending", 1, 0)  # within the second, no restart spent
    node = Node.objects.get(name="n0")
    assert (node.state, node.state_reason) == ("not_ready", "node agent exited (the local demo saw its process end)")
    assert Event.objects.filter(kind="node_not_ready", node=node).count() == 1
    assert Event.objects.get(kind="node_failed", node=node).data == {"jobs": [job.pk], "cause": "agent_exited"}
    ev = Event.objects.get(job=job, kind="requeued_after_failure")
    assert ev.data["cause"] == "agent_exited" and ev.data["node"] == "n0"
    assert ev.data["reason"] == ("agent exited on n0: its node agent exited while tasks worker[0], worker[1] ran, "
                                 "and they were stopped")
    a = Attempt.objects.get(job=job, number=0)
    assert (a.outcome, a.failed, a.diagnosis["rule"], a.diagnosis["node"]) == ("requeued", True,
                                                                               "platform:agent_exited", "n0")
    # said once: a second report, and heartbeat expiry later, write nothing more
    again = agent_exited("n0", at=at(6))
    assert again.not_ready == [] and again.requeued == []
    later = detect_failures(at(400))
    assert later.requeued == [] and Event.objects.filter(job=job, kind="requeued_after_failure").count() == 1
    # a new agent's registration (a heartbeat) brings the node back
    beat("n0", t=410)
    assert Node.objects.get(name="n0").state == "ready"


def test_the_survivor_on_a_healthy_node_is_stopped_first(submit, agents):
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    beat("n0", "n1", t=0)
    found = agent_exited("n0", at=at(5))
    assert (found.requeued, found.stopping) == ([], [job.pk])
    job.refresh_from_db()
    assert (job.state, job.stop_target) == ("preempting", "recover")
    t0, t1 = tasks_of(job)
    assert (t0.state, t1.state) == ("released", "running")
    assert assignments("n1", 6)[t1.pk]["action"] == "stop"
    assert report(t1, "exited", 8, signal=15) == (True, "")
    job.refresh_from_db()
    assert job.state == "pending"
    assert Event.objects.get(job=job, kind="requeued_after_failure").data["reason"] == (
        "agent exited on n0: its node agent exited while task worker[0] ran, and the task was stopped; the job's "
        "other tasks (worker[1] on n1) were stopped with it")
