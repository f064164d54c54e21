"""Smoke test of the benchmark scripts (benchmarks/*.py): each main() in its tiniest setting, so they do
not rot. Seconds, no PostgreSQL unless DATABASE_URL points at it (then bind_throughput runs in a
subprocess against a throw-away database); optimum_gap only when OR-Tools is installed (bench extra).
Also checks the simulator's partial bindings for the no-gang baseline engine."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))


def _main(name: str, *args: str) -> dict:
    return importlib.import_module(name).main(["--tiny", *args])


def test_benchmark_scripts_run_in_their_tiniest_setting():
    r = _main("cycle_scale", "--no-db")
    assert r["headline"]["binds"] > 0 and r["curve_gpus"] and r["curve_pending"]
    r = _main("replay_speed")
    assert r["report"]["jobs_submitted"] >= 1
    r = _main("baselines")
    assert set(r["results"]) == {"a_kube_like", "b_gang_binpack_no_topology", "c_full"}
    r = _main("openb_fgd")
    assert r["results"]["full"]["curve"][0]["arrived"] == 0.1
    r = _main("reschedule")
    assert set(r["runs"]) == {"off", "on K=8"} and r["runs"]["off"]["moves"] == 0 and r["slice"]["jobs"] > 0
    try:
        import ortools  # noqa: F401
    except ImportError:
        pass
    else:
        r = _main("optimum_gap")
        assert r["gap_full"]["worst"] >= 0.0
    if os.environ.get("DATABASE_URL", "").startswith("postgres"):
        out = subprocess.run([sys.executable, str(BENCH / "bind_throughput.py"), "--tiny"], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "tasks/s" in out.stdout
        # `make bench` runs every script in one process: a benchmark after bind_throughput's throw-away database
        # (dropped) must not be left pointing at it (new-user report 8 F18: topology_payload crashed so)
        both = ("import sys; sys.path.insert(0, sys.argv[1]); import bind_throughput, topology_payload; "
                "bind_throughput.main(['--tiny']); r = topology_payload.main(['--tiny']); "
                "assert r['views'], r")
        out = subprocess.run([sys.executable, "-c", both, str(BENCH)], capture_output=True, text=True, timeout=300,
                             cwd=BENCH.parent)
        assert out.returncode == 0, out.stderr[-2000:]


def test_kube_like_engine_holds_partial_gangs_in_the_replay():
    from scheduler.core.baselines import run_cycle_kube
    from scheduler.sim.replay import replay
    from clusterspec.spec import ClusterSpec, NodeSpec, Trace, TraceJob

    cluster = ClusterSpec("two", (NodeSpec("n1", "H100", 4), NodeSpec("n2", "H100", 4)))
    trace = Trace("t", (TraceJob("x", "q", 0.0, 100.0, 1, 4), TraceJob("y", "q", 1.0, 10.0, 2, 4)))
    rep = replay(cluster, trace, engine=run_cycle_kube, cycle_interval=1.0)
    assert rep.jobs_started == 2 and rep.jobs_finished == 2
    # y bound one pod at t=1 and held its node until x ended at t=100: 8 GPUs busy over [1, 100)
    assert rep.queueing["p99"] == pytest.approx(99.0, abs=1.5)
    assert rep.mean_allocation_rate > 0.9


def test_quick_runs_leave_committed_results_and_other_runs_databases_alone(monkeypatch):
    """`make bench` (run.py --quick) writes only result files git ignores, never the committed full-run figures
    (new-user trial 10, F19: topology_payload's quick run overwrote topology_payload.json); each run's throw-away
    database is its own (F14: a fixed name, dropped WITH (FORCE), let a second run drop the first one's)."""
    import _db
    import topology_payload

    ignored = set((BENCH / "results" / ".gitignore").read_text().split())
    assert f"{topology_payload.results_name(True)}.json" in ignored
    assert f"{topology_payload.results_name(False)}.json" not in ignored
    assert (BENCH / "results" / f"{topology_payload.results_name(False)}.json").exists()  # the committed figures
    monkeypatch.delenv("BENCH_DB", raising=False)
    monkeypatch.setattr(os, "getpid", lambda: 101)
    first = _db.database_name("bench_cycle_scale")
    monkeypatch.setattr(os, "getpid", lambda: 102)
    assert first == "bench_cycle_scale_101" != _db.database_name("bench_cycle_scale")
    monkeypatch.setenv("BENCH_DB", "mine")
    assert _db.database_name("bench_cycle_scale") == "mine"
