"""The agent loop (runner.AgentLoop through run_agent) against a tiny fake control plane: assignments in, real
processes started and stopped, reports out (retried after a failure, dropped when refused)."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.core.management import call_command

from gpuplatform.agent import ProcessExecutor, run_agent
from gpuplatform.agent.runner import AgentLoop, parse_server_time
from tests.agent.proc_helpers import assignment

XML_PATH = Path(__file__).resolve().parents[2] / "data" / "nvidia-h200-node" / "nvidia-smi-q.xml"
SERVER_TIME = datetime(2030, 1, 1, tzinfo=timezone.utc)  # far from the node's clock: only differences count


class FakeControlPlane:
    """Serves register / heartbeat / assignments / reports for one node and records what it got."""

    def __init__(self):
        self.lock = threading.Lock()
        self.registered: list[dict] = []
        self.beats = 0
        self.report_calls: list[dict] = []  # every reports body answered 2xx
        self.failed_reports = 0
        self.fail_next_reports = 1  # the first reports call fails (503): the agent must send it again
        self.refuse = {(1, "exited")}  # answered accepted: false (a refused "started" stops the task: see test_s21a_*)
        self.tasks: list[dict] = []
        self.assignment_calls = 0

    def delivered(self) -> list[dict]:
        with self.lock:
            return [e for body in self.report_calls for e in body["tasks"]]

    def event(self, task: int, event: str) -> dict | None:
        return next((e for e in self.delivered() if e["task"] == task and e["event"] == event), None)

    def handler(self):
        cp = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: dict):
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                assert self.headers["Authorization"] == "Token tok"
                if self.path != "/api/v1/nodes/n1/assignments/":
                    return self._send(404, {"detail": "no"})
                with cp.lock:
                    cp.assignment_calls += 1
                    tasks = json.loads(json.dumps(cp.tasks))
                self._send(200, {"server_time": SERVER_TIME.isoformat(), "poll_seconds": 0.05,
                                 "stop_grace_seconds": 0.5, "tasks": tasks})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with cp.lock:
                    if self.path == "/api/v1/nodes/register/":
                        cp.registered.append(body)
                        return self._send(201, {"name": body["name"]})
                    if self.path == "/api/v1/nodes/n1/heartbeat/":
                        cp.beats += 1
                        return self._send(200, {})
                    assert self.path == "/api/v1/nodes/n1/reports/"
                    if cp.fail_next_reports:
                        cp.fail_next_reports -= 1
                        cp.failed_reports += 1
                        return self._send(503, {"detail": "try later"})
                    cp.report_calls.append(body)
                    answer = {"tasks": [dict(task=e["task"], attempt=e["attempt"], event=e["event"],
                                             accepted=(e["task"], e["event"]) not in cp.refuse, detail="")
                                        for e in body["tasks"]],
                              "logs": [dict(task=c["task"], attempt=c["attempt"], accepted=True,
                                            next_offset=c["offset"] + len(c["data"].encode()))
                                       for c in body["logs"]]}
                self._send(200, answer)

            def log_message(self, *args):
                pass

        return Handler


@pytest.fixture
def control_plane():
    cp = FakeControlPlane()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), cp.handler())
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", cp
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def test_agent_loop_runs_stops_and_reports(control_plane, tmp_path):
    url, cp = control_plane
    ex = ProcessExecutor(str(tmp_path / "agent"), supervisor_grace=0.3)
    t1 = assignment(1, "echo hi >> ran.txt; echo hi; exit 0", gpus=[{"index": 0, "uuid": "GPU-1"}])
    # each shell says when its trap is set ("started" is reported at spawn: under load a TERM could come first)
    t2 = assignment(2, "trap '' TERM; touch trapped; while :; do sleep 0.05; done", gpus=[{"index": 1, "uuid": "GPU-2"}])
    t3 = assignment(3, "trap 'exit 5' TERM; touch trapped; while :; do sleep 0.05; done",
                    gpus=[{"index": 2, "uuid": "GPU-3"}])
    cp.tasks = [t1, t2, t3]
    phase = {"b_at": None}
    limit = time.monotonic() + 20  # only reached on failure

    def should_stop():
        if phase["b_at"] is None and cp.event(2, "started") and cp.event(3, "started") and all(
                (Path(ex.task_dir((t, 0))) / "trapped").exists() for t in (2, 3)):
            # phase B: stop task 2 with a deadline 0.4 s after server_time; task 3 disappears (grace 0.5 s);
            # task 1 (ended) is still listed as "run": it must not run again
            with cp.lock:
                cp.tasks = [t1, dict(t2, action="stop",
                                     stop_deadline=(SERVER_TIME + timedelta(seconds=0.4)).isoformat())]
            phase["b_at"] = time.monotonic()
        done = all(cp.event(t, "exited") for t in (1, 2, 3)) and not ex.pending_logs()
        return done or time.monotonic() > limit

    beats = run_agent(url, "tok", "n1", lambda: [], interval=0.2, executor=ex, address="127.0.0.1", runtime="",
                      poll=0.05, resources=(2000, 4096), should_stop=should_stop)
    try:
        assert cp.registered == [{"name": "n1", "flavor": "", "cpu_milli": 2000, "memory_mib": 4096,
                                  "labels": {"nvidia.com/gpu.count": "0"}, "gpus": [], "address": "127.0.0.1",
                                  "runtime": "", "executor": "agent"}]
        assert beats >= 1 and cp.beats == beats
        assert cp.failed_reports == 1  # the first reports call failed and was sent again
        ended_at = time.monotonic()
        assert cp.event(1, "exited")["exit_code"] == 0
        assert (cp.event(2, "exited")["exit_code"], cp.event(2, "exited")["signal"]) == (None, 9)
        assert cp.event(3, "exited")["exit_code"] == 5
        assert phase["b_at"] is not None and ended_at - phase["b_at"] >= 0.4  # the SIGKILL waited for the deadline
        delivered = [(e["task"], e["event"]) for e in cp.delivered()]
        assert sorted(delivered) == sorted({(t, ev) for t in (1, 2, 3) for ev in ("started", "exited")})
        sup2 = json.loads((Path(ex.task_dir((2, 0))) / "meta.json").read_text())["pid"]
        assert cp.event(2, "started")["pid"] == sup2
        logs = [c for body in cp.report_calls for c in body["logs"] if c["task"] == 1]
        assert [(c["offset"], c["data"]) for c in logs] == [(0, "hi\n")]
        assert (Path(ex.task_dir((1, 0))) / "ran.txt").read_text() == "hi\n"  # started once
        assert ex.live_keys() == [] and ex.unreported() == []
    finally:
        for key in ex.live_keys():
            ex.stop(key, time.monotonic())
        ex.poll()


def test_agent_loop_survives_a_dead_control_plane(tmp_path):
    """Nothing listens: the loop keeps going (register retried every round), the outbox keeps the events."""
    ex = ProcessExecutor(str(tmp_path / "agent"))
    ex.start(assignment(4, "exit 2"))
    loop = AgentLoop("http://127.0.0.1:9", "tok", "n1", lambda: [], ex, interval=0.05, poll=0.05,
                     resources=(0, 0), timeout=0.5)
    deadline = time.monotonic() + 5
    loop.run(should_stop=lambda: (loop.cycles >= 3 and not ex.live_keys()) or time.monotonic() > deadline)
    assert loop.cycles >= 3 and not loop.registered and loop.beats == 0
    assert [e["event"] for e in ex.unreported()] == ["started", "exited"]


def test_stop_deadline_uses_the_server_clock(tmp_path):
    """local deadline = now + (stop_deadline - server_time), whatever the node's own clock says."""
    ex = ProcessExecutor(str(tmp_path / "agent"))
    loop = AgentLoop("http://127.0.0.1:9", "tok", "n1", lambda: [], ex, poll=1)
    ex.start(assignment(5, "trap '' TERM; while :; do sleep 0.05; done"))
    try:
        loop.apply({"server_time": "2001-01-01T00:00:00Z", "poll_seconds": 0.5, "stop_grace_seconds": 7,
                    "tasks": [dict(assignment(5, ""), action="stop", stop_deadline="2001-01-01T00:00:30+00:00")]},
                   now=1000.0)
        assert ex.meta((5, 0))["stop"]["deadline"] == 1030.0
        assert loop.poll_seconds == 0.5 and loop.stop_grace_seconds == 7
        assert parse_server_time("2026-12-01T03:00:00.123456+00:00").microsecond == 123456
        assert parse_server_time("garbage") is None
    finally:
        ex.stop((5, 0), time.monotonic())
        ex.poll()


def test_gpu_agent_command_demo_gpus_once(control_plane):
    url, cp = control_plane
    out = io.StringIO()
    call_command("gpu_agent", "--api", url, "--token", "tok", "--node-name", "n1", "--once", "--gpus", "3",
                 "--address", "127.0.0.1", "--nvidia-smi-xml", str(XML_PATH), stdout=out)
    assert "n1: registered, 1 heartbeat(s) sent" in out.getvalue()
    body = cp.registered[0]
    assert [g["index"] for g in body["gpus"]] == [0, 1, 2] and len({g["uuid"] for g in body["gpus"]}) == 3
    assert body["labels"]["nvidia.com/gpu.count"] == "3" and body["flavor"] == "H200"
    assert (body["address"], body["runtime"]) == ("127.0.0.1", "")
    assert cp.assignment_calls == 0  # --once runs nothing


def test_gpu_agent_command_executes_a_task(control_plane, tmp_path):
    """`manage.py gpu_agent` as a real process: registers with --address, runs its assignment under
    --work-dir, reports it; SIGTERM ends the agent."""
    url, cp = control_plane
    cp.fail_next_reports = 0
    cp.tasks = [assignment(7, "echo from-task-7; exit 0")]
    repo = Path(__file__).resolve().parents[2]
    work = tmp_path / "work"
    agent = subprocess.Popen([sys.executable, str(repo / "manage.py"), "gpu_agent", "--api", url, "--token", "tok",
                              "--node-name", "n1", "--work-dir", str(work), "--address", "127.0.0.1",
                              "--poll", "0.1", "--interval", "1", "--nvidia-smi-xml", str(XML_PATH), "--gpus", "2"],
                             cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        end = time.monotonic() + 8
        while time.monotonic() < end and not (cp.event(7, "exited") and any(
                c["task"] == 7 for body in cp.report_calls for c in body["logs"])):
            time.sleep(0.05)
    finally:
        agent.send_signal(signal.SIGTERM)
        out = agent.communicate(timeout=10)[0].decode(errors="replace")
    assert cp.event(7, "started") and cp.event(7, "exited")["exit_code"] == 0, out
    assert [c["data"] for body in cp.report_calls for c in body["logs"] if c["task"] == 7] == ["from-task-7\n"]
    assert cp.registered[0]["address"] == "127.0.0.1" and len(cp.registered[0]["gpus"]) == 2
    assert os.path.exists(work / "tasks" / "7-0" / "meta.json")
    assert agent.returncode == 0 and "n1: agent stopped; no task of it was running" in out, out


def test_stop_of_a_task_never_started_here_is_reported_lost_once(control_plane, tmp_path):
    """A gang stopped before this node started its task: the agent says so at once (the server then need
    not wait for the deadline), never starts it, and does not say it twice."""
    url, cp = control_plane
    cp.fail_next_reports = 0
    ex = ProcessExecutor(str(tmp_path / "agent"))
    loop = AgentLoop(url, "tok", "n1", lambda: [], ex, poll=0.05, resources=(0, 0))
    stop = dict(assignment(9, "echo must-not-run > ran.txt"), action="stop",
                stop_deadline=(SERVER_TIME + timedelta(seconds=5)).isoformat())
    loop.apply({"server_time": SERVER_TIME.isoformat(), "tasks": [stop]})
    assert loop.report()
    loop.apply({"server_time": SERVER_TIME.isoformat(), "tasks": [stop]})
    assert loop.report()
    lost = [e for e in cp.delivered() if e["task"] == 9]
    assert [(e["event"], e["message"]) for e in lost] == [("lost", "stopped before it started on this node")]
    assert not ex.known((9, 0)) and not (Path(ex.task_dir((9, 0))) / "ran.txt").exists()
