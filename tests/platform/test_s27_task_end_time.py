"""Session 27: a task's end is when its process ended on the node, as its agent says (`time` of an exited / lost
report, epoch seconds on the node's clock), moved onto the server's clock by the node's clock offset and clamped to
[the task's start, the report's arrival]; not the late arrival of the report (docs/execution.md)."""
from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timedelta, timezone as tz
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from gpuplatform import clock, execution, services
from gpuplatform.api.permissions import NODE_AGENT_GROUP
from gpuplatform.models import Allocation, Gpu, Job, Node, NodeAgentScope, SchedulerCycle, Task
from gpuplatform.scheduling import store
from gpuplatform.services import issue_api_token
from scheduler.core.snapshot import Binding, CycleResult, TaskPlacement

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)
EIGHT = tuple(range(8))


def at(seconds: float) -> datetime:
    return CLOCK + timedelta(seconds=seconds)


def epoch(seconds: float, offset: float = 0.0) -> float:
    """The node's clock (epoch seconds) at cluster time `seconds`, for a node `offset` s ahead of the server."""
    return at(seconds).timestamp() + offset


@pytest.fixture
def agents(cluster):
    for i, name in enumerate(Node.objects.order_by("name").values_list("name", flat=True)):
        Node.objects.filter(name=name).update(executor="agent", address=f"10.0.0.{i + 1}")
    for pk, node, index in Gpu.objects.values_list("pk", "node__name", "index"):
        Gpu.objects.filter(pk=pk).update(uuid=f"GPU-{node}-{index}")
    return cluster


def bind(job, *placements):
    tasks = tuple(TaskPlacement("worker", i, *p) for i, p in enumerate(placements))
    stats = store.apply_result(CycleResult(bindings=[Binding(job.pk, tasks, "", 0)]), clock=CLOCK,
                               cycle_number=SchedulerCycle.objects.count() + 1)
    assert stats.binds == 1, stats.stale


def tasks_of(job) -> list[Task]:
    return list(Task.objects.filter(job=job).select_related("node").order_by("index"))


def report(task: Task, event: str, t: float, **kw):
    node = Task.objects.get(pk=task.pk).node
    attempt = Job.objects.get(pk=task.job_id).attempts
    return execution.report_task_event(node, task_id=task.pk, attempt=attempt, event=event, at=at(t), **kw)


def started_job(submit, *placements, t: float = 10.0):
    job = submit("gang", tasks=len(placements), gpus=8)
    bind(job, *placements)
    for task in tasks_of(job):
        assert report(task, "started", t, pid=1000 + task.index) == (True, "")
    return job


def ends(job):
    job.refresh_from_db()
    return (job.state, job.finished_at,
            sorted(set(Allocation.objects.filter(job=job).values_list("released_at", flat=True))),
            [t.ended_at for t in tasks_of(job)])


@pytest.mark.parametrize("offset", [None, 0.0, 120.0, -45.5])
def test_a_late_exit_ends_the_task_its_gpus_and_the_job_when_it_ended_on_the_node(submit, agents, offset):
    """The report arrives at 100; the process ended 30 s before (70 on the server's clock): ended_at, the GPUs'
    released_at and the job's finished_at are 70, with the node's clock off by `offset` (None: not measured)."""
    job = started_job(submit, ("n0", EIGHT))
    Node.objects.filter(name="n0").update(clock_offset_seconds=offset)
    (task,) = tasks_of(job)
    assert report(task, "exited", 100, exit_code=0, node_time=epoch(70, offset or 0.0)) == (True, "")
    assert ends(job) == ("succeeded", at(70), [at(70)], [at(70)])
    assert Task.objects.get(pk=task.pk).state == "succeeded"


def test_a_gang_ends_at_its_last_process_end_and_a_failure_stops_the_survivors_from_the_arrival(submit, agents):
    job = started_job(submit, ("n0", EIGHT), ("n1", EIGHT))
    Node.objects.update(clock_offset_seconds=2.0)
    t0, t1 = tasks_of(job)
    # worker[0] failed at 50, reported at 80: its end is 50; the survivor's stop (grace 30 s) counts from the arrival
    assert report(t0, "exited", 80, exit_code=3, node_time=epoch(50, 2.0)) == (True, "")
    job.refresh_from_db()
    assert (job.state, job.preempt_deadline) == ("preempting", at(110))
    assert Task.objects.get(pk=t0.pk).ended_at == at(50)
    # worker[1] ended on the SIGTERM at 85, reported at 95: the job fails at 85, its GPUs released then
    assert report(t1, "exited", 95, signal=15, node_time=epoch(85, 2.0)) == (True, "")
    assert ends(job) == ("failed", at(85), [at(85)], [at(50), at(85)])


def test_a_lost_report_with_a_time_ends_the_task_then(submit, agents):
    job = started_job(submit, ("n0", EIGHT))
    Node.objects.filter(name="n0").update(clock_offset_seconds=0.0)
    (task,) = tasks_of(job)
    assert report(task, "lost", 300, message="agent restarted; process gone, no exit status",
                  node_time=epoch(200)) == (True, "")
    state, finished, released, ended = ends(job)
    assert ended == [at(200)] and finished == at(200) and released == [at(200)]


@pytest.mark.parametrize("node_t, expected", [
    (130.0, 100.0),  # in the future of the arrival: the arrival
    (5.0, 10.0),  # before the task started (10): its start
    (-400 * 86400.0, 10.0),  # far before, the offset known: its start
])
def test_a_time_after_the_arrival_or_before_the_start_is_clamped(submit, agents, node_t, expected):
    job = started_job(submit, ("n0", EIGHT), t=10.0)
    Node.objects.filter(name="n0").update(clock_offset_seconds=0.0)
    (task,) = tasks_of(job)
    assert report(task, "exited", 100, exit_code=0, node_time=epoch(node_t)) == (True, "")
    assert ends(job) == ("succeeded", at(expected), [at(expected)], [at(expected)])


def test_without_an_offset_a_time_beyond_the_clock_bound_is_not_trusted(submit, agents, settings):
    settings.NODE_CLOCK_MAX_OFFSET_SECONDS = 3600
    job = started_job(submit, ("n0", EIGHT), ("n1", EIGHT))
    Node.objects.update(clock_offset_seconds=None)
    t0, t1 = tasks_of(job)
    assert report(t0, "exited", 100, exit_code=0, node_time=epoch(100 - 7200)) == (True, "")  # 2 h off: arrival
    assert report(t1, "exited", 101, exit_code=0, node_time=epoch(101 + 7200)) == (True, "")  # 2 h ahead: arrival
    assert ends(job) == ("succeeded", at(101), [at(101)], [at(100), at(101)])


def test_a_report_without_a_time_ends_the_task_at_its_arrival_as_before(submit, agents):
    job = started_job(submit, ("n0", EIGHT))
    Node.objects.filter(name="n0").update(clock_offset_seconds=-3.0)
    (task,) = tasks_of(job)
    assert report(task, "exited", 100, exit_code=0) == (True, "")
    assert ends(job) == ("succeeded", at(100), [at(100)], [at(100)])


def test_a_task_released_with_its_jobs_end_keeps_the_earlier_of_its_end_and_the_jobs(submit, agents):
    """A cancel's deadline passed at 60 (the job cancelled, its GPUs released); the process ended at 50 on the node,
    reported at 90: ended_at 50 (no later than finished_at, as before); one ending after the job's end keeps 60."""
    from gpuplatform.execution.stops import expire_stops

    job = started_job(submit, ("n0", EIGHT), ("n1", EIGHT))
    Node.objects.update(clock_offset_seconds=0.0)
    services.cancel_job(job, at=at(30))
    job.refresh_from_db()
    assert job.state == "preempting"
    expire_stops(job.preempt_deadline)
    job.refresh_from_db()
    assert job.state == "cancelled"
    finished = job.finished_at
    t0, t1 = tasks_of(job)
    Task.objects.filter(job=job).update(ended_at=None)
    assert report(t0, "exited", 900, signal=9, node_time=(finished - timedelta(seconds=5)).timestamp()) == (True, "")
    assert report(t1, "exited", 900, signal=9, node_time=(finished + timedelta(seconds=5)).timestamp()) == (True, "")
    assert [t.ended_at for t in tasks_of(job)] == [finished - timedelta(seconds=5), finished]


# --- the API --------------------------------------------------------------------------------------------------

@pytest.fixture
def agent_client(agents):
    user = get_user_model().objects.create_user("node-agent", password="pw")
    user.groups.add(Group.objects.get_or_create(name=NODE_AGENT_GROUP)[0])
    NodeAgentScope.objects.create(user=user, nodes=["*"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(user)[0]}")
    return client


@pytest.fixture
def arrival():
    """The cluster clock at 100 s for the API's requests."""
    clock.use(lambda: at(100))
    yield at(100)
    clock.use(None)


def test_the_api_takes_the_time_and_moves_it_by_the_nodes_offset(submit, agent_client, arrival):
    job = started_job(submit, ("n0", EIGHT))
    Node.objects.filter(name="n0").update(clock_offset_seconds=10.0)  # the node is 10 s ahead
    (task,) = tasks_of(job)
    answer = agent_client.post("/api/v1/nodes/n0/reports/", {"tasks": [
        {"task": task.pk, "attempt": 0, "event": "exited", "exit_code": 0, "time": epoch(70, 10.0)}]}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["tasks"][0]["accepted"] is True
    assert ends(job) == ("succeeded", at(70), [at(70)], [at(70)])


def test_the_api_without_a_time_keeps_the_arrival(submit, agent_client, arrival):
    job = started_job(submit, ("n0", EIGHT))
    (task,) = tasks_of(job)
    answer = agent_client.post("/api/v1/nodes/n0/reports/", {"tasks": [
        {"task": task.pk, "attempt": 0, "event": "exited", "exit_code": 0, "time": None}]}, format="json")
    assert answer.status_code == 200, answer.content
    assert ends(job) == ("succeeded", at(100), [at(100)], [at(100)])


@pytest.mark.parametrize("bad", [True, "soon", -1, 1e12, "nan", "inf", "-Infinity", [1], {"t": 1}])
def test_a_bad_time_is_a_400_naming_it_and_changes_nothing(submit, agent_client, arrival, bad):
    job = started_job(submit, ("n0", EIGHT))
    (task,) = tasks_of(job)
    answer = agent_client.post("/api/v1/nodes/n0/reports/", {"tasks": [
        {"task": task.pk, "attempt": 0, "event": "exited", "exit_code": 0, "time": bad}]}, format="json")
    assert answer.status_code == 400 and "tasks[0].time" in answer.json(), answer.content
    assert Task.objects.get(pk=task.pk).state == "running" and Job.objects.get(pk=job.pk).state == "running"


def test_a_started_report_with_a_time_is_not_refused_and_the_time_is_ignored(submit, agent_client, arrival):
    job = submit("one", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    (task,) = tasks_of(job)
    answer = agent_client.post("/api/v1/nodes/n0/reports/", {"tasks": [
        {"task": task.pk, "attempt": 0, "event": "started", "pid": 7, "time": epoch(20)}]}, format="json")
    assert answer.status_code == 200 and answer.json()["tasks"][0]["accepted"] is True
    assert Task.objects.get(pk=task.pk).started_at == at(100)


# --- the agent ------------------------------------------------------------------------------------------------

@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the executor is Linux only")
def test_the_executors_end_report_carries_when_the_process_ended(tmp_path):
    from gpuplatform.agent.executor import ProcessExecutor
    from tests.agent.proc_helpers import assignment, wait_ended

    ex = ProcessExecutor(str(tmp_path / "agent"), supervisor_grace=0.5)
    before = time.time()
    assert ex.start(assignment(1, "exit 3")) == "started"
    wait_ended(ex, [(1, 0)])
    after = time.time()
    data = json.loads((Path(ex.task_dir((1, 0))) / "exit.json").read_text())
    assert data["exit_code"] == 3 and before <= data["ended_at"] <= after
    (end,) = [e for e in ex.unreported() if e["event"] == "exited"]
    assert end == {"task": 1, "attempt": 0, "event": "exited", "exit_code": 3, "signal": None,
                   "time": data["ended_at"]}
    # a new agent on the same directory, the report still due: the supervisor's time, not the restart's
    time.sleep(0.05)
    again = ProcessExecutor(ex.work_dir)
    again.recover()
    (end,) = [e for e in again.unreported() if e["event"] == "exited"]
    assert end["time"] == data["ended_at"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the executor is Linux only")
def test_a_supervisor_gone_without_a_time_reports_when_it_was_found(tmp_path):
    """exit.json of an older supervisor (no "ended_at"), read by a new agent: the time it found the end."""
    from gpuplatform.agent.executor import ProcessExecutor
    from tests.agent.proc_helpers import assignment, wait_for

    ex = ProcessExecutor(str(tmp_path / "agent"), supervisor_grace=0.5)
    assert ex.start(assignment(2, "exit 0")) == "started"
    exit_json = Path(ex.task_dir((2, 0))) / "exit.json"
    wait_for(exit_json.exists)
    wait_for(lambda: not ex._supervisor_alive(ex.meta((2, 0))))
    exit_json.write_text(json.dumps({"exit_code": 0}))
    before = time.time()
    again = ProcessExecutor(ex.work_dir)
    again.recover()
    (end,) = [e for e in again.unreported() if e["event"] == "exited"]
    assert before <= end["time"] <= time.time() and end["exit_code"] == 0


def test_the_agent_drops_the_time_once_an_older_server_refuses_it():
    """Version skew: a server before the field refuses it (a 400 naming tasks[0].time); the agent sends the same end
    again without it, as it does for `cause` (tests/agent/test_s22m_cause_skew.py)."""
    from gpuplatform.agent.runner import AgentLoop
    from tests.agent.test_s22m_cause_skew import OldServer, Outbox

    server = OldServer()
    try:
        outbox = Outbox([{"task": 3, "attempt": 0, "event": "exited", "exit_code": 0, "signal": None, "time": 1.7e9}])
        loop = AgentLoop(server.url, "t", "n0", lambda: [], outbox, resources=(1000, 1024), timeout=5)
        assert loop.report() is True
        assert loop.send_time is False and len(server.calls) == 2
        assert server.calls[0]["tasks"][0]["time"] == 1.7e9 and "time" not in server.calls[1]["tasks"][0]
        assert outbox.reported == [(3, 0, "exited")]
    finally:
        server.server.shutdown()
        server.server.server_close()
