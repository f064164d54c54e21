"""New-user trial 19 on the Slurm backend (/work/notes/trial19.md): F3 (a stop signalled every process of the
task twice: Slurm's SIGTERM reaches every process of the step, and the launcher forwarded it again; a plain
scancel of a job whose stop deadline passed was a second SIGTERM), F10 (a lost node, NODE_FAIL, was recorded
as a preemption), F11 (a task the platform released before Slurm's job ended kept no exit information),
F12 (a slurmstepd whose slurmd died outlived the local Slurm's stop, with its task).

The fake-Slurm tests run anywhere; those marked `services` need Slurm and root (skipped on a laptop, failing
under CI=1 without them, as tests/integration/test_slurm.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone as tz
from pathlib import Path

import pytest

from gpuplatform import clock, services
from gpuplatform.execution import enforce_time_limits
from gpuplatform.execution.stops import expire_stops
from gpuplatform.models import Attempt, Event, Job, SchedulerCycle, Task
from gpuplatform.scheduling import store
from gpuplatform.slurm.backend import SlurmBackend
from gpuplatform.slurm.cli import SlurmCLI, SubprocessRunner
from gpuplatform.slurm.local import LocalSlurm, SlurmSetupError, slurm_installed
from gpuplatform.slurm.script import GangTask, build_job
from scheduler.core.snapshot import Binding, CycleResult, TaskPlacement
from tests.slurm.fake import FakeSlurm

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=tz.utc)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def bind(job, *placements, now=None):
    tasks = tuple(TaskPlacement("worker", i, node, gpus) for i, (node, gpus) in enumerate(placements))
    stats = store.apply_result(CycleResult(bindings=[Binding(job.pk, tasks, "", 0)]), clock=now or T0,
                               cycle_number=SchedulerCycle.objects.count() + 1)
    assert stats.binds == 1, stats.stale


# -- a real Slurm ------------------------------------------------------------------------------------------------

def _need_slurm():
    missing = slurm_installed()
    problem = f"Slurm is not installed (missing {', '.join(missing)})" if missing else None
    if not problem and os.geteuid() != 0:
        problem = "slurmd needs root"
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and Slurm is missing: {problem}")
        pytest.skip(problem)


def _marked(conf: Path, nodes) -> list[tuple[int, str]]:
    """Processes of the Slurm configured by `conf`: its slurmstepd (marked by LocalSlurm) and its jobs' tasks."""
    marks = {f"SLURM_CONF={conf}".encode()} | {f"GPUPLATFORM_SLURMD_NODE={conf}:{n}".encode() for n in nodes}
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if (proc / "stat").read_text().rpartition(")")[2].split()[0] == "Z":
                continue
            if set((proc / "environ").read_bytes().split(b"\0")) & marks:
                out.append((int(proc.name), (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()))
        except OSError:
            continue
    return out


@pytest.mark.services
def test_stop_leaves_nothing_of_a_node_whose_slurmd_died(tmp_path):
    """F12: `kill -9` of a node's slurmd while a job runs there leaves its slurmstepd and the task; the local
    Slurm's stop kills them, checks, and says what it killed (and that nothing still runs)."""
    _need_slurm()
    ls = LocalSlurm(tmp_path / "slurm", nodes=("gpz1",), gpus=1, cpus=2, slurmd_timeout=30)
    ls.start()
    try:
        r = ls.run("sbatch", "--parsable", "-p", "gpuplatform", "-N1", "--output=/dev/null",
                   "--wrap", "srun bash -c 'sleep 300'")
        assert r.returncode == 0, r.stderr
        end = time.monotonic() + 30
        while not any("sleep 300" in c for _, c in _marked(ls.conf, ls.nodes)) and time.monotonic() < end:
            time.sleep(0.2)
        assert any("sleep 300" in c for _, c in _marked(ls.conf, ls.nodes)), "the task runs"
        os.kill(ls._procs["slurmd-gpz1"].pid, signal.SIGKILL)  # the node's slurmd dies (not kill_slurmd)
        time.sleep(0.5)
        still = ls.stop()
        time.sleep(0.5)
        left = _marked(ls.conf, ls.nodes)
        assert left == [], left
        assert still == []
        assert any("slurmstepd" in k for k in ls.killed) and any("sleep 300" in k for k in ls.killed), ls.killed
    finally:
        ls.stop()
        for pid, _ in _marked(ls.conf, ls.nodes):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
