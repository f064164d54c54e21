"""`manage.py demo --federation 2` for real, counting the job's processes (marked services and slow: three
instances, four node agents; a few minutes on a 2-core machine).

A restartable job submitted to the manager runs as one process on one worker. That worker is frozen
(SIGSTOP: its server stops answering, its agents keep running the task) past WORKER_LOST_SECONDS: the manager
marks it lost and restarts the job on the other worker -- for that window two processes exist, the one the
federation counts and the unseen stale one (the stated guarantee, docs/federation.md). The worker is thawed:
the manager's first sync stops the stale copy, and exactly one process is left, the moved copy's.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.services, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def _free_base() -> int:
    for base in range(18600, 19600, 10):
        ok = True
        for p in range(base, base + 3):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
        if ok:
            return base
    raise RuntimeError("no three free ports")


def _call(url, token=None, body=None, form=None):
    headers = {"Accept": "application/json"}
    data = None
    if token:
        headers["Authorization"] = f"Token {token}"
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    if form is not None:
        data = urllib.parse.urlencode(form).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=10) as r:
        return json.loads(r.read())


def _pids(marker: str) -> list[int]:
    """The task processes themselves (argv = python -c <code> <marker>), not wrappers naming the marker."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        if len(argv) == 4 and argv[1] == b"-c" and argv[-1] == marker.encode():
            pids.append(int(proc.name))
    return pids


def _wait(what, fn, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(1.0)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_moved_job_runs_once_after_its_lost_worker_returns(tmp_path):
    if sys.platform != "linux":
        pytest.skip("process checks use pgrep and SIGSTOP (Linux)")
    base = _free_base()
    api = f"http://127.0.0.1:{base}"
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'manager.sqlite3'}", "REDIS_URL": "",
           "FEDERATION_DEMO_DIR": str(tmp_path / "fed"), "WORKER_LOST_SECONDS": "8", "FEDERATION_HTTP_TIMEOUT": "1",
           "DEMO_PASSWORD": "pw-fed-s20"}  # not on any command line: the manager's nor its workers' (ps)
    log = tmp_path / "demo.log"
    demo = subprocess.Popen([sys.executable, "manage.py", "demo", "--federation", "2", "--port", str(base)],
                            cwd=REPO, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    marker = f"fedmark-{uuid.uuid4().hex[:10]}"
    frozen = None
    try:
        _wait("the federation demo", lambda: demo.poll() is None and b"Federation: manager on" in log.read_bytes()
              or (demo.poll() is not None and pytest.fail(log.read_text()[-3000:])), 300)
        token = _call(f"{api}/api/v1/auth-token/", form={"username": "demo", "password": "pw-fed-s20"})["token"]
        job = _call(f"{api}/api/v1/jobs/", token, {  # the ordinary jobs API: the demo's manager federates it
            "name": "once", "queue": "demo", "restartable": True,
            "command": [sys.executable, "-c", "import time; time.sleep(900)", marker],
            "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 1}]})
        url = f"{api}/api/v1/federation/jobs/{job['id']}/"
        first = _wait("the job running", lambda: (j := _call(url, token))["state"] == "running" and j, 120)
        _wait("its process", lambda: len(_pids(marker)) == 1, 60)
        assert len(_pids(marker)) == 1

        port = base + 1 + int(first["cluster"][-1])
        worker_pid = int(subprocess.run(["pgrep", "-f", f"manage.py demo --local-agents 2 --gpus-per-agent 2 --port {port}"],
                                        capture_output=True, text=True).stdout.split()[0])
        # the password reached the worker in its environment, never its command line (session 19's leftover)
        assert b"pw-fed-s20" not in Path(f"/proc/{worker_pid}/cmdline").read_bytes()
        assert b"DEMO_PASSWORD=pw-fed-s20" in Path(f"/proc/{worker_pid}/environ").read_bytes().split(b"\0")
        os.kill(worker_pid, signal.SIGSTOP)
        frozen = worker_pid
        moved = _wait("the job moved to the other worker", lambda: (j := _call(url, token))["cluster"] != first["cluster"]
                      and j["state"] == "running" and j, 120)
        assert moved["generation"] == 1 and moved["placements"][0]["fenced"] is True
        _wait("the moved copy's process", lambda: len(_pids(marker)) == 2, 60)  # the stale one is unseen

        os.kill(worker_pid, signal.SIGCONT)
        frozen = None
        _wait("the stale copy stopped", lambda: len(_pids(marker)) == 1, 120)
        time.sleep(5)
        assert len(_pids(marker)) == 1
        assert _call(url, token)["state"] == "running"
        clusters = {c["name"]: c["state"] for c in _call(f"{api}/api/v1/federation/clusters/", token)["results"]}
        assert clusters[first["cluster"]] == "healthy"
    finally:
        if frozen:
            os.kill(frozen, signal.SIGCONT)
        demo.send_signal(signal.SIGTERM)
        try:
            demo.wait(timeout=90)
        except subprocess.TimeoutExpired:
            demo.kill()
        for pid in _pids(marker):
            os.kill(pid, signal.SIGKILL)
