"""benchmarks/peers/slurm_vs_ours.py without Slurm: our side of the two-step comparison (t = 0 on the empty
cluster, t = horizon with the short jobs ended and the others running where they were put) and the
runner's skip message when Slurm is missing (make bench-peers). Under a second."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PEERS = Path(__file__).resolve().parents[2] / "benchmarks" / "peers"


def _load(name: str, filename: str):
    """A peers script as module `name`, by path: benchmarks/peers/run.py must not be importable as `run`,
    the name benchmarks/run.py has for the other benchmark tests (tests/benchmarks/test_federation_bench.py)."""
    spec = importlib.util.spec_from_file_location(name, PEERS / filename)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


peers_run = _load("peers_run", "run.py")
svo = _load("peers_slurm_vs_ours", "slurm_vs_ours.py")


def _gpus(placements_tasks):
    out = []
    for tasks in placements_tasks:
        out += [(t.node, g) for t in tasks for g in t.gpus]
    return out


@pytest.mark.parametrize("backfill", [False, True])
def test_ours_second_step_keeps_the_survivors_and_starts_around_them(backfill):
    nodes, horizon = 16, 60
    jobs = svo.make_jobs(svo.ROOT, nodes, 150, seed=7, big_share=0.05)
    ours = svo.run_ours(nodes, jobs, backfill, horizon, repeats=1)
    start0, th = ours["t0"]["placements"], ours["th"]
    assert start0, "the empty cluster starts something"
    # the survivors are exactly the jobs of t = 0 whose trace duration exceeds the horizon
    assert set(th["running"]) == {i for i in start0 if jobs[i]["duration"] > 60 * horizon}
    assert not set(th["placements"]) & set(start0), "a job starts once"
    # no GPU is given twice at t = horizon: NodeInfo.used carries the survivors' GPUs into the snapshot
    used = {}
    for i, pl in list(th["running"].items()) + list(th["placements"].items()):
        for node, g in pl:
            used[node] = used.get(node, 0) + g
    assert max(used.values()) <= svo.GPN
    q = svo.quality(nodes, th["placements"], jobs, th["running"])
    assert q["gpus_allocated"] == sum(used.values()) <= nodes * svo.GPN
    # EASY backfill: jobs placed on the reservation's GPUs under the backfill rule happen only when it is on
    assert (th["backfilled"] > 0) if backfill else (th["backfilled"] == 0)


def test_fifo_prefix_counts_the_head_started_without_a_gap():
    assert svo.fifo_prefix({0: [], 1: [], 3: []}, 5) == 2
    assert svo.fifo_prefix({}, 5) == 0
    assert svo.fifo_prefix({0: [], 1: []}, 2) == 2


def test_bench_peers_skips_slurm_with_what_to_install(monkeypatch, capsys):
    monkeypatch.setattr(peers_run.shutil, "which", lambda name: None)
    monkeypatch.setattr(peers_run, "Path", lambda *a: Path("/nonexistent-slurm-check"))
    assert peers_run.main(["--only", "slurm"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("skip slurm: Slurm not installed: apt-get install -y --no-install-recommends slurmctld")


def test_script_skips_with_the_same_message_when_slurm_is_missing(monkeypatch, capsys):
    monkeypatch.setattr(svo.shutil, "which", lambda name: None)
    monkeypatch.setattr(svo, "Path", lambda *a: Path("/nonexistent-slurm-check"))
    assert svo.main(["--nodes", "16", "--jobs", "10"]) == 0
    assert capsys.readouterr().out.startswith("skip slurm: Slurm not installed")
