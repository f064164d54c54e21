"""New-user trial 21, F4 / F4b: a local demo killed with SIGKILL and restarted with --keep started its kept running
tasks a second time ("server did not accept started of task 125-0: task is running, not bound", and the new copy ran
on). The agent now starts a task only while the server's state of it is `bound`, and when the server refuses a
"started" it stops what it just started and never reports that copy's end or output as the task's. F4b: the agent's
last line tells the truth for --stop-tasks-on-exit. Real processes, each checked gone."""
from __future__ import annotations

import io
import time
from pathlib import Path

from gpuplatform.agent import ProcessExecutor
from gpuplatform.agent.runner import AgentLoop
from gpuplatform.management.commands.gpu_agent import stopped_message
from tests.agent.proc_helpers import assignment, gone, wait_for
from tests.agent.test_runner import SERVER_TIME, control_plane  # noqa: F401  (fixture)


def _answer(*tasks) -> dict:
    return {"server_time": SERVER_TIME.isoformat(), "poll_seconds": 0.05, "stop_grace_seconds": 0.5,
            "tasks": list(tasks)}


def _clean(ex: ProcessExecutor) -> None:
    for key in ex.live_keys():
        ex.stop(key, time.monotonic())
    wait_for(lambda: (ex.poll() or True) and not ex.live_keys(), 10, "the clean-up")


def test_a_task_the_server_counts_running_is_never_started_again_and_is_reported_lost_once(control_plane, tmp_path):
    """The agent's records went (a wiped or new work directory); the server still counts the task running: it is
    not started (a second copy of the attempt), it is reported lost, once; a bound task beside it starts."""
    url, cp = control_plane
    cp.fail_next_reports = 0
    ex = ProcessExecutor(str(tmp_path / "agent"), supervisor_grace=0.2)
    loop = AgentLoop(url, "tok", "n1", lambda: [], ex, poll=0.05, resources=(0, 0))
    ghost = dict(assignment(4, "echo must-not-run > ran.txt; sleep 30"), state="running")
    fresh = dict(assignment(5, "sleep 30", gpus=[{"index": 1, "uuid": "GPU-5"}]), state="bound")
    try:
        for _ in range(2):
            loop.apply(_answer(ghost, fresh))
            assert loop.report()
        assert not ex.known((4, 0)) and not (Path(ex.task_dir((4, 0))) / "ran.txt").exists()
        lost = [e for e in cp.delivered() if e["task"] == 4]
        assert [e["event"] for e in lost] == ["lost"], lost
        assert "counts this task running" in lost[0]["message"] and "no record of starting it" in lost[0]["message"]
        assert ex.live_keys() == [(5, 0)] and cp.event(5, "started")
    finally:
        _clean(ex)


def test_a_refused_start_is_stopped_and_its_end_and_output_are_not_reported(control_plane, tmp_path):
    """The server refuses a start (its task is running elsewhere, ended, or its attempt is over): no process of that
    copy survives the stop grace, and neither its exit nor its output reaches the server as the task's."""
    url, cp = control_plane
    cp.fail_next_reports = 0
    cp.refuse = {(6, "started")}
    ex = ProcessExecutor(str(tmp_path / "agent"), supervisor_grace=0.2)
    loop = AgentLoop(url, "tok", "n1", lambda: [], ex, poll=0.05, resources=(0, 0))
    task = dict(assignment(6, "echo copy-output; trap '' TERM; while :; do sleep 0.05; done"), state="bound")
    try:
        loop.apply(_answer(task))
        pid = ex.meta((6, 0))["pid"]
        out = Path(ex.task_dir((6, 0))) / "output.log"
        wait_for(lambda: out.exists() and "copy-output" in out.read_text(), 5, "the copy's output")
        assert loop.report()
        assert ex.meta((6, 0))["refused"] and ex.meta((6, 0))["stop"]  # stopping: SIGTERM now, SIGKILL at 0.5 s
        end = time.monotonic() + 5
        while time.monotonic() < end and ex.meta((6, 0)) is not None:
            loop.apply(_answer(task))  # still listed as run: never started again
            ex.poll()
            loop.report()
            time.sleep(0.05)
        assert ex.meta((6, 0)) is None and not ex.live_keys() and gone(pid)
        assert not ex.alive_pids((6, 0))
        assert [e["event"] for e in cp.delivered() if e["task"] == 6] == ["started"]
        assert not [c for body in cp.report_calls for c in body["logs"] if c["task"] == 6]
        assert ex.unreported() == [] and ex.pending_logs() == []
        # an agent restarted on the same work directory does not report it either, nor start it again
        ex2 = ProcessExecutor(str(tmp_path / "agent"))
        assert ex2.recover() == [] and ex2.unreported() == [] and ex2.start(task) == "exists"
    finally:
        _clean(ex)


def test_the_agents_last_line_says_what_happens_to_its_tasks(tmp_path):
    """F4b: with --stop-tasks-on-exit the tasks are stopped, not adopted; without it they keep running."""
    for flag in (True, False):
        ex = ProcessExecutor(str(tmp_path / f"agent-{flag}"), supervisor_grace=0.2, stop_tasks_on_exit=flag)
        assert stopped_message("n1", ex) == "n1: agent stopped; no task of it was running"
        ex.start(assignment(1, "sleep 30"))
        try:
            said = stopped_message("n1", ex)
            if flag:
                assert "its 1 running task is stopped with it (--stop-tasks-on-exit" in said, said
                assert "adopted" not in said and "keep running" not in said
            else:
                assert said == "n1: agent stopped; its 1 running task keeps running and is adopted at its next start"
        finally:
            _clean(ex)
    assert stopped_message("n1", None) == "n1: agent stopped (it runs no task)"


def test_the_gpu_agent_command_prints_that_line_on_sigint(monkeypatch, tmp_path):
    """The command's KeyboardInterrupt path (Ctrl-C, or SIGTERM turned into it) prints stopped_message's line."""
    from django.core.management import call_command

    import gpuplatform.agent as agent_pkg

    def interrupted(*args, executor=None, **kwargs):
        executor.start(assignment(3, "sleep 30"))
        raise KeyboardInterrupt

    monkeypatch.setattr(agent_pkg, "run_agent", interrupted)
    out = io.StringIO()
    work = tmp_path / "work"
    xml = Path(__file__).resolve().parents[2] / "data" / "nvidia-h200-node" / "nvidia-smi-q.xml"
    try:
        call_command("gpu_agent", "--api", "http://127.0.0.1:9", "--token", "tok", "--node-name", "n1",
                     "--work-dir", str(work), "--stop-tasks-on-exit", "--nvidia-smi-xml", str(xml), "--gpus", "1",
                     "--address", "127.0.0.1", stdout=out)
        assert "n1: agent stopped; its 1 running task is stopped with it" in out.getvalue(), out.getvalue()
    finally:
        ex = ProcessExecutor(str(work))
        ex.recover()
        for key in ex.live_keys():
            ex.stop(key, time.monotonic())
        wait_for(lambda: (ex.poll() or True) and not ex.live_keys(), 10, "the clean-up")
