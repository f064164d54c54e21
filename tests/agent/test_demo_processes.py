"""Process lifetime of the demos that run tasks for real (new-user trial 14, F2 / F3 / F6): whatever died
before, no agent and no task process (setsid / nohup children included) survives the demo's stop, and a
demo killed with SIGKILL takes its agents' tasks with it. Real processes: `manage.py demo --local-agents 1`
(and --federation 1) on a SQLite file in tmp_path, a job submitted over REST, checked through /proc."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from gpuplatform.agent.executor import ProcessExecutor, scan_proc
from gpuplatform.agent.local import agent_argv
from tests.agent.proc_helpers import wait_for

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the executor is Linux only")
# A task that forks: a child in its own session (setsid), a nohup'd child, then the main process sleeps.
TASK = ["sh", "-c", "setsid sleep 300 & nohup sleep 301 >/dev/null 2>&1 & exec sleep 302"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes_under(root: Path) -> list[int]:
    """Live pids whose working directory is under `root` (every task process starts in its task directory,
    and nothing in these tasks changes directory) or whose command line names it (the agents)."""
    found = []
    for pid, st in scan_proc().items():
        if st.dead or pid == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().decode(errors="replace")
        except OSError:
            continue
        if cwd.startswith(str(root)) or f"--work-dir\0{root}" in cmd:
            found.append(pid)
    return found


def _agent_pids(root: Path) -> list[int]:
    return [p for p in _processes_under(root) if "gpu_agent" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]


def _call(url: str, token: str | None = None, body: dict | None = None, form: dict | None = None):
    headers = {"Authorization": f"Token {token}"} if token else {}
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    elif form is not None:
        data = "&".join(f"{k}={v}" for k, v in form.items()).encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=10) as resp:
        return json.loads(resp.read())


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url + "/healthz", timeout=2).read()
        return True
    except OSError:
        return False


class Demo:
    def __init__(self, tmp: Path, *args: str, env: dict | None = None):
        self.tmp, self.port = tmp, _free_port()
        self.api = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}", "REDIS_URL": "",
               "DEMO_AGENTS_DIR": str(tmp / "agents"), "FEDERATION_DEMO_DIR": str(tmp / "fed"), **(env or {})}
        env.pop("CI", None)
        self.log = open(tmp / "demo.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "manage.py", "demo", "--port", str(self.port), "--password",
                                      "pw-demo-123", *args], cwd=REPO, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT)

    def output(self) -> str:
        return (self.tmp / "demo.log").read_text(errors="replace")

    def wait_up(self, api: str | None = None, agents: int = 1):
        wait_for(lambda: _answers(api or self.api) or self.proc.poll() is not None, 180, "the demo to answer", 0.5)
        assert self.proc.poll() is None, self.output()

    def submit(self, api: str | None = None) -> int:
        api = api or self.api
        token = _call(f"{api}/api/v1/auth-token/", form={"username": "demo", "password": "pw-demo-123"})["token"]
        return _call(f"{api}/api/v1/jobs/", token, {"name": "lifetime", "queue": "demo", "command": TASK,
                                                    "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 1}]})["id"]

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        for pid in _processes_under(self.tmp):  # never leave a process behind, even when a test fails
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _task_processes(root: Path) -> list[int]:
    return [p for p in _processes_under(root) if p not in _agent_pids(root)]


@pytest.fixture
def demo_dir(tmp_path):
    made = []
    yield tmp_path, made
    for d in made:
        d.close()


def test_a_dead_agents_tasks_are_gone_when_the_local_demo_stops_and_it_says_so_truly(demo_dir):
    """F2: an agent killed with SIGKILL; Ctrl-C; none of its task's processes is left, the last line says so."""
    tmp, made = demo_dir
    demo = Demo(tmp, "--local-agents", "1")
    made.append(demo)
    demo.wait_up()
    demo.submit()
    root = tmp / "agents"
    wait_for(lambda: len(_task_processes(root)) >= 4, 60, "the task's four processes")  # supervisor, 3 sleeps
    for pid in _agent_pids(root):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: "agent(s) exited: local-0" in demo.output(), 10, "the demo to notice the dead agent")
    demo.proc.send_signal(signal.SIGINT)
    demo.proc.wait(timeout=60)
    assert not _processes_under(root), (_processes_under(root), demo.output()[-2000:])
    assert "local demo stopped" in demo.output() and "every process it started is gone, checked" in demo.output()


def test_a_local_demo_killed_with_sigkill_leaves_no_agent_and_no_task(demo_dir):
    """F3: the demo dies hard; its agents go (PDEATHSIG) and their tasks with them (the supervisors watch
    their agent: --stop-tasks-on-exit), not only at the next demo-local."""
    tmp, made = demo_dir
    demo = Demo(tmp, "--local-agents", "1")
    made.append(demo)
    demo.wait_up()
    demo.submit()
    root = tmp / "agents"
    wait_for(lambda: len(_task_processes(root)) >= 4, 60, "the task's four processes")
    demo.proc.kill()
    demo.proc.wait()
    wait_for(lambda: not _processes_under(root), 20, "every agent and task process to end")


def test_a_dead_workers_tasks_are_gone_when_the_federation_demo_stops(demo_dir):
    """F6: a worker killed with SIGKILL while its task runs; Ctrl-C on the manager; nothing is left."""
    tmp, made = demo_dir
    demo = Demo(tmp, "--federation", "1")
    made.append(demo)
    demo.wait_up()  # the manager answers once its worker does
    worker_api = f"http://127.0.0.1:{demo.port + 1}"
    demo.submit(worker_api)
    root = tmp / "fed" / "agents-0"
    wait_for(lambda: len(_task_processes(root)) >= 4, 60, "the task's four processes")
    worker = [p.pid for p in scan_proc().values() if p.ppid == demo.proc.pid]
    assert worker
    for pid in worker:
        os.kill(pid, signal.SIGKILL)
    demo.proc.send_signal(signal.SIGINT)
    demo.proc.wait(timeout=90)
    assert not _processes_under(root), (_processes_under(root), demo.output()[-2000:])
    assert "federation demo stopped (every process it started is gone, checked; out of its sight:" in demo.output()


def test_local_agents_stop_their_tasks_on_exit():
    assert "--stop-tasks-on-exit" in agent_argv("http://x", "n", work_dir=Path("/tmp/x"))
    assert "--stop-tasks-on-exit" not in agent_argv("http://x", "n", work_dir=Path("/tmp/x"), stop_tasks_on_exit=False)


AGENT = """
import sys, time
sys.path[:0] = [{repo!r}, {platform!r}]
from gpuplatform.agent.executor import ProcessExecutor
from tests.agent.proc_helpers import assignment
ex = ProcessExecutor({work!r}, supervisor_grace=0.5, stop_tasks_on_exit={flag})
print(ex.start(assignment(1, {cmd!r})), flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("flag", [True, False])
def test_a_supervisor_started_with_watch_ends_its_task_when_the_agent_dies(tmp_path, flag):
    """F3 at its root: an executor with stop_tasks_on_exit passes --watch; its agent SIGKILLed, the whole task
    (setsid and nohup children included) is stopped and exit.json written. Without it the task outlives the
    agent (the default: a restarted agent adopts it)."""
    work = tmp_path / "agent"
    script = AGENT.format(repo=str(REPO), platform=str(REPO / "platform"), work=str(work), flag=flag,
                          cmd="setsid sleep 300 & nohup sleep 301 >/dev/null 2>&1 & exec sleep 302")
    agent = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert agent.stdout.readline().strip() == "started"
        tasks = work / "tasks" / "1-0"
        wait_for(lambda: len(_processes_under(tasks)) >= 4, 10, "the task's processes")
        agent.kill()
        agent.wait()
        if flag:
            wait_for(lambda: not _processes_under(tasks), 10, "the task to end with its agent")
            assert "the agent (pid" in (tasks / "output.log").read_text()
            status = json.loads((tasks / "exit.json").read_text())
            assert isinstance(status.pop("ended_at"), float)  # when it ended (session 27)
            assert status == {"signal": signal.SIGTERM, "agent_gone": agent.pid}
        else:
            time.sleep(1.5)
            assert len(_processes_under(tasks)) >= 4
    finally:
        agent.kill()
        ex = ProcessExecutor(str(work))
        ex.recover()
        for key in ex.live_keys():
            ex.stop(key, time.monotonic())
        wait_for(lambda: not _processes_under(work), 10, "the clean-up")


def test_a_restarted_local_demo_does_not_mark_its_own_nodes_not_ready(tmp_path):
    """F22: on every restart the first cycle's failure check judged the last run's stale heartbeats and logged
    every node going not_ready (ready -> not_ready), a second before its agent registered. The cycle now starts once this run's
    agents have reported; a node whose agent does not report is still judged (not tested here)."""
    import sqlite3

    for run in range(2):  # the agents beat every 5 s: a 7-s timeout judges only a silent node
        demo = Demo(tmp_path, "--local-agents", "2", "--duration-seconds", "6",
                    env={"HEARTBEAT_TIMEOUT_SECONDS": "7"})
        try:
            demo.proc.wait(timeout=180)
        finally:
            demo.close()
        assert "local demo stopped" in demo.output()
        if run == 0:
            time.sleep(8)  # the first run's last heartbeats are now older than the 7-s timeout
    with sqlite3.connect(tmp_path / "db.sqlite3") as db:  # the second run cleared the first run's events
        said = [m for (m,) in db.execute("SELECT message FROM gpuplatform_event WHERE message LIKE '%not_ready%'")]
    assert not said, said
