"""Speed-ups of the replay and the engine change no decision (issue 16): the decisions of fixed replays,
every cycle's CycleResult (scheduler.sim.digest), hash to digests recorded before the speed-ups, and the
engine with its EngineCache decides exactly as without one (the slow reference path: everything rebuilt
from the snapshot each cycle).

Slices (data/philly in the repository, so these run in CI):
- "helios": the Philly trace from day 30 on the 11 Philly VCs at 0.25 scale as hard partitions of 8-GPU
  nodes (leaves of 16), cycle_interval 1 s, fairness off: the input of benchmarks/peers/helios_vs_ours.py,
  0.1 day from day 30.4, with and without borrowing;
- "philly": the shipped Philly cluster at 0.05 scale (128 GPUs, so teams contend and reclaim evicts) and
  0.3 day of its trace from day 40, with the replay's defaults, and with exact time limits (EASY backfill
  reservations in force).
A digest changes only when a decision changes: when a change of policy is meant to, re-record them with
`python tests/sim/test_replay_digest.py` and say so in the commit.
"""
from __future__ import annotations

import csv
import sys
from functools import partial
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if __name__ == "__main__":
    sys.path[:0] = [str(ROOT), str(ROOT / "platform")]

from clusterspec.importers import load_cluster, load_trace  # noqa: E402
from clusterspec.spec import Trace, TraceJob, vc_partitioned_cluster  # noqa: E402
from scheduler.core import CycleConfig, run_cycle  # noqa: E402

VC_NODES = ROOT / "data" / "philly" / "philly_vc_nodes.csv"


def helios_slice(days: float, *, borrow: bool, start: float = 30.0, max_hours: float = 6.0, vc_scale: float = 0.25):
    """(cluster, trace) as benchmarks/peers/helios_vs_ours.py builds them (its docstring): VC node counts x
    vc_scale, jobs of those VCs that fit their VC, whole seconds, durations capped at max_hours."""
    with open(VC_NODES) as f:
        vcs = {r["vc"]: max(1, round(int(r["node num"]) * vc_scale)) for r in csv.DictReader(f)}
    trace = load_trace("philly", compress=1.0, start_days=start, until_days=start + days)
    jobs = [j for j in trace.jobs if j.queue in vcs and j.tasks * j.gpus_per_task <= vcs[j.queue] * 8]
    cluster = vc_partitioned_cluster(vcs, borrow=borrow)
    trace = Trace("philly-slice", tuple(
        TraceJob(j.id, j.queue, float(round(j.submit)), float(max(1, round(min(j.duration, max_hours * 3600)))),
                 j.tasks, j.gpus_per_task, min_available=j.tasks) for j in jobs))
    return cluster, trace


def run(name: str, engine=None):
    """(digest, report, cycles) of one named replay."""
    from scheduler.sim.digest import replay_digest  # here: helios_slice is also loaded by path into older trees
    if name.startswith("helios"):
        cluster, trace = helios_slice(0.1, borrow=name.endswith("borrow"), start=30.4)
        return replay_digest(cluster, trace, engine=engine, config=CycleConfig(), cycle_interval=1.0, fairness=False)
    cluster = load_cluster("philly", scale=0.05)  # 128 GPUs: queues contend, reclaim evicts
    trace = load_trace("philly", start_days=40.0, until_days=40.3)
    limits = {"time_limit_factor": 1.0} if name.endswith("limits") else {}
    return replay_digest(cluster, trace, engine=engine, **limits)


# recorded before the speed-ups of issue 16 (commit b039d01's engine and replay), then re-recorded once when
# issue 14 (GPU sharing) added fields to TaskPlacement (their repr), a "sharing" metric, and retry reasons
# took ISO times: a digest over bindings, evictions, withdrawals, nominations, moves, pending codes and
# every other metric was identical before and after that merge on all four slices. "philly" re-recorded once more
# when a drain reservation stopped counting GPUs another hold wants as drained (trial 20, F2: overlapping holds;
# session 21), and with one drain in force at a time (CycleConfig.max_drains = 1): 31 -> 26 evictions, the same
# 1,151 jobs started (whole Philly: mean wait 12,849 -> 8,237 s, p99 147,051 -> 53,766 s; benchmarks/RESULTS.md).
# "philly-limits" re-recorded in session 22 for words alone: an EASY reservation's reason gives its estimated start as
# a UTC time ("reserved, estimated start 2026-12-04T05:07:02Z", not "t=1796360762s"; new-user trial 22b); the same
# 487 cycles and 1,151 starts, the other three digests unchanged.
RECORDED = {
    "helios": ("85cae873dda936587a4534a26bb7696bd4a9b61f3d73c556d65b889700d144bd", 1293, 523),
    "helios-borrow": ("974bd6b9f433225f41215452f8237a9bf01956f5c6de52a0093ace5d97b44185", 962, 523),
    "philly": ("00239288b1be3bba2fa8a3cfaf25b87a7f8cdc8b5c592002e2b30227a6b45690", 469, 1151),
    "philly-limits": ("5ffdcc758d18e0cefdcd6449373cb313ba4de99b067f75b56e15bc7d41cf07ef", 487, 1151),
}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_decisions_match_the_recorded_digest(name):
    digest, report, cycles = run(name)
    expected_digest, expected_cycles, expected_started = RECORDED[name]
    assert (cycles, report.jobs_started) == (expected_cycles, expected_started)
    assert digest == expected_digest


@pytest.mark.parametrize("name", ["helios", "philly-limits"])
def test_engine_cache_decides_as_the_uncached_reference(name):
    """The cache's incremental bookkeeping (free capacity, usage, metrics) against everything rebuilt."""
    cached, _, n1 = run(name)
    uncached, _, n2 = run(name, engine=partial(run_cycle, cache=None))
    assert n1 == n2 and n1 > 50
    assert cached == uncached


if __name__ == "__main__":
    import time
    for name in ("helios", "helios-borrow", "philly", "philly-limits"):
        t0 = time.process_time()
        digest, report, cycles = run(name)
        print(f'    "{name}": ("{digest}", {cycles}, {report.jobs_started}),  # {time.process_time() - t0:.1f} s CPU')
