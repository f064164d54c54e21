"""New-user trial 22, G8, end to end: `manage.py demo --local-agents 1` (real processes, a SQLite file in tmp_path),
a job running, its agent killed with SIGKILL: the demo reports the exit at once (failures.agent_exited), its log
says the job is requeued, and the API shows the job pending within seconds, not after heartbeat expiry
(HEARTBEAT_TIMEOUT_SECONDS + NODE_FAILURE_GRACE_SECONDS, ~3.5 min in the trial)."""
from __future__ import annotations

import os
import signal
import time

from tests.agent.proc_helpers import wait_for
from tests.agent.test_demo_processes import (  # noqa: F401  (demo_dir: a fixture)
    Demo, _agent_pids, _call, _task_processes, demo_dir,
)


def test_a_killed_agents_job_is_requeued_within_seconds(demo_dir):
    tmp, made = demo_dir
    demo = Demo(tmp, "--local-agents", "1")
    made.append(demo)
    demo.wait_up()
    job = demo.submit()
    root = tmp / "agents"
    wait_for(lambda: len(_task_processes(root)) >= 4, 60, "the task's four processes")
    token = _call(f"{demo.api}/api/v1/auth-token/", form={"username": "demo", "password": "pw-demo-123"})["token"]
    assert _call(f"{demo.api}/api/v1/jobs/{job}/", token)["state"] == "running"
    killed = time.monotonic()
    for pid in _agent_pids(root):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: f"job(s) {job} are requeued whole" in demo.output(), 15, "the demo to report the dead agent")
    wait_for(lambda: _call(f"{demo.api}/api/v1/jobs/{job}/", token)["state"] == "pending", 15,
             "the job to be requeued")
    assert time.monotonic() - killed < 30
    body = _call(f"{demo.api}/api/v1/jobs/{job}/", token)
    assert body["pending_reason"].startswith("agent exited on local-0"), body["pending_reason"]
    node = _call(f"{demo.api}/api/v1/nodes/local-0/", token)
    assert node["state"] == "not_ready", node
    demo.proc.send_signal(signal.SIGINT)
    demo.proc.wait(timeout=60)
    assert "every process it started is gone, checked" in demo.output(), demo.output()[-2000:]
