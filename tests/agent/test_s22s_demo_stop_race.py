"""A task stopped because its node agent exited is reported lost, cause agent_exited, whichever comes first: its
supervisor seeing the agent gone (supervise.py --watch, every WATCH_SECONDS) or the stop of the agents' tasks that
follows the agents' own stop (the local demo's stop_agents -> local.stop_tasks_in, or a SIGTERM to the task's
processes right after the agent's). New-user trial 22: `kill -TERM` of `manage.py demo` during the README's 2-task
rendezvous job; one task read lost (agent_exited), the other "exit code 143" (stop_tasks_in's SIGTERM reached it
before its supervisor's next look), and after `--keep` the job failed on that exit instead of being requeued.
Real processes, checked through /proc and cleaned up."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuplatform.agent.executor import AGENT_EXITED, SUPERVISOR, ProcessExecutor, proc_stat
from gpuplatform.agent.local import stop_tasks_in
from tests.agent.proc_helpers import assignment, gone, wait_ended, wait_for

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the executor is Linux only")

AGENT = """
import sys, time
sys.path[:0] = [{repo!r}, {platform!r}]
from gpuplatform.agent.executor import ProcessExecutor
from tests.agent.proc_helpers import assignment
ex = ProcessExecutor({work!r}, supervisor_grace=0.5, stop_tasks_on_exit=True)
for task in (1, 2):
    ex.start(assignment(task, "echo up; exec sleep 300"))
print("started", flush=True)
time.sleep(600)
"""


def _says_up(path: Path) -> bool:
    try:
        return path.read_text().startswith("up")
    except OSError:
        return False


def _supervisor_pids(work: Path) -> list[int]:
    out = []
    for d in sorted((work / "tasks").iterdir()):
        sup = json.loads((d / "supervisor.json").read_text())
        out.append(sup["pid"])
    return out


def test_the_demos_stop_right_after_the_agents_exit_reports_every_task_lost_agent_exited(tmp_path, procs):
    """The demo's path: the agent (run with --stop-tasks-on-exit) exits, and stop_tasks_in SIGTERMs its tasks at once,
    before their supervisors' next look at the agent. Both tasks must be reported lost with cause agent_exited by the
    next agent (demo --keep), none as an exit code or a signal."""
    work = tmp_path / "agent"
    script = AGENT.format(repo=str(REPO), platform=str(REPO / "platform"), work=str(work))
    agent = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    procs.append(agent)
    assert agent.stdout.readline().strip() == "started"
    wait_for(lambda: all(_says_up(work / "tasks" / f"{t}-0" / "output.log") for t in (1, 2)), 10,
             "both tasks to run")
    sups = _supervisor_pids(work)
    agent.kill()
    agent.wait()
    agent.stdout.close()
    stop_tasks_in([work], grace=2.0)  # what demo.stop_agents does next, at once
    wait_for(lambda: all(gone(p) for p in sups), 10, "the supervisors to exit")

    ex = ProcessExecutor(str(work), supervisor_grace=0.5)
    ended = {(r["task"], r["attempt"]): r for r in ex.recover()}
    # stop_tasks_in's own executor recorded the results already: the next agent reports what it recorded
    reports = {(e["task"], e["attempt"]): e for e in ex.unreported() if e["event"] in ("exited", "lost")}
    assert set(reports) == {(1, 0), (2, 0)}, (ended, reports)
    for key, e in reports.items():
        assert e["event"] == "lost" and e["cause"] == AGENT_EXITED, (key, e)
        assert "exited while the task ran" in e["message"], e


def test_a_stop_with_cause_agent_exited_is_reported_lost_however_the_task_ends(tmp_path):
    """The executor's side alone (a supervisor that watches no agent, so exit.json has no agent_gone): stop(...,
    cause=AGENT_EXITED) makes the task lost with that cause, its SIGTERM's exit code named in the message."""
    ex = ProcessExecutor(str(tmp_path / "w"), supervisor_grace=0.5)
    try:
        _stop_with_cause(ex, tmp_path)
    finally:  # a failed assertion leaves no task running (each stop's supervisor kills at its deadline)
        for key in ((5, 0), (6, 0)):
            try:
                ex.stop(key, time.monotonic())
            except Exception:  # noqa: BLE001 (already ended, or never started)
                pass


def _stop_with_cause(ex, tmp_path) -> None:
    key = (5, 0)
    assert ex.start(assignment(5, "trap 'exit 143' TERM; echo up; while :; do sleep 0.05; done")) == "started"
    wait_for(lambda: _says_up(tmp_path / "w" / "tasks" / "5-0" / "output.log"), 10, "the task to run")
    assert ex.stop(key, time.monotonic() + 5, cause=AGENT_EXITED)
    ended = wait_ended(ex, [key], timeout=10)
    rec = ended[key]
    status = json.loads((tmp_path / "w" / "tasks" / "5-0" / "exit.json").read_text())
    assert isinstance(status.pop("ended_at"), float) and status == {"exit_code": 143}  # ended_at: session 27
    assert rec["exit_code"] is None and rec["signal"] is None and rec["cause"] == AGENT_EXITED, rec
    assert rec["lost"].endswith("it ended with exit code 143"), rec
    # a plain stop (a cancel) still reports the task's own end
    assert ex.start(assignment(6, "trap 'exit 143' TERM; echo up; while :; do sleep 0.05; done")) == "started"
    wait_for(lambda: _says_up(tmp_path / "w" / "tasks" / "6-0" / "output.log"), 10, "the task to run")
    assert ex.stop((6, 0), time.monotonic() + 5)
    assert wait_ended(ex, [(6, 0)], timeout=10)[(6, 0)]["exit_code"] == 143


def test_the_supervisor_marks_agent_gone_when_the_task_ends_after_the_agent_went_before_its_next_look(tmp_path, procs):
    """The supervisor's side alone: the fake agent dies and the task is SIGTERMed by someone else within the same
    WATCH_SECONDS; the supervisor reaps the task before it looks at the agent again, and still records agent_gone."""
    agent = subprocess.Popen(["sleep", "300"])
    procs.append(agent)
    task_dir = tmp_path / "tasks" / "1-0"
    task_dir.mkdir(parents=True)
    sup = subprocess.Popen([sys.executable, "-I", SUPERVISOR, "--dir", str(task_dir), "--grace", "0.5",
                            "--watch", f"{agent.pid}:{proc_stat(agent.pid).start_time}", "--",
                            "sh", "-c", "echo up; exec sleep 300"], stdin=subprocess.DEVNULL, start_new_session=True)
    procs.append(sup)
    wait_for(lambda: _says_up(task_dir / "output.log"), 10, "the task to run")
    agent.kill()
    agent.wait()
    os.killpg(sup.pid, signal.SIGTERM)  # the task's group (the supervisor ignores it): the sleep dies at once
    assert sup.wait(timeout=15) == 0
    exit_json = json.loads((task_dir / "exit.json").read_text())
    assert isinstance(exit_json.pop("ended_at"), float), exit_json  # when it ended (session 27)
    assert exit_json == {"signal": 15, "agent_gone": agent.pid}, exit_json
