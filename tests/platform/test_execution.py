"""Execution on node agents at the database level (docs/execution.md): what a submission must carry, how
tasks on agent nodes are bound, the assignments an agent reads, the reports it sends (started / exited /
lost), stops with a deadline (task failure, restart, success, completion role, cancel, time limit), task
logs, and the REST endpoints the agent and the users call. No agent process: reports are applied with
execution.report_task_event / the API, cycles with store.run_cycle_once at explicit cluster times."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone as tz

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from gpuplatform.services import issue_api_token
from rest_framework.test import APIClient

from gpuplatform import execution, services
from gpuplatform.api.permissions import NODE_AGENT_GROUP
from gpuplatform.models import NodeAgentScope
from gpuplatform.execution.assignments import master_port
from gpuplatform.models import (
    Allocation, Event, Gpu, Job, JobRole, Node, Queue, SchedulerCycle, Task, TaskLog, Team,
)
from gpuplatform.services import ValidationError
from gpuplatform.scheduling import store
from scheduler.core.snapshot import Binding, CycleResult, TaskPlacement

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)
SLEEP = ["sleep", "3600"]
PLATFORM_VARS = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
                 "RANK", "NODE_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GPUPLATFORM_JOB_ID", "GPUPLATFORM_ROLE",
                 "GPUPLATFORM_TASK_INDEX", "GPUPLATFORM_QUEUE", "GPUPLATFORM_ATTEMPT")


def at(seconds: float) -> datetime:
    return CLOCK + timedelta(seconds=seconds)


@pytest.fixture
def agents(cluster):
    """Every node of the small cluster is run by a node agent, with an address and GPU UUIDs."""
    for i, name in enumerate(Node.objects.order_by("name").values_list("name", flat=True)):
        Node.objects.filter(name=name).update(executor="agent", address=f"10.0.0.{i + 1}")
    for pk, node, index in Gpu.objects.values_list("pk", "node__name", "index"):
        Gpu.objects.filter(pk=pk).update(uuid=f"GPU-{node}-{index}")
    return cluster


def bind(job, *placements, clock=CLOCK):
    """Bind `job` through apply_result: each placement is (node, gpus) for worker[i] in order, or
    (role, index, node, gpus)."""
    tasks = tuple(TaskPlacement(*p) if len(p) == 4 else TaskPlacement("worker", i, *p)
                  for i, p in enumerate(placements))
    stats = store.apply_result(CycleResult(bindings=[Binding(job.pk, tasks, "", 0)]), clock=clock,
                               cycle_number=SchedulerCycle.objects.count() + 1)
    assert stats.binds == 1, stats.stale


EIGHT = tuple(range(8))


def tasks_of(job) -> list[Task]:
    return list(Task.objects.filter(job=job).select_related("node", "role").order_by("role_id", "index"))


def report(task: Task, event: str, t: float = 0.0, *, attempt: int | None = None, node=None, **kw):
    """Node agent report of `task` (by default from its node, for the job's current attempt) at cluster time t."""
    attempt = Job.objects.get(pk=task.job_id).attempts if attempt is None else attempt
    node = node or Task.objects.get(pk=task.pk).node
    return execution.report_task_event(node, task_id=task.pk, attempt=attempt, event=event, at=at(t), **kw)


def start_all(job, t: float = 0.0) -> None:
    for task in tasks_of(job):
        assert report(task, "started", t, pid=1000 + task.index) == (True, "")


def live(job) -> list[tuple[str, int]]:
    return sorted(Allocation.objects.filter(job=job, released_at__isnull=True).values_list("gpu__node__name",
                                                                                            "gpu__index"))


def assignments(node: str, t: float = 0.0) -> dict[int, dict]:
    answer = execution.node_assignments(Node.objects.get(name=node), at(t))
    return {a["task"]: a for a in answer["tasks"]}


def state(job) -> tuple:
    """Everything a refused report must leave alone."""
    return (list(Job.objects.filter(pk=job.pk).values()), list(Task.objects.filter(job=job).order_by("pk").values()),
            Event.objects.count(), sorted(Allocation.objects.filter(job=job).values_list("pk", "released_at")))


# --- submission ------------------------------------------------------------------------------------------

def counts() -> dict[str, int]:
    return {m.__name__: m.objects.count() for m in (Job, JobRole, Task, Event, Allocation)}


def worker(**kw) -> dict:
    return {"name": "worker", "tasks": 2, "gpus_per_task": 1, **kw}


REFUSED = [
    ("no command", {"command": None}, "command"),
    ("empty command", {"command": "  "}, "command"),
    ("unbalanced quotes", {"command": "python 'x"}, "command"),
    ("bad env name", {"env": {"1BAD": "x"}}, "env.1BAD"),
    ("env name with a dash", {"env": {"MY-VAR": "x"}}, "env.MY-VAR"),
    ("platform variable", {"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "env.CUDA_VISIBLE_DEVICES"),
    ("rendezvous variable", {"env": {"MASTER_PORT": "1"}}, "env.MASTER_PORT"),
    ("platform prefix", {"env": {"GPUPLATFORM_X": "1"}}, "env.GPUPLATFORM_X"),
    ("platform variable in a role", {"roles": [worker(env={"RANK": "3"})]}, "roles[0].env.RANK"),
    ("env not an object", {"env": ["A=1"]}, "env"),
    ("env value not a string", {"env": {"A": ["x"]}}, "env.A"),
    ("negative max_restarts", {"max_restarts": -1}, "max_restarts"),
    ("max_restarts too big", {"max_restarts": 101}, "max_restarts"),
    ("max_restarts a string", {"max_restarts": "2"}, "max_restarts"),
    ("max_restarts a bool", {"max_restarts": True}, "max_restarts"),
    ("unknown completion_role", {"completion_role": "launcher"}, "completion_role"),
    ("image without a runtime", {"image": "nvcr.io/nvidia/pytorch:24.05-py3"}, "image"),
    ("role image without a runtime", {"roles": [worker(image="pytorch:2")]}, "roles[0].image"),
    ("malformed image", {"image": "not an image"}, "image"),
    ("role without a command", {"command": None, "roles": [worker(command=SLEEP), worker(name="ps")]},
     "roles[1].command"),
]


@pytest.mark.parametrize("label,override,field", REFUSED, ids=[c[0] for c in REFUSED])
def test_submission_refused_names_the_field_and_stores_nothing(alpha, label, override, field):
    team, queue = alpha
    kwargs = {"team": team, "queue": queue, "name": "bad", "roles": [worker()], "command": SLEEP, **override}
    before = counts()
    with pytest.raises(ValidationError) as exc:
        services.submit_job(**kwargs)
    assert field in exc.value.errors, exc.value.errors
    assert counts() == before


def test_a_replayed_trace_job_needs_no_command_and_is_simulated(alpha):
    team, queue = alpha
    job = services.submit_job(team=team, queue=queue, name="trace", roles=[worker()], duration_seconds=120.0)
    assert job.simulated and list(job.roles.values_list("command", flat=True)) == [[]]
    real = services.submit_job(team=team, queue=queue, name="real", roles=[worker()], command=SLEEP)
    assert not real.simulated


def test_a_string_command_is_split_with_shlex_and_roles_inherit_the_job(alpha):
    team, queue = alpha
    job = services.submit_job(
        team=team, queue=queue, name="j", command='python3 train.py --name "my run" --lr=1e-3',
        env={"A": "job", "B": "2"}, working_dir=" /srv/run ", max_restarts=2, completion_role="launcher",
        roles=[{"name": "launcher", "tasks": 1, "gpus_per_task": 0, "cpu_milli": 1000, "command": "bash -c 'echo hi'",
                "env": {"A": "role"}},
               {"name": "worker", "tasks": 2, "gpus_per_task": 1, "working_dir": "/srv/rel"}])
    launcher, work = JobRole.objects.filter(job=job).order_by("id")
    assert launcher.command == ["bash", "-c", "echo hi"]
    assert work.command == ["python3", "train.py", "--name", "my run", "--lr=1e-3"]
    assert launcher.env == {"A": "role", "B": "2"} and work.env == {"A": "job", "B": "2"}
    assert (launcher.working_dir, work.working_dir) == ("/srv/run", "/srv/rel")
    assert (job.max_restarts, job.restarts, job.completion_role, job.simulated) == (2, 0, "launcher", False)
    submitted = Event.objects.get(kind="submitted", job=job)
    assert submitted.data["env_names"] == ["A", "B"] and "env" not in submitted.data["roles"][0]  # values stay private


def test_an_image_is_accepted_once_a_node_agent_has_a_container_runtime(alpha):
    team, queue = alpha
    Node.objects.filter(name="n1").update(container_runtime="podman")
    job = services.submit_job(team=team, queue=queue, name="img", roles=[worker()], command=SLEEP,
                              image="nvcr.io/nvidia/pytorch:24.05-py3")
    assert list(job.roles.values_list("image", flat=True)) == ["nvcr.io/nvidia/pytorch:24.05-py3"]


# --- binding ---------------------------------------------------------------------------------------------

def test_binding_on_agent_nodes_waits_for_starts_and_simulated_nodes_run_at_once(submit, alpha):
    Node.objects.filter(name__in=["n0", "n1"]).update(executor="agent")
    Node.objects.filter(name__in=["n2", "n3"]).update(state="cordoned")
    on_agents = submit("agents", tasks=2, gpus=8)
    store.run_cycle_once(clock=at(0))
    on_agents.refresh_from_db()
    assert (on_agents.state, on_agents.bound_at, on_agents.started_at) == ("admitted", at(0), None)
    assert {(t.state, t.node.name) for t in tasks_of(on_agents)} == {("bound", "n0"), ("bound", "n1")}
    assert len(live(on_agents)) == 16  # its GPUs are held while it starts

    Node.objects.update(state="ready")
    Node.objects.filter(name__in=["n0", "n1"]).update(state="cordoned")
    simulated = submit("simulated", tasks=2, gpus=8)
    store.run_cycle_once(clock=at(10))
    simulated.refresh_from_db()
    assert (simulated.state, simulated.started_at) == ("running", at(10))
    assert {t.state for t in tasks_of(simulated)} == {"running"}


def test_a_trace_job_without_a_command_runs_at_once_even_on_agent_nodes(alpha, agents):
    team, queue = alpha
    job = services.submit_job(team=team, queue=queue, name="trace", roles=[worker(gpus_per_task=8)],
                              duration_seconds=60.0)
    store.run_cycle_once(clock=at(0))
    job.refresh_from_db()
    assert job.state == "running" and {t.state for t in tasks_of(job)} == {"running"}
    assert all(not assignments(n) for n in ("n0", "n1", "n2", "n3"))  # an agent starts nothing for it


# --- assignments -----------------------------------------------------------------------------------------

def test_assignments_of_a_two_node_gang(submit, agents):
    job = submit("bert", tasks=2, gpus=4, env={"USER_VAR": "x"})
    JobRole.objects.filter(job=job).update(env={"USER_VAR": "x", "RANK": "99", "CUDA_VISIBLE_DEVICES": "7",
                                                "GPUPLATFORM_JOB_ID": "0"})  # as if a rule had let them through
    bind(job, ("n2", (4, 5, 6, 7)), ("n0", (0, 1, 2, 3)))
    t0, t1 = tasks_of(job)
    a0, a1 = assignments("n2")[t0.pk], assignments("n0")[t1.pk]
    assert set(assignments("n2")) == {t0.pk} and set(assignments("n0")) == {t1.pk} and not assignments("n1")
    assert a0["env"]["CUDA_VISIBLE_DEVICES"] == "GPU-n2-4,GPU-n2-5,GPU-n2-6,GPU-n2-7"
    n0_gpus = "GPU-n0-0,GPU-n0-1,GPU-n0-2,GPU-n0-3"
    assert a1["env"]["CUDA_VISIBLE_DEVICES"] == a1["env"]["NVIDIA_VISIBLE_DEVICES"] == n0_gpus
    assert a0["gpus"] == [{"index": i, "uuid": f"GPU-n2-{i}"} for i in (4, 5, 6, 7)]
    assert (a0["env"]["RANK"], a1["env"]["RANK"]) == ("0", "1")
    assert (a0["env"]["NODE_RANK"], a1["env"]["NODE_RANK"]) == ("0", "1")
    for a in (a0, a1):
        env = a["env"]
        assert (env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("2", "0", "1")
        assert env["MASTER_ADDR"] == "10.0.0.3"  # rank 0 runs on n2
        assert env["MASTER_PORT"] == str(master_port(job.pk, 0))
        assert (env["GPUPLATFORM_JOB_ID"], env["GPUPLATFORM_ROLE"], env["GPUPLATFORM_QUEUE"],
                env["GPUPLATFORM_ATTEMPT"]) == (str(job.pk), "worker", "alpha", "0")
        assert env["USER_VAR"] == "x"
        assert set(PLATFORM_VARS) <= set(env)
        assert (a["action"], a["stop_deadline"], a["attempt"]) == ("run", None, 0)
        assert (a["job"], a["job_name"]) == (job.pk, "bert")
        assert (a["argv"], a["working_dir"], a["image"], a["role"]) == (SLEEP, "", "", "worker")
    assert (a0["env"]["GPUPLATFORM_TASK_INDEX"], a1["env"]["GPUPLATFORM_TASK_INDEX"]) == ("0", "1")
    assert a0["env"]["RANK"] != "99" and a0["env"]["GPUPLATFORM_JOB_ID"] == str(job.pk)  # platform wins
    answer = execution.node_assignments(Node.objects.get(name="n0"), at(5))
    assert answer["server_time"] == at(5).isoformat() and answer["stop_grace_seconds"] == 30.0
    assert master_port(job.pk, 1) != master_port(job.pk, 0)  # the next attempt meets on another port


def test_local_ranks_roles_in_order_and_index_fallback_without_uuids(alpha, agents):
    team, queue = alpha
    Gpu.objects.filter(node__name="n1").update(uuid="")
    Node.objects.filter(name="n1").update(address="")
    job = services.submit_job(team=team, queue=queue, name="mixed", command=SLEEP, roles=[
        {"name": "ps", "tasks": 1, "gpus_per_task": 2}, {"name": "worker", "tasks": 2, "gpus_per_task": 2}])
    bind(job, ("ps", 0, "n1", (6, 7)), ("worker", 0, "n0", (0, 1)), ("worker", 1, "n1", (0, 1)))
    ps, w0, w1 = tasks_of(job)
    n1, n0 = assignments("n1"), assignments("n0")
    assert [(n1[t.pk]["env"]["RANK"], n1[t.pk]["env"]["NODE_RANK"], n1[t.pk]["env"]["LOCAL_RANK"],
             n1[t.pk]["env"]["LOCAL_WORLD_SIZE"]) for t in (ps, w1)] == [("0", "0", "0", "2"), ("2", "0", "1", "2")]
    assert (n0[w0.pk]["env"]["RANK"], n0[w0.pk]["env"]["NODE_RANK"], n0[w0.pk]["env"]["LOCAL_RANK"]) == ("1", "1", "0")
    assert n0[w0.pk]["env"]["MASTER_ADDR"] == "n1"  # no registered address: the node's name
    assert n1[ps.pk]["env"]["CUDA_VISIBLE_DEVICES"] == "6,7"  # no UUID reported: by index
    assert n1[ps.pk]["env"]["GPUPLATFORM_ROLE"] == "ps"


# --- reports ---------------------------------------------------------------------------------------------

def test_started_reports_make_the_job_running(submit, agents):
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    t0, t1 = tasks_of(job)
    assert report(t0, "started", 2, pid=4242) == (True, "")
    job.refresh_from_db()
    assert job.state == "admitted" and Task.objects.get(pk=t0.pk).state == "running"
    assert report(t1, "started", 5, pid=4343) == (True, "")
    job.refresh_from_db()
    assert (job.state, job.started_at, job.bound_at) == ("running", at(5), at(0))
    assert list(Task.objects.filter(job=job).order_by("index").values_list("state", "pid", "started_at")) == [
        ("running", 4242, at(2)), ("running", 4343, at(5))]
    assert Event.objects.filter(kind="running", job=job).count() == 1


def test_a_start_reported_without_a_time_is_stamped_with_the_cluster_clock(submit, agents):
    from gpuplatform import clock

    job = submit("gang", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    (task,) = tasks_of(job)
    clock.use(lambda: at(42))  # the demo's simulated clock, or any cluster clock that is not wall time
    try:
        assert services.report_task_running(task)
    finally:
        clock.use(None)
    job.refresh_from_db()
    assert (job.state, job.started_at, Task.objects.get(pk=task.pk).started_at) == ("running", at(42), at(42))


def test_stale_foreign_and_repeated_reports_are_refused_and_change_nothing(submit, agents):
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    t0, t1 = tasks_of(job)
    assert report(t0, "started", 1)[0]
    before = state(job)
    ok, why = report(t0, "started", 2)
    assert not ok and "not bound" in why
    ok, why = report(t1, "started", 2, attempt=1)
    assert not ok and "attempt 1" in why
    ok, why = report(t1, "started", 2, node=Node.objects.get(name="n0"))
    assert not ok and "not on node n0" in why
    ok, why = report(t0, "exited", 2, attempt=1, exit_code=1)
    assert not ok and "attempt" in why
    ok, why = report(t0, "exited", 2, node=Node.objects.get(name="n3"), exit_code=3)
    assert not ok and "not on node n3" in why
    assert execution.report_task_event(Node.objects.get(name="n0"), task_id=10**9, attempt=0, event="started") == (
        False, f"unknown task {10**9}")
    with pytest.raises(ValueError):
        execution.report_task_event(Node.objects.get(name="n0"), task_id=t0.pk, attempt=0, event="finished")
    assert state(job) == before
    assert report(t0, "exited", 3, exit_code=0) == (True, "")
    before = state(job)
    ok, why = report(t0, "exited", 4, exit_code=0)
    assert not ok and "already ended" in why
    assert state(job) == before


def test_a_failing_task_stops_the_gang_and_the_job_fails_when_the_last_process_exits(submit, agents):
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    t0, t1 = tasks_of(job)
    assert report(t0, "exited", 100, exit_code=3) == (True, "")
    job.refresh_from_db()
    assert (job.state, job.stop_target, job.preempt_deadline) == ("preempting", "failed", at(130))
    assert (job.failed_task, job.exit_code, job.exit_signal) == ("worker[0]", 3, None)
    assert len(live(job)) == 16  # held until the last process exits or the deadline passes
    assert not assignments("n0", 101)  # the failed task is gone from its node's list
    stop = assignments("n1", 101)[t1.pk]
    assert (stop["action"], stop["stop_deadline"]) == ("stop", at(130).isoformat())
    assert Event.objects.filter(kind="task_failed", job=job).get().data["exit_code"] == 3
    assert report(t1, "exited", 104, signal=15) == (True, "")
    job.refresh_from_db()
    assert (job.state, job.finished_at, job.failed_task, job.exit_code) == ("failed", at(104), "worker[0]", 3)
    assert "worker[0] exited with code 3" in job.end_reason
    assert live(job) == [] and not Allocation.objects.filter(job=job, released_at__isnull=True).exists()
    assert list(Task.objects.filter(job=job).order_by("index").values_list("state", "exit_code", "exit_signal")) == [
        ("failed", 3, None), ("failed", None, 15)]
    assert Event.objects.filter(kind="failed", job=job).exists()
    assert not assignments("n1", 105)


def test_a_stopped_gang_whose_process_ignores_sigterm_fails_at_the_deadline(submit, agents):
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    t0, _ = tasks_of(job)
    report(t0, "lost", 10, message="agent restarted; process gone")
    job.refresh_from_db()
    assert (job.state, job.stop_target, job.failed_task, job.exit_code) == ("preempting", "failed", "worker[0]", None)
    store.run_cycle_once(clock=at(39))
    assert Job.objects.get(pk=job.pk).state == "preempting" and len(live(job)) == 16
    store.run_cycle_once(clock=at(40))
    job.refresh_from_db()
    assert (job.state, job.finished_at) == ("failed", at(40)) and live(job) == []
    assert "was lost" in job.end_reason


def test_restarts_requeue_the_gang_whole_with_backoff_then_the_job_fails(submit, agents):
    job = submit("gang", tasks=2, gpus=8, max_restarts=1, submitted_at=at(-10))
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    t0, t1 = tasks_of(job)
    report(t1, "exited", 50, signal=9)
    job.refresh_from_db()  # stopped at once (fast recovery, docs/diagnosis.md), with the agents' stop grace (30 s)
    assert (job.state, job.stop_target, job.failed_task, job.exit_signal) == ("preempting", "restart", "worker[1]", 9)
    stop = assignments("n0", 51)[t0.pk]  # the survivor is told to stop: SIGTERM now, SIGKILL at the deadline
    assert (stop["action"], stop["stop_deadline"]) == ("stop", at(80).isoformat())
    assert len(live(job)) == 16  # trial 20, F10: its GPUs are not free while its process runs (they were, at 50)
    assert report(t0, "exited", 53, signal=15) == (True, "")  # the survivor quit on SIGTERM: requeued whole now
    job.refresh_from_db()
    assert not assignments("n0", 54)
    assert (job.state, job.restarts, job.attempts, job.not_before) == ("pending", 1, 1, at(110))  # backoff from 50
    assert job.submitted_at == at(-10) and live(job) == []
    assert set(Task.objects.filter(job=job).values_list("state", "node", "pid", "exit_code")) == {
        ("pending", None, None, None)}
    restarted = Event.objects.get(kind="restarted", job=job)
    assert restarted.data["restarts"] == 1 and restarted.data["not_before"] == at(110).isoformat()
    assert "killed by signal 9" in job.end_reason

    store.run_cycle_once(clock=at(109))
    assert Job.objects.get(pk=job.pk).state == "pending"  # backoff
    store.run_cycle_once(clock=at(112))
    job.refresh_from_db()
    assert job.state == "admitted" and job.attempts == 1
    t0, t1 = tasks_of(job)
    assert not report(t0, "started", 113, attempt=0)[0]  # the old attempt is over
    start_all(job, 113)
    env = assignments(t0.node.name, 113)[t0.pk]["env"]
    assert env["GPUPLATFORM_ATTEMPT"] == "1" and env["MASTER_PORT"] == str(master_port(job.pk, 1))
    report(t0, "exited", 200, exit_code=2)
    job.refresh_from_db()
    assert (job.state, job.stop_target, job.restarts) == ("preempting", "failed", 1)
    report(t1, "exited", 201, exit_code=143)
    job.refresh_from_db()
    assert (job.state, job.restarts, job.attempts, job.failed_task, job.exit_code) == ("failed", 1, 1, "worker[0]", 2)
    assert live(job) == []


def test_every_task_exiting_zero_succeeds(submit, agents):
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    t0, t1 = tasks_of(job)
    report(t1, "exited", 30, exit_code=0)
    job.refresh_from_db()
    assert job.state == "running" and len(live(job)) == 16
    report(t0, "exited", 31, exit_code=0)
    job.refresh_from_db()
    assert (job.state, job.finished_at, job.failed_task, job.exit_code) == ("succeeded", at(31), "", None)
    assert live(job) == [] and set(Task.objects.filter(job=job).values_list("state", flat=True)) == {"succeeded"}
    assert Event.objects.filter(kind="succeeded", job=job).exists()


def test_the_completion_role_exiting_zero_stops_the_other_roles_and_succeeds(alpha, agents):
    team, queue = alpha
    job = services.submit_job(team=team, queue=queue, name="launch", command=SLEEP, completion_role="launcher",
                              roles=[{"name": "launcher", "tasks": 1, "gpus_per_task": 1},
                                     {"name": "worker", "tasks": 2, "gpus_per_task": 8}])
    bind(job, ("launcher", 0, "n2", (0,)), ("worker", 0, "n0", EIGHT), ("worker", 1, "n1", EIGHT))
    start_all(job)
    launcher, w0, w1 = tasks_of(job)
    assert report(launcher, "exited", 60, exit_code=0) == (True, "")
    job.refresh_from_db()
    assert (job.state, job.stop_target, job.preempt_deadline) == ("preempting", "succeeded", at(90))
    assert "role launcher" in job.stop_reason
    assert assignments("n0", 61)[w0.pk]["action"] == "stop" and assignments("n1", 61)[w1.pk]["action"] == "stop"
    report(w0, "exited", 62, signal=15)
    assert Job.objects.get(pk=job.pk).state == "preempting"
    report(w1, "exited", 63, exit_code=143)
    job.refresh_from_db()
    assert (job.state, job.finished_at, job.failed_task) == ("succeeded", at(63), "")
    assert live(job) == []


def test_a_worker_failure_before_the_launcher_is_done_fails_the_job(alpha, agents):
    team, queue = alpha
    job = services.submit_job(team=team, queue=queue, name="launch", command=SLEEP, completion_role="launcher",
                              roles=[{"name": "launcher", "tasks": 1, "gpus_per_task": 1},
                                     {"name": "worker", "tasks": 1, "gpus_per_task": 8}])
    bind(job, ("launcher", 0, "n2", (0,)), ("worker", 0, "n0", EIGHT))
    start_all(job)
    launcher, w0 = tasks_of(job)
    report(w0, "exited", 10, exit_code=1)
    report(launcher, "exited", 11, signal=15)
    job.refresh_from_db()
    assert (job.state, job.failed_task, job.exit_code) == ("failed", "worker[0]", 1)


def test_cancel_holds_the_gpus_until_the_last_process_exits(submit, agents):
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    services.cancel_job(job, reason="user asked", at=at(100))
    job.refresh_from_db()
    assert (job.state, job.stop_target, job.preempt_deadline) == ("preempting", "cancelled", at(130))
    assert len(live(job)) == 16
    assert {a["action"] for n in ("n0", "n1") for a in assignments(n, 100).values()} == {"stop"}
    assert services.cancel_job(job, at=at(101)).preempt_deadline == at(130)  # the same request again: no change
    t0, t1 = tasks_of(job)
    report(t0, "exited", 103, signal=15)
    job.refresh_from_db()
    assert job.state == "preempting" and len(live(job)) == 16 and job.failed_task == ""
    store.run_cycle_once(clock=at(104))  # nothing is freed early by a cycle either
    assert Job.objects.get(pk=job.pk).state == "preempting" and len(live(job)) == 16
    report(t1, "exited", 105, exit_code=0)
    job.refresh_from_db()
    assert (job.state, job.finished_at) == ("cancelled", at(105)) and live(job) == []
    assert "user asked" in job.end_reason


@pytest.mark.parametrize("stop", ["cancel", "evict"])
def test_tasks_stopped_by_a_cancel_are_released_not_failed(submit, agents, stop):
    """New-user trial 14, F11: a cancelled job's task killed by the cancel's SIGTERM read "failed" (the job and
    its attempt said cancelled); so did an evicted gang's. However it ends in the stop's grace, the task is
    released, its exit kept, and the job ends as the stop says (cancelled; pending again after an eviction)."""
    from gpuplatform.lifecycle import evict_job

    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    if stop == "cancel":
        services.cancel_job(job, reason="user asked", at=at(100))
    else:
        evict_job(job.pk, at=at(100), grace_seconds=30, kind="preempted", reason="reclaimed by its owner")
    t0, t1 = tasks_of(job)

    def rows():
        return list(Task.objects.filter(job=job).order_by("index").values_list("state", "exit_code", "exit_signal",
                                                                               "end_message"))
    report(t0, "exited", 103, signal=15)
    assert rows()[0] == ("released", None, 15, "was killed by signal 15 (SIGTERM)"), rows()  # while t1 still runs
    report(t1, "exited", 104, exit_code=143)
    job.refresh_from_db()
    if stop == "cancel":
        assert rows() == [("released", None, 15, "was killed by signal 15 (SIGTERM)"),
                          ("released", 143, None, "exited with code 143")], rows()
        assert (job.state, job.failed_task) == ("cancelled", "")
    else:  # requeued whole: the tasks wait for the next attempt
        assert [r[0] for r in rows()] == ["pending", "pending"] and (job.state, job.failed_task) == ("pending", "")


def test_a_cancel_repeated_while_the_job_is_cancelling_changes_nothing(submit, agents):
    """Trial 14 leftover: a second cancel while the first waited for the processes answered 400. It is the same
    request again: the job is returned as it is, with no second `cancel_requested` Event and the first deadline kept;
    a cancel of a job stopping toward failed still says why not, and so does one of a job that has ended."""
    from gpuplatform.execution.stops import stop_job
    from gpuplatform.models import Event

    job = submit("twice", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    start_all(job)
    services.cancel_job(job, reason="first", at=at(100))
    deadline = Job.objects.get(pk=job.pk).preempt_deadline
    again = services.cancel_job(job, reason="second", at=at(101))
    assert (again.state, again.stop_target, again.stop_reason, again.preempt_deadline) == (
        "preempting", "cancelled", "first", deadline)
    assert Event.objects.filter(job=job, kind="cancel_requested").count() == 1
    report(tasks_of(job)[0], "exited", 103, signal=15)
    with pytest.raises(ValidationError) as err:
        services.cancel_job(job, reason="third", at=at(104))
    assert "state" in err.value.errors
    other = submit("failing", tasks=1, gpus=8)
    bind(other, ("n1", EIGHT))
    start_all(other)
    stop_job(other.pk, at=at(110), target="failed", reason="a task failed", kind="stopping")
    with pytest.raises(ValidationError, match="already stopping \\(it ends as failed\\)"):
        services.cancel_job(other, reason="please", at=at(111))


@pytest.mark.parametrize("on_agents", [True, False])
def test_one_cancel_writes_a_request_and_an_end_event_without_repeating_itself(submit, agents, on_agents):
    """New-user report 7, F6: one cancel wrote two `cancelled` Events, the end one reading "burst3 cancelled:
    burst3 cancelled: my reason". Now: a `cancel_requested` Event (the stop) and one `cancelled` Event (the
    end), each saying the reason once; so does the attempt's diagnosis."""
    from gpuplatform.models import Attempt, Event

    from gpuplatform.models import Node

    if not on_agents:  # the demo's case: a (non-simulated) job on a simulated node, no process to wait for
        Node.objects.filter(name="n0").update(executor=Node.Executor.SIMULATED)
    job = submit("burst3", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    if on_agents:
        start_all(job)
    services.cancel_job(job, reason="my reason", at=at(100))
    if on_agents:
        report(tasks_of(job)[0], "exited", 103, signal=15)
    job.refresh_from_db()
    assert job.state == "cancelled" and job.end_reason == "my reason"
    events = list(Event.objects.filter(job=job, kind__in=("cancel_requested", "cancelled")).order_by("time", "id")
                  .values_list("kind", "message"))
    assert [k for k, _ in events] == ["cancel_requested", "cancelled"], events
    assert events[1][1] == "burst3 cancelled: my reason"
    assert all(m.count("my reason") == 1 and m.count("cancelled") <= 1 for _, m in events), events
    attempt = Attempt.objects.get(job=job)
    assert "burst3 cancelled" not in str(attempt.diagnosis), attempt.diagnosis


def test_cancel_of_a_gang_that_does_not_exit_ends_at_the_deadline(submit, agents):
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    services.cancel_job(job, at=at(100))
    store.run_cycle_once(clock=at(129))
    assert Job.objects.get(pk=job.pk).state == "preempting" and len(live(job)) == 16
    store.run_cycle_once(clock=at(130))
    job.refresh_from_db()
    assert (job.state, job.finished_at) == ("cancelled", at(130)) and live(job) == []
    # new-user trial 13, F17/F19: the agents' SIGKILL reports arrive after the end; each task keeps how it ended
    # (it showed exit_signal null and no end message), once; the job is unchanged
    t0, t1 = tasks_of(job)
    assert (t0.state, t0.exit_signal, t0.end_message) == ("released", None, "")
    assert report(t0, "exited", 131, signal=9) == (True, "")
    assert report(t1, "lost", 132, message="agent restarted; process gone, no exit status") == (True, "")
    t0, t1 = tasks_of(job)
    assert (t0.state, t0.exit_code, t0.exit_signal, t0.end_message) == ("released", None, 9,
                                                                        "was killed by signal 9 (SIGKILL)")
    assert (t1.state, t1.exit_signal, t1.end_message) == ("released", None, "agent restarted; process gone, no exit "
                                                                              "status")
    assert report(t0, "exited", 133, exit_code=0)[0] is False  # kept once
    assert Job.objects.get(pk=job.pk).finished_at == at(130) and Job.objects.get(pk=job.pk).state == "cancelled"


def test_cancel_of_a_job_on_simulated_nodes_ends_at_once(submit):
    job = submit("sim", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    services.cancel_job(job, at=at(5))
    job.refresh_from_db()
    assert (job.state, job.finished_at) == ("cancelled", at(5)) and live(job) == []


def test_cancel_during_a_reclaim_grace_on_simulated_nodes_ends_at_once(submit):
    """A job being preempted (requeue after the grace) and then cancelled: nothing runs on a node agent, so
    there is no process to wait for; its GPUs are free at once."""
    job = submit("sim", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    from gpuplatform.lifecycle import evict_job
    evict_job(job.pk, at=at(10), grace_seconds=30, kind="preempted", reason="test")
    services.cancel_job(job, at=at(12))
    job.refresh_from_db()
    assert (job.state, job.finished_at) == ("cancelled", at(12)) and live(job) == []


def test_a_preempted_agent_gang_cancelled_keeps_the_earlier_deadline(submit, agents):
    job = submit("gang", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    start_all(job)
    from gpuplatform.lifecycle import evict_job
    evict_job(job.pk, at=at(10), grace_seconds=30, kind="preempted", reason="test")
    services.cancel_job(job, at=at(12))
    job.refresh_from_db()
    assert (job.state, job.stop_target, job.preempt_deadline) == ("preempting", "cancelled", at(40))
    store.run_cycle_once(clock=at(40))
    job.refresh_from_db()
    assert (job.state, job.attempts) == ("cancelled", 0) and live(job) == []


@pytest.mark.parametrize("stop,ends", [("cancel", ("cancelled", 0, 0)), ("failure", ("failed", 0, 0))])
def test_a_node_lost_while_its_gang_is_stopping_ends_the_stop_as_it_says(submit, agents, stop, ends):
    """A long grace (900 s) outlives the node failure detection (60 s + 120 s): the lost node's processes are
    gone, counted ended. A cancelled job is cancelled, a failed one failed; none is requeued as if nothing had
    happened (a cancelled job would run again). The cancelled gang's task on n1, which still beats, is still
    being stopped: the job keeps its GPUs until that process ends (trial 20, F10: they were released at the
    detection while it ran), then ends cancelled."""
    from gpuplatform.scheduling.failures import detect_failures

    Queue.objects.filter(name="alpha").update(preemption_grace_seconds=900)
    job = submit("gang", tasks=2, gpus=8, max_restarts=1 if stop == "restart" else 0)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    for name in ("n0", "n1"):
        services.record_heartbeat(name, gpus=[], at=at(0))
    if stop == "cancel":
        services.cancel_job(job, at=at(10))
    else:
        report(tasks_of(job)[1], "exited", 10, exit_code=1)
    assert Job.objects.get(pk=job.pk).state == "preempting"
    services.record_heartbeat("n1", gpus=[], at=at(150))  # n0 went silent at 0; n1 still beats
    failures = detect_failures(at(180))
    if stop == "cancel":
        assert failures.stopping == [job.pk] and failures.ended == []
        assert Job.objects.get(pk=job.pk).state == "preempting" and len(live(job)) == 16
        assert [t.state for t in tasks_of(job)] == ["released", "running"]  # n0's counted ended; n1's still runs
        assert report(tasks_of(job)[1], "exited", 181, signal=15) == (True, "")
    else:
        assert failures.ended == [job.pk]
    job.refresh_from_db()
    assert (job.state, job.attempts, job.restarts) == ends and live(job) == []
    assert failures.requeued == []
    assert not Event.objects.filter(kind="requeued_after_failure", job=job).exists()


def test_a_node_lost_under_a_preempted_gang_still_requeues_it_with_backoff(submit, agents):
    from gpuplatform.lifecycle import evict_job
    from gpuplatform.scheduling.failures import detect_failures

    job = submit("gang", tasks=1, gpus=8)
    bind(job, ("n0", EIGHT))
    start_all(job)
    services.record_heartbeat("n0", gpus=[], at=at(0))
    evict_job(job.pk, at=at(170), grace_seconds=900, kind="preempted", reason="reclaim")
    assert detect_failures(at(180)).requeued == [job.pk]
    job.refresh_from_db()
    assert (job.state, job.attempts, job.not_before) == ("pending", 1, at(240))


def test_the_time_limit_stops_the_job_and_fails_it_after_the_grace(submit, agents):
    job = submit("capped", tasks=2, gpus=8, time_limit_seconds=600)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job, 0)
    store.run_cycle_once(clock=at(599))
    assert Job.objects.get(pk=job.pk).state == "running"
    store.run_cycle_once(clock=at(600))
    job.refresh_from_db()
    assert (job.state, job.stop_target, job.preempt_deadline) == ("preempting", "failed", at(630))
    assert len(live(job)) == 16
    event = Event.objects.get(kind="time_limit", job=job)
    assert event.time == at(600) and event.data["time_limit_seconds"] == 600
    assert {a["action"] for a in assignments("n0", 600).values()} == {"stop"}
    store.run_cycle_once(clock=at(629))
    assert Job.objects.get(pk=job.pk).state == "preempting"
    store.run_cycle_once(clock=at(630))
    job.refresh_from_db()
    assert (job.state, job.finished_at) == ("failed", at(630)) and "time limit" in job.end_reason
    assert job.end_reason == "time limit of 600 s reached (time_limit_seconds)"  # not "ran 600 s, its ..."
    assert live(job) == [] and job.failed_task == ""


def test_a_timed_out_job_that_exits_on_sigterm_fails_at_once_for_its_time_limit(submit, agents):
    job = submit("capped", tasks=1, gpus=8, time_limit_seconds=60)
    bind(job, ("n0", EIGHT))
    start_all(job, 5)
    store.run_cycle_once(clock=at(64))
    assert Job.objects.get(pk=job.pk).state == "running"  # counted from the start, not the binding
    store.run_cycle_once(clock=at(65))
    (task,) = tasks_of(job)
    report(task, "exited", 66, signal=15)
    job.refresh_from_db()
    assert (job.state, job.finished_at, job.failed_task) == ("failed", at(66), "")
    assert "time limit" in job.end_reason and live(job) == []


# --- logs ------------------------------------------------------------------------------------------------

@pytest.fixture
def running(submit, agents):
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    return job


def log(task, offset, data, *, attempt=0, node=None):
    return execution.append_log(node or Task.objects.get(pk=task.pk).node, task_id=task.pk, attempt=attempt,
                                offset=offset, data=data, at=at(1))


def test_log_chunks_append_dedupe_and_read_with_offset_and_limit(running):
    t0, _ = tasks_of(running)
    assert log(t0, 0, "hello ") == (True, "", 6)
    assert log(t0, 6, "wörld\n") == (True, "", 13)  # 7 bytes: offsets count UTF-8 bytes
    assert log(t0, 0, "hello ") == (True, "already stored", 6)  # a retry
    assert TaskLog.objects.filter(task=t0).count() == 2
    whole = execution.read_log(t0)
    assert (whole["data"], whole["offset"], whole["next_offset"], whole["size"], whole["trimmed"],
            whole["complete"], whole["name"]) == ("hello wörld\n", 0, 13, 13, False, False, "worker-0")
    part = execution.read_log(t0, offset=3, limit=4)
    assert (part["data"], part["offset"], part["next_offset"]) == ("lo w", 3, 7)
    rest = execution.read_log(t0, offset=part["next_offset"])
    assert (rest["data"], rest["next_offset"]) == ("örld\n", 13)
    assert execution.read_log(t0, offset=13)["data"] == ""
    assert log(t0, 20, "after a gap") == (True, "", 31)
    assert execution.read_log(t0, offset=13)["data"] == "after a gap"
    # A client that follows next_offset with a small limit gets everything, nothing skipped (a limit that ended
    # inside a chunk used to jump next_offset to the next chunk)
    pages, offset = [], 0
    for _ in range(40):
        page = execution.read_log(t0, offset=offset, limit=2)
        if not page["data"]:
            break
        pages.append(page["data"])
        offset = page["next_offset"]
    assert "".join(pages) == "hello wörld\nafter a gap"


def test_logs_are_trimmed_past_the_limit_oldest_first(running, settings):
    settings.TASK_LOG_MAX_BYTES = 100
    t0, _ = tasks_of(running)
    for i in range(4):
        assert log(t0, i * 40, str(i) * 40)[0]
    assert sorted(TaskLog.objects.filter(task=t0).values_list("offset", flat=True)) == [80, 120]
    first = execution.read_log(t0)
    assert (first["trimmed"], first["offset"], first["size"], first["data"]) == (True, 80, 160, "2" * 40 + "3" * 40)
    assert not execution.read_log(t0, offset=100)["trimmed"]


def test_log_chunks_refused(running):
    t0, t1 = tasks_of(running)
    assert log(t0, 0, "x" * 65537) == (False, "a log chunk may hold at most 65536 bytes", 0)
    assert log(t0, 0, "é" * 32769)[0] is False  # 65538 bytes in UTF-8
    ok, why, _ = log(t0, 0, "future", attempt=1)
    assert not ok and "attempt 1" in why
    ok, why, _ = log(t0, 0, "not mine", node=Node.objects.get(name="n1"))
    assert not ok and "not on node n1" in why
    assert log(t0, -1, "x")[0] is False
    pending = Task.objects.create(job=running, role=t0.role, index=9)  # placed on no node
    ok, why, _ = log(pending, 0, "nobody ran me", node=Node.objects.get(name="n0"))
    assert not ok and "not on node n0" in why
    assert execution.append_log(Node.objects.get(name="n0"), task_id=10**9, attempt=0, offset=0, data="x")[0] is False
    assert not TaskLog.objects.exists()


def test_a_chunk_far_past_the_stored_end_is_refused_even_after_the_job_ended(running, settings):
    """New-user trial 13, F4: a finished task's log took a chunk at offset 2^62 and then read 4.6 EB "in size".
    A gap up to TASK_LOG_MAX_BYTES (what an attempt keeps) is kept as before; further out the chunk is refused
    and next_offset is the stored end, which the agent resumes from (agent/runner.py ack_logs)."""
    settings.TASK_LOG_MAX_BYTES = 1000
    t0, _ = tasks_of(running)
    assert log(t0, 0, "hello\n") == (True, "", 6)
    assert log(t0, 6 + 1000, "after the largest gap") == (True, "", 1027)  # end 6 + 1000: still kept
    ok, why, nxt = log(t0, 1027 + 1001, "too far")
    assert (ok, nxt) == (False, 1027) and "more than 1000 bytes (TASK_LOG_MAX_BYTES) past the 1027 bytes" in why
    for task in tasks_of(running):
        report(task, "exited", 20, exit_code=0)
    assert Job.objects.get(pk=running.pk).state == "succeeded"
    ok, why, nxt = log(t0, 2**62, "hello")
    assert (ok, nxt) == (False, 1027) and "send its output from 1027" in why
    page = execution.read_log(Task.objects.get(pk=t0.pk))
    assert page["size"] == 1027 and "hello" not in page["data"][6:]
    assert log(t0, 1027, "last words\n") == (True, "", 1038)  # the attempt's last lines, contiguous: still taken


def test_log_reads_default_to_the_current_attempt_and_name_the_one_that_logged(submit, agents):
    """After a restart, before the new attempt has printed anything, the default read is that attempt (new-user
    trial 26, F3: serving the failed one, complete, ended `gpuctl logs --follow` at once), and its note says where
    the failed attempt's output is (it explains the restart); asked for, attempt 0 is served."""
    job = submit("gang", tasks=1, gpus=8, max_restarts=1)
    bind(job, ("n0", EIGHT))
    start_all(job)
    (task,) = tasks_of(job)
    log(task, 0, "Traceback: boom\n")
    report(task, "exited", 10, exit_code=1)
    job.refresh_from_db()
    assert (job.state, job.attempts) == ("pending", 1)
    page = execution.read_log(Task.objects.get(pk=task.pk))
    assert (page["attempt"], page["data"], page["complete"]) == (1, "", False)
    assert "attempt 0 has 16 bytes of output: ask for attempt=0" in page["note"]
    page = execution.read_log(Task.objects.get(pk=task.pk), attempt=0)
    assert (page["attempt"], page["data"], page["complete"]) == (0, "Traceback: boom\n", True)
    assert log(task, 16, "last words", attempt=0, node=Node.objects.get(name="n0"))[0]  # late lines of the old attempt
    assert execution.read_log(Task.objects.get(pk=task.pk), attempt=1)["data"] == ""


def test_log_reads_never_split_a_character(running):
    t0, _ = tasks_of(running)
    log(t0, 0, "aé€😀z")  # 1 + 2 + 3 + 4 + 1 bytes
    text, offset = "", 0
    while True:
        page = execution.read_log(t0, offset=offset, limit=2)
        if page["next_offset"] == offset:
            break
        text += page["data"]
        offset = page["next_offset"]
    assert text == "aé€😀z" and offset == 11
    inside = execution.read_log(t0, offset=2, limit=3)  # byte 2 is the middle of "é": start after it
    assert (inside["data"], inside["next_offset"]) == ("€", 6)
    assert execution.read_log(t0, offset=9, limit=64)["data"] == "z"  # inside the last 4-byte character


# --- REST endpoints --------------------------------------------------------------------------------------

@pytest.fixture
def clients(agents):
    """{'agent': node-agents token, 'member': alpha member, 'other': beta member}."""
    User = get_user_model()
    agent = User.objects.create_user("node-agent", password="pw")
    agent.groups.add(Group.objects.get_or_create(name=NODE_AGENT_GROUP)[0])
    NodeAgentScope.objects.create(user=agent, nodes=["*"])  # a trusted agent for every node of this world
    member = User.objects.create_user("mike", password="pw")
    services.add_member(Team.objects.get(name="alpha"), member, "member")
    other = User.objects.create_user("bob", password="pw")
    services.add_member(Team.objects.get(name="beta"), other, "member")
    out = {}
    for role, user in (("agent", agent), ("member", member), ("other", other)):
        out[role] = APIClient()
        out[role].credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(user)[0]}")
    return out


def test_agent_endpoints_assignments_and_reports(clients, submit):
    agent = clients["agent"]
    job = submit("gang", tasks=2, gpus=8, env={"USER_VAR": "x"})
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    t0, t1 = tasks_of(job)
    answer = agent.get("/api/v1/nodes/n0/assignments/")
    assert answer.status_code == 200
    body = answer.json()
    assert [t["task"] for t in body["tasks"]] == [t0.pk] and body["tasks"][0]["env"]["RANK"] == "0"
    assert body["tasks"][0]["env"]["USER_VAR"] == "x" and body["poll_seconds"] > 0
    assert clients["member"].get("/api/v1/nodes/n0/assignments/").status_code == 403
    assert agent.get("/api/v1/nodes/nope/assignments/").status_code == 404

    answer = agent.post("/api/v1/nodes/n0/reports/", {
        "tasks": [{"task": t0.pk, "attempt": 0, "event": "started", "pid": 42},
                  {"task": t1.pk, "attempt": 0, "event": "started", "pid": 43}],
        "logs": [{"task": t0.pk, "attempt": 0, "offset": 0, "data": "rank 0 of 2\n"}]}, format="json")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert [(t["task"], t["accepted"]) for t in body["tasks"]] == [(t0.pk, True), (t1.pk, False)]
    assert "not on node n0" in body["tasks"][1]["detail"]
    assert body["logs"] == [{"task": t0.pk, "attempt": 0, "accepted": True, "detail": "", "next_offset": 12}]
    assert clients["member"].post("/api/v1/nodes/n1/reports/", {"tasks": []}, format="json").status_code == 403
    before = state(job)
    for bad in ({"task": t1.pk, "attempt": 0, "event": "exited", "exit_code": 1, "signal": 9},
                {"task": t1.pk, "attempt": 0, "event": "exited"}):
        answer = agent.post("/api/v1/nodes/n1/reports/", {"tasks": [bad]}, format="json")
        assert answer.status_code == 400 and "tasks[0].exit_code" in answer.json(), answer.content  # flat paths
    for bad, field in (({"task": t1.pk, "attempt": 0, "event": "finished"}, "event"),
                       ({"task": t1.pk, "attempt": -1, "event": "started"}, "attempt"),
                       ({"task": t1.pk, "attempt": 0, "event": "exited", "exit_code": 256}, "exit_code"),
                       ({"attempt": 0, "event": "started"}, "task")):
        answer = agent.post("/api/v1/nodes/n1/reports/", {"tasks": [bad]}, format="json")
        assert answer.status_code == 400 and f"tasks[0].{field}" in answer.json(), answer.content
    assert state(job) == before
    answer = agent.post("/api/v1/nodes/n1/reports/", {"tasks": [
        {"task": t1.pk, "attempt": 0, "event": "started", "pid": 43},
        {"task": t1.pk, "attempt": 0, "event": "exited", "exit_code": 7}]}, format="json")
    assert [t["accepted"] for t in answer.json()["tasks"]] == [True, True]
    job.refresh_from_db()
    assert (job.state, job.stop_target, job.failed_task, job.exit_code) == ("preempting", "failed", "worker[1]", 7)


def test_job_logs_endpoint(clients, submit):
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    t0, t1 = tasks_of(job)
    log(t0, 0, "zero\n")
    log(t1, 0, "one says hello\n")
    member = clients["member"]
    url = f"/api/v1/jobs/{job.pk}/logs/"
    answer = member.get(url, {"task": str(t1.pk)})
    assert answer.status_code == 200 and answer.json()["data"] == "one says hello\n"
    answer = member.get(url, {"task": "worker-1", "offset": 4, "limit": 5})
    assert (answer.json()["data"], answer.json()["next_offset"], answer.json()["name"]) == ("says ", 9, "worker-1")
    assert member.get(url).json()["data"] == "zero\n"  # default: the first task
    for unknown in ("worker-9", "ps-0", "worker-x", str(10**9), "9" * 40, "worker-" + "9" * 40):
        answer = member.get(url, {"task": unknown})
        assert answer.status_code == 400 and "task" in answer.json(), (unknown, answer.content)
    assert member.get(url, {"task": "worker-0", "limit": 0}).status_code == 400
    other = services.submit_job(command=SLEEP, team=Team.objects.get(name="beta"), queue="beta", name="beta-job",
                                roles=[{"tasks": 1, "gpus_per_task": 1}])
    assert member.get(f"/api/v1/jobs/{other.pk}/logs/").status_code == 404
    assert clients["other"].get(url, {"task": "worker-0"}).status_code == 404
    assert clients["other"].get(f"/api/v1/jobs/{other.pk}/logs/").status_code == 200


def test_the_logs_endpoint_takes_the_task_as_failed_task_names_it(clients, submit):
    """New-user trial 13, F8: failed_task and diagnosis.task say worker[1], the tasks list worker-1; the logs
    endpoint refused worker[1]. Both spellings name the same task."""
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    t0, t1 = tasks_of(job)
    log(t1, 0, "Traceback: rank 1 fails\n")
    report(t1, "exited", 10, exit_code=3)
    job.refresh_from_db()
    assert job.failed_task == "worker[1]"
    url = f"/api/v1/jobs/{job.pk}/logs/"
    by_failed = clients["member"].get(url, {"task": job.failed_task})
    assert by_failed.status_code == 200, by_failed.content
    assert (by_failed.json()["task"], by_failed.json()["data"]) == (t1.pk, "Traceback: rank 1 fails\n")
    assert clients["member"].get(url, {"task": "worker-1"}).json()["task"] == t1.pk
    for unknown in ("worker[9]", "worker[]", "worker[x]", "[1]"):
        answer = clients["member"].get(url, {"task": unknown})
        assert answer.status_code == 400 and "worker[0]" in answer.json()["task"][0], (unknown, answer.content)


def test_what_a_process_printed_never_makes_a_report_malformed(clients, submit):
    """A node agent drops a report answered 400 with every event in it: a NUL in a task's output or a long
    "lost" message must not cost the exit reports sent alongside."""
    agent = clients["agent"]
    job = submit("gang", tasks=2, gpus=8)
    bind(job, ("n0", EIGHT), ("n1", EIGHT))
    start_all(job)
    t0, t1 = tasks_of(job)
    answer = agent.post("/api/v1/nodes/n0/reports/", {
        "tasks": [{"task": t0.pk, "attempt": 0, "event": "lost", "message": "x" * 2000}],
        "logs": [{"task": t0.pk, "attempt": 0, "offset": 0, "data": "bin\x00ary\n"}]}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["logs"][0] == {"task": t0.pk, "attempt": 0, "accepted": True, "detail": "", "next_offset": 8}
    assert answer.json()["tasks"][0]["accepted"]
    assert TaskLog.objects.get(task=t0).data == "bin?ary\n"  # one byte for one: offsets stay the agent's
    job.refresh_from_db()
    assert (job.state, job.stop_target, job.failed_task) == ("preempting", "failed", "worker[0]")
    assert Task.objects.get(pk=t0.pk).end_message == "x" * 200
    assert report(t1, "lost", 5, message="gone\x00") == (True, "")
    assert Job.objects.get(pk=job.pk).state == "failed" and "\x00" not in Task.objects.get(pk=t1.pk).end_message
