"""Jobs run for real, end to end (docs/execution.md): real node agent processes (`manage.py gpu_agent`, two
nodes of 4 GPUs copied from the recorded H200 dump) on loopback against the real web app (pytest-django's
live server on PostgreSQL), a real Celery worker running the scheduling cycles and failure detection (its own
queue, with short timeouts), and real task processes. No mock of the executor.

"No process of the task survives" is checked by scanning /proc for any process whose environment carries
the job's GPUPLATFORM_JOB_ID (every process a task forks inherits it).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from gpuplatform.services import issue_api_token

from gpuplatform import services
from gpuplatform.agent.client import get_json, post_json
from gpuplatform.agent.local import start_agents, stop_agents
from gpuplatform.api.permissions import NODE_AGENT_GROUP
from gpuplatform.models import NodeAgentScope
from gpuplatform.models import Allocation, Event, Job, Node, Queue, Task
from gpuplatform.scheduling.tasks import detect_node_failures, run_scheduling_cycle
from tests.agent.proc_helpers import wait_for
from tests.integration.conftest import start_worker, stop_worker

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = str(REPO / "examples" / "rendezvous.py")
GPUS_PER_NODE = 4
# The worker's settings: a node silent 4 s is not_ready, failed 2 s later; requeues back off 1 s.
WORKER_ENV = {"HEARTBEAT_TIMEOUT_SECONDS": "4", "NODE_FAILURE_GRACE_SECONDS": "2", "REQUEUE_BACKOFF_SECONDS": "1",
              "REQUEUE_BACKOFF_CAP_SECONDS": "2", "GANG_START_TIMEOUT_SECONDS": "60", "LOG_LEVEL": "WARNING"}


@pytest.fixture(scope="module")
def fast_worker(celery_worker, tmp_path_factory):
    """A second Celery worker with the short timeouts above, on a queue of its own."""
    queue = f"agents-{uuid.uuid4().hex[:8]}"
    proc = start_worker(queue, tmp_path_factory.mktemp("celery-agents") / "worker.log", WORKER_ENV)
    yield queue
    stop_worker(proc)


class Beat(threading.Thread):
    """What Celery beat does in production, faster: a cycle and a failure check every 0.3 s."""

    def __init__(self, queue: str):
        super().__init__(daemon=True, name="test-beat")
        self.queue, self.halt, self.errors = queue, threading.Event(), []

    def run(self):
        while not self.halt.is_set():
            try:
                detect_node_failures.apply_async(queue=self.queue).get(timeout=60)
                run_scheduling_cycle.apply_async(queue=self.queue).get(timeout=60)
            except Exception as exc:  # noqa: BLE001 - reported by the test at the end
                self.errors.append(repr(exc))
            self.halt.wait(0.3)


def until(predicate, timeout: float, what: str, step: float = 0.2):
    """proc_helpers.wait_for at this suite's pace (agents report every few tenths of a second)."""
    return wait_for(predicate, timeout, what, step)


def job_processes(job_id: int) -> list[int]:
    """Pids of every live process whose environment has GPUPLATFORM_JOB_ID=<job_id>."""
    marker = f"GPUPLATFORM_JOB_ID={job_id}\0".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read()
            with open(f"/proc/{entry}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in env and state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


class World:
    """Two nodes with agents, a team queue of all 8 GPUs, a member's token for the REST API."""

    def __init__(self, live_server, queue_name: str, tmp: Path):
        User = get_user_model()
        agent_user = User.objects.create_user("node-agent")
        agent_user.groups.add(Group.objects.get_or_create(name=NODE_AGENT_GROUP)[0])
        # A bootstrap token naming the nodes it may add: they join ready, as the local demo's do.
        NodeAgentScope.objects.create(user=agent_user, nodes=["local-0", "local-1", "slow", "fast"])
        self.agent_token = issue_api_token(agent_user)[0]
        member = User.objects.create_user("alice", password="pw-alice-123")
        self.team = services.create_team("team-a")
        services.add_member(self.team, member, "member")
        self.token = issue_api_token(member)[0]
        self.api = live_server.url
        self.tmp = tmp
        self.agents = start_agents(self.api, self.agent_token, 2, root=tmp / "agents", gpus=GPUS_PER_NODE,
                                   poll=0.3, interval=1.0)
        until(lambda: Node.objects.filter(executor="agent").count() == 2, 60, "both agents registered")
        self.queue = services.create_queue("a", team=self.team, quotas={"H200": (0, 8, 8)})
        Queue.objects.filter(pk=self.queue.pk).update(preemption_grace_seconds=4)
        self.beat = Beat(queue_name)
        self.beat.start()

    def submit(self, name: str, command, *, tasks: int = 1, gpus: int = 1, queue: str = "a", **extra) -> int:
        body = {"name": name, "queue": queue, "command": command,
                "roles": [{"name": "worker", "tasks": tasks, "gpus_per_task": gpus}], **extra}
        return post_json(f"{self.api}/api/v1/jobs/", self.token, body)["id"]

    def job(self, job_id: int) -> dict:
        return get_json(f"{self.api}/api/v1/jobs/{job_id}/", self.token)

    def log(self, job_id: int, task: str) -> str:
        out, offset = [], 0
        while True:
            page = get_json(f"{self.api}/api/v1/jobs/{job_id}/logs/?task={task}&offset={offset}", self.token)
            out.append(page["data"])
            if page["next_offset"] == offset or not page["data"]:
                return "".join(out)
            offset = page["next_offset"]

    def state(self, job_id: int, *states: str):
        return lambda: Job.objects.filter(pk=job_id, state__in=states).exists()

    def close(self):
        self.beat.halt.set()
        self.beat.join(timeout=30)
        stop_agents(self.agents, stop_tasks=True, grace=3)
        assert not self.beat.errors, self.beat.errors[:3]


@pytest.fixture
def world(live_server, fast_worker, tmp_path, settings):
    settings.REQUEUE_BACKOFF_SECONDS = 1  # the reports (a gang restarted) are applied in the live server
    settings.REQUEUE_BACKOFF_CAP_SECONDS = 2
    settings.AGENT_POLL_SECONDS = 0.3
    settings.AGENT_STOP_GRACE_SECONDS = 3
    w = World(live_server, fast_worker, tmp_path)
    yield w
    w.close()


def test_gang_rendezvous_succeeds_and_each_rank_sees_its_own_gpus(world):
    job_id = world.submit("rendezvous", [sys.executable, EXAMPLE, "--sleep", "1"], tasks=2, gpus=GPUS_PER_NODE)
    until(world.state(job_id, "succeeded", "failed"), 90, "the gang to finish")
    job = world.job(job_id)
    assert job["state"] == "succeeded", job
    assert sorted(t["node"] for t in job["tasks"]) == ["local-0", "local-1"]  # 2 x 4 GPUs: one node each
    seen = set()
    for task in Task.objects.filter(job_id=job_id).select_related("role"):
        text = world.log(job_id, f"worker-{task.index}")
        uuids = list(Allocation.objects.filter(task=task).order_by("gpu__index").values_list("gpu__uuid", flat=True))
        assert len(uuids) == GPUS_PER_NODE and all(uuids)
        assert f"[rank {task.index}] rendezvous ok: ranks [0, 1]" in text, text
        assert f"CUDA_VISIBLE_DEVICES={','.join(uuids)}" in text, text
        assert (task.state, task.exit_code, task.exit_signal) == ("succeeded", 0, None)
        seen.update(uuids)
    assert len(seen) == 2 * GPUS_PER_NODE  # no GPU seen by both ranks
    assert not Allocation.objects.filter(job_id=job_id, released_at__isnull=True).exists()
    assert not job_processes(job_id)


def test_exit_code_3_fails_the_gang_and_stops_the_other_task(world):
    script = 'if [ "$RANK" = 1 ]; then sleep 1; echo failing; exit 3; fi; exec sleep 300'
    job_id = world.submit("fails", ["sh", "-c", script], tasks=2, gpus=GPUS_PER_NODE)
    until(world.state(job_id, "failed", "succeeded"), 60, "the gang to fail")
    job = world.job(job_id)
    assert (job["state"], job["failed_task"], job["exit_code"], job["exit_signal"]) == \
        ("failed", "worker[1]", 3, None), job
    assert "exited with code 3" in job["end_reason"]
    survivor = Task.objects.get(job_id=job_id, index=0)
    assert survivor.exit_signal == signal.SIGTERM or survivor.state == "released"
    assert not job_processes(job_id)
    assert not Allocation.objects.filter(job_id=job_id, released_at__isnull=True).exists()
    assert Event.objects.filter(job_id=job_id, kind="task_failed").exists()


def test_max_restarts_1_reruns_the_gang_once(world):
    script = 'echo "attempt $GPUPLATFORM_ATTEMPT"; [ "$GPUPLATFORM_ATTEMPT" -ge 1 ]'
    job_id = world.submit("flaky", ["sh", "-c", script], max_restarts=1)
    until(world.state(job_id, "succeeded", "failed"), 60, "the restarted job to finish")
    job = world.job(job_id)
    assert (job["state"], job["restarts"], job["attempt"]) == ("succeeded", 1, 1), job
    assert "attempt 1" in world.log(job_id, "worker-0")
    first = get_json(f"{world.api}/api/v1/jobs/{job_id}/logs/?task=worker-0&attempt=0", world.token)
    assert "attempt 0" in first["data"]
    assert Event.objects.filter(job_id=job_id, kind="restarted").count() == 1


def test_cancel_leaves_no_process_behind(world):
    script = "setsid sleep 300 & (sleep 300 &) ; trap '' TERM; exec sleep 300"  # a setsid and a double fork
    job_id = world.submit("long", ["sh", "-c", script], tasks=2, gpus=2)
    until(world.state(job_id, "running"), 60, "the job to run")
    until(lambda: len(job_processes(job_id)) >= 6, 20, "every process of both tasks")
    post_json(f"{world.api}/api/v1/jobs/{job_id}/cancel/", world.token, {"reason": "test"})
    assert Job.objects.get(pk=job_id).state in ("preempting", "cancelled")
    until(world.state(job_id, "cancelled"), 30, "the job to end cancelled")
    until(lambda: not job_processes(job_id), 10, "no process of the job left")
    assert not Allocation.objects.filter(job_id=job_id, released_at__isnull=True).exists()


CHECKPOINTER = """
import os, signal, sys, time
rank = int(os.environ["RANK"])
def on_term(signum, frame):
    open(os.environ["CKPT"] + f".{rank}", "w").write(f"rank {rank} at {time.time()}")
    print("checkpointed", flush=True)
    if rank == 0:
        sys.exit(143)
signal.signal(signal.SIGTERM, on_term)  # rank 0 checkpoints and exits; rank 1 checkpoints and keeps going
print("running", flush=True)
while True:
    time.sleep(0.1)
"""


def test_reclaim_sigterm_at_grace_start_sigkill_at_deadline(world, tmp_path):
    ckpt = tmp_path / "ckpt"
    borrower_q = services.create_queue("b", team=world.team, quotas={"H200": (0, 0, 8)})
    Queue.objects.filter(pk=borrower_q.pk).update(preemption_grace_seconds=4)
    victim = world.submit("borrower", [sys.executable, "-c", CHECKPOINTER], tasks=2, gpus=GPUS_PER_NODE, queue="b",
                          env={"CKPT": str(ckpt)})
    until(world.state(victim, "running"), 60, "the borrower to run")
    until(lambda: "running" in world.log(victim, "worker-1"), 20, "rank 1 to be up")
    owner = world.submit("owner", [sys.executable, EXAMPLE, "--sleep", "1"], tasks=1, gpus=GPUS_PER_NODE)
    until(lambda: Job.objects.get(pk=victim).preempt_deadline is not None or
          Job.objects.get(pk=victim).state == "pending", 30, "the borrower to be reclaimed")
    deadline = Job.objects.get(pk=victim).preempt_deadline
    until(lambda: Path(f"{ckpt}.0").exists() and Path(f"{ckpt}.1").exists(), 10, "both ranks to get SIGTERM")
    from django.utils import timezone

    if timezone.now() < deadline - timedelta(seconds=1):  # SIGTERM came at the start of the grace period:
        assert job_processes(victim), "rank 1 ignores SIGTERM and must live until the deadline"
    until(world.state(victim, "pending"), 30, "the borrower to be requeued after its grace")
    requeued = Event.objects.filter(job_id=victim, kind="requeued").first()
    assert requeued is not None and requeued.time >= deadline  # rank 1 held on until the deadline
    assert requeued.data["released_gpus"] == 2 * GPUS_PER_NODE  # requeued whole: every GPU at once
    until(lambda: not job_processes(victim), 10, "rank 1 killed at the deadline")
    until(world.state(owner, "succeeded"), 60, "the owner to run in the reclaimed GPUs")


def test_time_limit_stops_and_fails_the_job(world):
    job_id = world.submit("capped", ["sh", "-c", "trap 'echo got TERM; exit 143' TERM; while :; do sleep 0.1; done"],
                          time_limit_seconds=3)
    until(world.state(job_id, "failed", "succeeded"), 60, "the time limit to end the job")
    job = world.job(job_id)
    assert job["state"] == "failed" and "time limit" in job["end_reason"], job
    assert "got TERM" in world.log(job_id, "worker-0")
    assert Event.objects.filter(job_id=job_id, kind="time_limit").exists()
    assert not job_processes(job_id)
    assert not Allocation.objects.filter(job_id=job_id, released_at__isnull=True).exists()


def test_agent_killed_node_fails_gang_requeued_runs_on_the_other_node(world):
    script = '[ "$GPUPLATFORM_ATTEMPT" -ge 1 ] && echo "second attempt on $(hostname)" || exec sleep 300'
    job_id = world.submit("survivor", ["sh", "-c", script], tasks=1, gpus=GPUS_PER_NODE)
    until(world.state(job_id, "running"), 60, "the job to run")
    first = Task.objects.get(job_id=job_id).node.name
    agent = next(a for a in world.agents if a.name == first)
    agent.process.send_signal(signal.SIGKILL)
    agent.process.wait()
    until(lambda: Node.objects.get(name=first).state == "not_ready", 30, "the silent node to be not_ready")
    until(world.state(job_id, "succeeded", "failed"), 60, "the requeued gang to finish")
    job = world.job(job_id)
    assert job["state"] == "succeeded" and job["attempt"] == 1, job
    assert job["tasks"][0]["node"] != first
    assert Event.objects.filter(job_id=job_id, kind="requeued_after_failure").exists()


def test_heartbeats_are_judged_by_the_server_clock(world):
    """heartbeat-clock-skew: a node 200 s slow that beats every second stays ready; one 1 h fast that stops
    beating is failed after the timeout and the grace."""
    from datetime import datetime, timedelta, timezone

    for name in ("slow", "fast"):  # each its own GPU: a UUID belongs to one node
        post_json(f"{world.api}/api/v1/nodes/register/", world.agent_token, {
            "name": name, "flavor": "H200", "gpus": [{"index": 0, "uuid": f"GPU-skew-{name}"}], "executor": "simulated"})
    began = time.monotonic()
    while time.monotonic() - began < 10:  # 2.5 x the worker's 4 s timeout
        now = datetime.now(timezone.utc)
        post_json(f"{world.api}/api/v1/nodes/slow/heartbeat/", world.agent_token,
                  {"time": (now - timedelta(seconds=200)).isoformat(), "gpus": []})
        if time.monotonic() - began < 1:
            post_json(f"{world.api}/api/v1/nodes/fast/heartbeat/", world.agent_token,
                      {"time": (now + timedelta(hours=1)).isoformat(), "gpus": []})
        assert Node.objects.get(name="slow").state == "ready"
        time.sleep(1)
    assert Node.objects.get(name="slow").state == "ready"
    assert round(Node.objects.get(name="slow").clock_offset_seconds) == -200
    assert Node.objects.get(name="fast").state == "not_ready"
