"""`make demo-local` stopped through make's pid alone stops the demo, its agents and their tasks (new-user trial 26,
F2): `kill -TERM <make's pid>` left `manage.py demo`, both agents and the task's processes running, reparented to
pid 1 (make's recipe ran the demo under /bin/sh, and make forwarded its SIGTERM to the shell only); a SIGINT to make
alone did nothing (make waits for its child without passing SIGINT on). Each way make can be stopped alone: SIGTERM
(make forwards it; the recipe's `exec` makes the demo make's child), SIGKILL (the demo asks for a signal when make
dies: PR_SET_PDEATHSIG) and SIGINT (make resets its handler and waits; the demo sees it and stops as on Ctrl-C).
Each time the demo's own clean stop runs (its last line says that every process it started is gone, checked).

Real processes: `make demo-local` in a session of its own on a free port and a SQLite file of this module (migrated
once, by the first run), a job submitted over REST, checked through /proc, everything killed at the end."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplatform.agent.executor import scan_proc
from tests.agent.proc_helpers import gone, live_in_group_or_session, wait_for
from tests.agent.test_demo_processes import TASK, _answers, _call, _free_port, _processes_under, _task_processes

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the executor is Linux only"),
              pytest.mark.slow]
PASSWORD = "pw-s26-make-demo"
# the make variables and flags of an outer make (`make test` runs pytest) are not this make's
OUTER = ("CI", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "DEMO_ARGS", "DEMO_PASSWORD", "LOCAL_AGENTS")


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory) -> Path:
    """One SQLite file for the module's demos: the first migrates it, the others start at once."""
    return tmp_path_factory.mktemp("make-demo") / "db-local.sqlite3"


def _demo_pid(session: int) -> int | None:
    """`manage.py demo` in make's session (make's child with the recipe's `exec`; the shell's child before)."""
    for pid, st in scan_proc().items():
        if st.dead or st.sid != session:
            continue
        try:
            if b"manage.py\0demo\0" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    return None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGINT], ids=lambda s: s.name)
def test_stopping_make_alone_stops_the_demo_its_agents_and_their_tasks(tmp_path, demo_db, sig):
    prefix = Path(sys.prefix)  # the venv running the tests (make's VENV); `-o` its stamp: no pip install here
    port = _free_port()
    api = f"http://127.0.0.1:{port}"
    root = tmp_path / "agents"
    env = {k: v for k, v in os.environ.items() if k not in OUTER}
    env.update(DEMO_AGENTS_DIR=str(root), DEMO_PASSWORD=PASSWORD)
    log_path = tmp_path / "make.log"
    with open(log_path, "ab") as log:
        make = subprocess.Popen(
            ["make", "-s", "demo-local", f"VENV={prefix}", "-o", f"{prefix}/.installed", "LOCAL_AGENTS=1",
             f"DEMO_LOCAL_DB=sqlite:///{demo_db}", f"DEMO_ARGS=--port {port}"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def output() -> str:
        return log_path.read_text(errors="replace")

    try:
        wait_for(lambda: _answers(api) or make.poll() is not None, 180, "the demo to answer /healthz", 0.3)
        assert make.poll() is None, output()
        demo = _demo_pid(make.pid)
        assert demo is not None, output()
        token = _call(f"{api}/api/v1/auth-token/", form={"username": "demo", "password": PASSWORD})["token"]
        _call(f"{api}/api/v1/jobs/", token, {"name": "make-stop", "queue": "demo", "command": TASK,
                                             "roles": [{"name": "worker", "tasks": 1, "gpus_per_task": 1}]})
        wait_for(lambda: len(_task_processes(root)) >= 4, 60, "the task's four processes", 0.2)

        os.kill(make.pid, sig)  # make's pid only, not its process group
        make.wait(timeout=45)
        wait_for(lambda: gone(demo) and not _processes_under(root) and not live_in_group_or_session(make.pid), 30,
                 f"the demo (pid {demo}), its agents and their tasks to end after {sig.name} to make", 0.2)
        assert "local demo stopped (" in output() and "every process it started is gone, checked" in output(), \
            output()[-3000:]
    finally:
        if make.poll() is None:
            make.kill()
            make.wait()
        for pid in set(_processes_under(root)) | set(live_in_group_or_session(make.pid)):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
