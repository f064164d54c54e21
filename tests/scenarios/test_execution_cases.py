"""Execution cases of ../shared/cases/ at the database level: jobs on node agents (Node.executor "agent"),
their reports applied with execution.report_task_event, heartbeats posted through the API while the cluster
clock (gpuplatform.clock) is the test's, scheduling.failures.detect_failures and store.run_cycle_once at
explicit clocks. Restated from job-time-limit-enforced.yaml, heartbeat-clock-skew.yaml and
gang-start-progress.yaml, each with a variant the files do not have."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone as tz

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models import Count
from gpuplatform.services import issue_api_token
from rest_framework.test import APIClient

from clusterspec.spec import ClusterSpec, NodeSpec, QueueSpec
from gpuplatform import clock, execution, services
from gpuplatform.api.permissions import NODE_AGENT_GROUP
from gpuplatform.models import NodeAgentScope
from gpuplatform.models import Allocation, Event, Job, Node, Task, Team
from gpuplatform.scheduling import store
from gpuplatform.scheduling.failures import detect_failures
from scheduler.core.snapshot import Binding, CycleResult, TaskPlacement

pytestmark = pytest.mark.django_db
T0 = datetime(2024, 5, 1, 8, 0, tzinfo=tz.utc)
FOREVER = ["python3", "-c", "import time; time.sleep(10**6)"]  # runs for hours unless stopped


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def load(nodes: list[str], gpus: int = 8, quota: int = 8) -> None:
    """One queue q (team q) and `nodes`, all run by node agents."""
    services.load_cluster_spec(ClusterSpec("case", nodes=tuple(NodeSpec(n, "H100", gpus) for n in nodes),
                                           queues=(QueueSpec("q", team="q", quotas={"H100": (0, quota, None)}),)))
    Node.objects.update(executor="agent")


def submit(name, tasks=1, gpus=8, submit_at=0.0, **kw) -> Job:
    return services.submit_job(command=FOREVER, team=Team.objects.get(name="q"), queue="q", name=name,
                               roles=[{"name": "worker", "tasks": tasks, "gpus_per_task": gpus}],
                               submitted_at=at(submit_at), **kw)


def pin(job: Job, nodes: list[str], gpus: int = 8, t: float = 0.0) -> None:
    """Bind `job` with task i on nodes[i] (the case's `running:` section)."""
    tasks = tuple(TaskPlacement("worker", i, n, tuple(range(gpus))) for i, n in enumerate(nodes))
    assert store.apply_result(CycleResult(bindings=[Binding(job.pk, tasks, "", 0)]), clock=at(t),
                              cycle_number=1).binds == 1


def tasks_of(job: Job) -> list[Task]:
    return list(Task.objects.filter(job=job).select_related("node").order_by("index"))


def report(task: Task, event: str, t: float, **kw) -> tuple[bool, str]:
    task = Task.objects.select_related("node", "job").get(pk=task.pk)
    return execution.report_task_event(task.node, task_id=task.pk, attempt=task.job.attempts, event=event,
                                       at=at(t), **kw)


def start_all(job: Job, t: float) -> None:
    for task in tasks_of(job):
        assert report(task, "started", t, pid=100 + task.index) == (True, "")


def live(job: Job) -> list[tuple[str, int]]:
    return sorted(Allocation.objects.filter(job=job, released_at__isnull=True).values_list("gpu__node__name",
                                                                                            "gpu__index"))


def check_invariants() -> None:
    """No GPU held twice; no node over its GPU count."""
    assert not (Allocation.objects.filter(released_at__isnull=True).values("gpu_id").annotate(n=Count("id"))
                .filter(n__gt=1).exists())
    for name, count in Node.objects.values_list("name", "gpu_count"):
        assert Allocation.objects.filter(released_at__isnull=True, gpu__node__name=name).count() <= count


# --- job-time-limit-enforced.yaml -------------------------------------------------------------------------

def test_job_time_limit_enforced():
    """job-time-limit-enforced.yaml: capped (8 GPUs, time limit 600 s, grace 30 s) runs a command that would
    run for hours. At t=600 it is stopping (SIGTERM: its agent's action is "stop") with the SIGKILL deadline
    at t=630, with a time_limit event; at t=630 it is failed, reason "time limit", and its GPUs are free:
    the job waiting for them is bound in that same cycle (well before t ~ 700)."""
    load(["n1"])
    capped = submit("capped", time_limit_seconds=600)
    waiting = None
    for t in range(0, 701, 10):
        if t == 10:
            waiting = submit("waiting", submit_at=10)
        store.run_cycle_once(clock=at(t))
        check_invariants()
        if t == 0:
            start_all(capped, 0)
        capped.refresh_from_db()
        if t < 600:
            assert capped.state == "running" and len(live(capped)) == 8, t
        elif t < 630:
            assert (capped.state, capped.stop_target, capped.preempt_deadline) == ("preempting", "failed", at(630))
            assert len(live(capped)) == 8  # SIGTERM sent, the process still has its GPUs
            (stop,) = execution.node_assignments(Node.objects.get(name="n1"), at(t))["tasks"]
            assert (stop["action"], stop["stop_deadline"]) == ("stop", at(630).isoformat())
        else:
            assert capped.state == "failed" and live(capped) == []
        if 10 <= t < 630:
            assert Job.objects.get(pk=waiting.pk).state == "pending"
    assert capped.finished_at == at(630) and "time limit" in capped.end_reason
    event = Event.objects.get(kind="time_limit", job=capped)
    assert event.time == at(600) and event.data["deadline"] == at(630).isoformat()
    assert Event.objects.filter(kind="failed", job=capped, time=at(630)).exists()
    waiting.refresh_from_db()
    assert waiting.state == "admitted" and waiting.bound_at == at(630) and len(live(waiting)) == 8
    (task,) = tasks_of(capped)
    assert (task.state, task.exit_signal, task.end_message) == ("released", None, "")
    # the agent's SIGKILL report arrives after the end: kept on the task (new-user trial 13, F19: it was dropped and
    # the task showed no signal and no end message), nothing else changes
    assert report(task, "exited", 631, signal=9) == (True, "")
    task.refresh_from_db()
    assert (task.state, task.exit_code, task.exit_signal) == ("released", None, 9)
    # ended when the platform counted it ended, the job's end, not the report's later arrival: a task does not end
    # after its job (new-user trial 26, F8)
    assert task.end_message == "was killed by signal 9 (SIGKILL)" and task.ended_at == at(630) == capped.finished_at
    assert Job.objects.get(pk=capped.pk).state == "failed" and Job.objects.get(pk=capped.pk).finished_at == at(630)
    ok, why = report(task, "exited", 632, signal=9)  # once: a repeat is refused and changes nothing
    assert not ok and "already ended" in why


def test_time_limit_on_a_two_node_gang_ends_when_the_last_process_exits():
    """Variant: a 2-node gang hits its 300 s limit (counted from its start at t=20, not its binding at t=0).
    One task exits on SIGTERM at once, the other only at t=337 (inside the 30 s grace): the gang ends failed
    for its time limit at that exit, not at the deadline, blaming no task, and both nodes are free."""
    load(["n1", "n2"], quota=16)
    gang = submit("gang", tasks=2, time_limit_seconds=300)
    for t in range(0, 400, 5):
        store.run_cycle_once(clock=at(t))
        check_invariants()
        gang.refresh_from_db()
        if t == 0:
            assert gang.state == "admitted"
        if t == 20:
            start_all(gang, 20)
        if 20 <= t < 320:
            assert Job.objects.get(pk=gang.pk).state == "running", t
        if t == 320:
            assert (gang.state, gang.stop_target, gang.preempt_deadline) == ("preempting", "failed", at(350))
            first, second = tasks_of(gang)
            assert report(second, "exited", 321, signal=15) == (True, "")
            assert Job.objects.get(pk=gang.pk).state == "preempting" and len(live(gang)) == 16
        if t == 335:
            assert gang.state == "preempting"
            assert report(first, "exited", 337, exit_code=143) == (True, "")
        if t >= 340:
            assert gang.state == "failed" and live(gang) == []
    assert (gang.finished_at, gang.failed_task, gang.exit_code) == (at(337), "", None)
    assert "time limit" in gang.end_reason
    assert Event.objects.get(kind="time_limit", job=gang).time == at(320)


# --- heartbeat-clock-skew.yaml ----------------------------------------------------------------------------

@pytest.fixture
def agent_api():
    """An APIClient with a node-agents token; the cluster clock follows `agent_api.now` (seconds after T0)."""
    User = get_user_model()
    user = User.objects.create_user("node-agent", password="pw")
    user.groups.add(Group.objects.get_or_create(name=NODE_AGENT_GROUP)[0])
    NodeAgentScope.objects.create(user=user, nodes=["*"])  # a trusted agent for every node of this world
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(user)[0]}")
    api.now = 0.0
    clock.use(lambda: at(api.now))
    yield api
    clock.use(None)


def beat(api: APIClient, node: str, skew: float) -> None:
    """A heartbeat posted at the cluster clock's now, carrying the node's own clock (`skew` s off)."""
    answer = api.post(f"/api/v1/nodes/{node}/heartbeat/", {"time": at(api.now + skew).isoformat(), "gpus": []},
                      format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["last_heartbeat"].startswith(at(api.now).isoformat()[:19])
    assert answer.json()["clock_offset_seconds"] == skew


def run_skew_case(agent_api, *, beating_skew: float, silent_skew: float, settings) -> None:
    settings.HEARTBEAT_TIMEOUT_SECONDS, settings.NODE_FAILURE_GRACE_SECONDS = 60, 120
    load(["n0", "n1"], quota=16)
    j0, j1 = submit("j0"), submit("j1")
    pin(j0, ["n0"])
    pin(j1, ["n1"])
    start_all(j0, 0)
    start_all(j1, 0)
    for t in range(0, 1801, 10):
        agent_api.now = t
        if t % 30 == 0:
            beat(agent_api, "n0", beating_skew)
            if t <= 300:
                beat(agent_api, "n1", silent_skew)
        detect_failures(at(t))
        n0, n1 = Node.objects.get(name="n0"), Node.objects.get(name="n1")
        assert n0.state == "ready", f"t={t}: n0 is {n0.state}"
        assert n0.last_heartbeat == at(t - t % 30)  # the server's receive time, whatever the node's clock says
        if t <= 360:
            assert n1.state == "ready", t
        else:
            assert n1.state == "not_ready", t
        j1.refresh_from_db()
        if t < 480:
            assert j1.state == "running" and len(live(j1)) == 8, t
        else:
            assert j1.state == "pending" and live(j1) == [], t
        assert Job.objects.get(pk=j0.pk).state == "running"
    j0.refresh_from_db()
    assert (j0.attempts, j0.started_at) == (0, at(0)) and len(live(j0)) == 8
    assert not Event.objects.filter(node__name="n0", kind__in=("node_not_ready", "node_failed")).exists()
    assert (j1.attempts, j1.not_before) == (1, at(540))
    assert list(Event.objects.filter(node__name="n1", kind__in=("node_not_ready", "node_failed"))
                .order_by("time").values_list("kind", "time")) == [("node_not_ready", at(370)),
                                                                   ("node_failed", at(480))]
    assert Event.objects.get(kind="requeued_after_failure", job=j1).data["failed_tasks"] == [["worker", 0, "n1"]]
    answer = agent_api.get("/api/v1/nodes/n0/assignments/").json()
    assert answer["server_time"] == at(1800).isoformat()  # deadlines are on the server's clock


def test_heartbeat_clock_skew(agent_api, settings):
    """heartbeat-clock-skew.yaml: n0's clock is 200 s slow and it beats every 30 s: it stays ready for 30
    minutes of failure detection (timeout 60 s, grace 120 s) and j0 is never requeued. n1's clock is an hour
    fast; it stops beating after t=300: not_ready at the first check past 360 s, failed at 300 + 60 + 120 =
    480 s and its job requeued whole with backoff (a node time taken for the receive time would have kept it
    'alive' for an hour)."""
    run_skew_case(agent_api, beating_skew=-200, silent_skew=3600, settings=settings)


def test_heartbeat_clock_skew_the_other_way(agent_api, settings):
    """Variant: the beating node's clock is an hour fast (its timestamps always look fresh, and would hide it if
    it went silent), the silent one's 200 s slow (its timestamps look stale at once): neither changes what
    happens, health follows the server's receive times only."""
    run_skew_case(agent_api, beating_skew=3600, silent_skew=-200, settings=settings)


# --- gang-start-progress.yaml -----------------------------------------------------------------------------

NODES32 = [f"n{i:02d}" for i in range(32)]


def test_gang_start_progress(settings):
    """gang-start-progress.yaml: 32 x 1-GPU nodes, a 32-task gang, one task reports started every 15 s (the
    last at t=480), timeout 300 s: the gang is never requeued and is running with 32 tasks at t=480."""
    settings.GANG_START_TIMEOUT_SECONDS = 300
    load(NODES32, gpus=1, quota=32)
    wide = submit("wide", tasks=32, gpus=1)
    for t in range(0, 601, 5):
        if t and t % 15 == 0 and t <= 480:
            bound = Task.objects.filter(job=wide, state="bound").order_by("index").first()
            assert report(bound, "started", t, pid=t) == (True, "")
        store.run_cycle_once(clock=at(t))
        check_invariants()
        wide.refresh_from_db()
        assert wide.attempts == 0, f"t={t}: requeued"
        running = Task.objects.filter(job=wide, state="running").count()
        assert running == min(t // 15, 32)
        assert wide.state == ("running" if t >= 480 else "admitted"), t
    assert wide.started_at == at(480) and wide.bound_at == at(0) and len(live(wide)) == 32
    assert not Event.objects.filter(kind="gang_start_timeout").exists()


def test_gang_whose_tasks_stop_reporting_is_requeued_with_backoff(settings):
    """gang-start-progress.yaml, second expectation: no task of the gang reports started: it is requeued whole
    with backoff when the timeout has passed since its binding, and a late report is refused."""
    settings.GANG_START_TIMEOUT_SECONDS = 300
    load(NODES32, gpus=1, quota=32)
    wide = submit("wide", tasks=32, gpus=1)
    store.run_cycle_once(clock=at(0))
    late = tasks_of(wide)[0]
    store.run_cycle_once(clock=at(299))
    assert Job.objects.get(pk=wide.pk).state == "admitted"
    store.run_cycle_once(clock=at(300))
    wide.refresh_from_db()
    assert (wide.state, wide.attempts, wide.not_before) == ("pending", 1, at(360)) and live(wide) == []
    ok, why = execution.report_task_event(Node.objects.get(name=late.node.name), task_id=late.pk, attempt=0,
                                          event="started", at=at(301))
    assert not ok and "attempt 0 is over" in why
    assert Event.objects.get(kind="gang_start_timeout", job=wide).data["running"] == 0


def test_gang_that_progresses_then_stalls_is_requeued_after_the_timeout_from_its_last_start(settings):
    """Variant: 12 tasks start (every 15 s up to t=180), then nothing. The timeout runs from the last start:
    still admitted at t=479, stopped at t=480 (180 + 300): the 12 started processes are told to stop and the
    gang keeps its GPUs until they have ended (trial 20, F10: every GPU was released at 480 while they ran);
    they end at 485, and it is requeued whole then, every GPU released at once, its backoff from 480; it is
    bound again after the backoff and a report of the old attempt is refused."""
    settings.GANG_START_TIMEOUT_SECONDS = 300
    load(NODES32, gpus=1, quota=32)
    wide = submit("wide", tasks=32, gpus=1, submit_at=-30)
    for t in list(range(0, 470, 15)) + [479, 480]:
        if t and t <= 180 and t % 15 == 0:
            bound = Task.objects.filter(job=wide, state="bound").order_by("index").first()
            assert report(bound, "started", t) == (True, "")
        store.run_cycle_once(clock=at(t))
        check_invariants()
        wide.refresh_from_db()
        if t < 480:
            assert wide.state == "admitted" and len(live(wide)) == 32, t
    assert (wide.state, wide.stop_target, len(live(wide))) == ("preempting", "recover", 32)
    for task in Task.objects.filter(job=wide, state="running").order_by("index"):
        assert report(task, "exited", 485, signal=15) == (True, "")
    wide.refresh_from_db()
    assert (wide.state, wide.attempts, wide.not_before, wide.submitted_at) == ("pending", 1, at(540), at(-30))
    assert live(wide) == [] and set(Allocation.objects.filter(job=wide).values_list("released_at", flat=True)) == {
        at(485)}
    timeout = Event.objects.get(kind="gang_start_timeout", job=wide)
    assert timeout.time == at(485) and timeout.data["running"] == 12 and len(timeout.data["not_running"]) == 20
    store.run_cycle_once(clock=at(539))
    assert Job.objects.get(pk=wide.pk).state == "pending"
    store.run_cycle_once(clock=at(540))
    wide.refresh_from_db()
    assert (wide.state, wide.attempts, wide.bound_at) == ("admitted", 1, at(540))
    assert set(Task.objects.filter(job=wide).values_list("state", flat=True)) == {"bound"}
    old = tasks_of(wide)[0]
    ok, _ = execution.report_task_event(old.node, task_id=old.pk, attempt=0, event="started", at=at(541))
    assert not ok and Task.objects.get(pk=old.pk).state == "bound"
