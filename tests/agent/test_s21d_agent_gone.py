"""A task stopped because its node agent exited (supervise.py --watch: an agent run with --stop-tasks-on-exit, the
local demo's) is the platform's doing, not the task's end: the supervisor records it in exit.json ("agent_gone": the
agent's pid), and the next agent reports the task lost with cause "agent_exited" (trial 21: a killed demo restarted
with --keep reported its kept tasks killed by signal 15, diagnosed as the task's failure, spending a restart).
Real processes: a short-lived fake "agent" (a sleep) watched by supervise.py, checked through /proc and cleaned up.
tests/platform/test_s21d_agent_exited.py checks what the server makes of the report."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuplatform.agent.executor import AGENT_EXITED, SUPERVISOR, ProcessExecutor, proc_stat, scan_proc
from tests.agent.proc_helpers import gone, wait_for

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the executor is Linux only")


def _under(root: Path) -> list[int]:
    """Live processes whose working directory is under `root` (the task's processes start in its directory)."""
    found = []
    for pid, st in scan_proc().items():
        if st.dead:
            continue
        try:
            cwd = Path(f"/proc/{pid}/cwd").resolve()
        except OSError:
            continue
        if cwd == root or root in cwd.parents:
            found.append(pid)
    return found


def _supervise(task_dir: Path, agent: subprocess.Popen, script: str, grace: float = 0.5) -> subprocess.Popen:
    task_dir.mkdir(parents=True)
    start = proc_stat(agent.pid).start_time
    return subprocess.Popen([sys.executable, "-I", SUPERVISOR, "--dir", str(task_dir), "--cwd", str(task_dir),
                             "--grace", str(grace), "--watch", f"{agent.pid}:{start}", "--", "sh", "-c", script],
                            stdin=subprocess.DEVNULL, start_new_session=True)


@pytest.mark.parametrize("script, end", [
    ("setsid sleep 300 & exec sleep 301", {"signal": 15}),
    ("trap 'exit 0' TERM; while :; do sleep 0.05; done", {"exit_code": 0}),  # a task that quits cleanly on SIGTERM
])
def test_the_supervisor_records_that_it_stopped_the_task_because_its_agent_went(tmp_path, procs, script, end):
    agent = subprocess.Popen(["sleep", "300"])  # the fake agent
    procs.append(agent)
    task_dir = tmp_path / "tasks" / "1-0"
    sup = _supervise(task_dir, agent, script)
    procs.append(sup)
    wait_for(lambda: len(_under(task_dir)) >= 2, 10, "the task's processes")
    time.sleep(0.3)
    assert not (task_dir / "exit.json").exists()  # the agent runs: nothing stopped
    agent.kill()
    agent.wait()
    assert sup.wait(timeout=15) == 0
    exit_json = json.loads((task_dir / "exit.json").read_text())
    assert isinstance(exit_json.pop("ended_at"), float), exit_json  # when it ended (session 27)
    assert exit_json == {**end, "agent_gone": agent.pid}, exit_json
    log = (task_dir / "output.log").read_text()
    assert f"[gpuplatform] the agent (pid {agent.pid}) is gone: stopping the task" in log
    wait_for(lambda: not _under(task_dir), 5, "every process of the task to end (setsid child included)")


def test_a_task_that_ends_on_its_own_while_its_agent_runs_has_no_agent_gone(tmp_path, procs):
    """The contrast: the watch changes nothing in the exit of a task that ended by itself."""
    agent = subprocess.Popen(["sleep", "300"])
    procs.append(agent)
    task_dir = tmp_path / "tasks" / "2-0"
    sup = _supervise(task_dir, agent, "sleep 0.3; exit 3")
    procs.append(sup)
    assert sup.wait(timeout=15) == 0
    assert {k: v for k, v in json.loads((task_dir / "exit.json").read_text()).items() if k != "ended_at"} == {
        "exit_code": 3}
    assert agent.poll() is None


AGENT = """
import sys, time
sys.path[:0] = [{repo!r}, {platform!r}]
from gpuplatform.agent.executor import ProcessExecutor
from tests.agent.proc_helpers import assignment
ex = ProcessExecutor({work!r}, supervisor_grace=0.5, stop_tasks_on_exit=True)
print(ex.start(assignment(7, {cmd!r})), flush=True)
time.sleep(600)
"""


def test_the_next_agent_reports_such_a_task_lost_with_the_cause_agent_exited(tmp_path, procs):
    """An agent run with --stop-tasks-on-exit is SIGKILLed (its demo killed); its supervisor stops the task; the next
    agent on the same work directory (demo --keep) recovers it and reports it lost, cause agent_exited, naming the
    agent, instead of "exited, signal 15"."""
    work = tmp_path / "agent"
    script = AGENT.format(repo=str(REPO), platform=str(REPO / "platform"), work=str(work),
                          cmd="echo up; exec sleep 300")
    agent = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    procs.append(agent)
    assert agent.stdout.readline().strip() == "started"
    task_dir = work / "tasks" / "7-0"
    wait_for(lambda: _under(task_dir), 10, "the task's process")
    agent.kill()
    agent.wait()
    agent.stdout.close()
    wait_for(lambda: (task_dir / "exit.json").exists() and not _under(task_dir), 10, "the supervisor's stop")
    sup = json.loads((task_dir / "supervisor.json").read_text())["pid"]
    wait_for(lambda: gone(sup), 5, "the supervisor to exit")
    assert {k: v for k, v in json.loads((task_dir / "exit.json").read_text()).items() if k != "ended_at"} == {
        "signal": 15, "agent_gone": agent.pid}

    ex = ProcessExecutor(str(work), supervisor_grace=0.5)
    ended = {(r["task"], r["attempt"]): r for r in ex.recover()}
    rec = ended[(7, 0)]
    assert rec["signal"] is None and rec["exit_code"] is None and rec["cause"] == AGENT_EXITED, rec
    assert rec["lost"] == (f"the node agent (pid {agent.pid}) exited while the task ran; its supervisor stopped the "
                           "task (the agent runs with --stop-tasks-on-exit): it ended with signal 15 (SIGTERM)"), rec
    lost = [e for e in ex.unreported() if e["event"] == "lost"]
    ended_at = json.loads((task_dir / "exit.json").read_text())["ended_at"]  # the supervisor's (session 27)
    assert lost == [{"task": 7, "attempt": 0, "event": "lost", "message": rec["lost"], "cause": AGENT_EXITED,
                     "time": ended_at}]
    assert not [e for e in ex.unreported() if e["event"] == "exited"]

