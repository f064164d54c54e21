"""Drain reservations in force at once (CycleConfig.max_drains) on the Philly trace: waits, evictions, CPU.

    python benchmarks/drain_policy.py [--start DAYS] [--until DAYS] [--max-drains 1,2,8] [--quick]

Each value of --max-drains replays the same window of the shipped Philly trace (load_cluster("philly"),
load_trace("philly", start_days, until_days), `scheduler.sim.replay.replay` with its defaults but that one field)
one after another in this process, and prints per value the replay's CPU seconds, cycles, evictions, the queueing
figures of the report (mean, p50, p90, p99 of each job's first wait, seconds), the mean wait per job size, the mean
allocation rate and the useful GPU-hours (the same work must be done whatever the policy). A drain holds GPUs idle
while its nodes empty: more drains in force start starving gangs sooner but keep more GPUs from everyone else
(benchmarks/RESULTS.md, "Drain reservations: disjoint, and one in force at a time"). --quick: days 20-22 (CI-sized).
CPU times are comparable only within one run of this script (the machine is shared).
"""
from __future__ import annotations

import argparse
import sys
import time

import _common as C  # noqa: F401  (puts the repository on sys.path)

from clusterspec.importers import load_cluster, load_trace
from scheduler.core import CycleConfig
from scheduler.sim.replay import replay


def run_one(max_drains: int, start: float, until: float) -> dict:
    """The figures of one replay of Philly days [start, until) with `max_drains` (see the module docstring)."""
    cluster = load_cluster("philly")
    trace = load_trace("philly", start_days=start, until_days=until)
    t0 = time.process_time()
    report = replay(cluster, trace, config=CycleConfig(max_drains=max_drains))
    cpu = time.process_time() - t0
    q = report.queueing
    return {"max_drains": max_drains, "cpu_s": round(cpu, 1), "cycles": report.cycles, "evictions": report.evictions,
            "jobs_started": report.jobs_started, "mean_wait_s": round(q["mean"]), "p50_s": round(q["p50"]),
            "p90_s": round(q["p90"]), "p99_s": round(q["p99"]),
            "mean_wait_by_size_s": {k: round(v["mean"]) for k, v in sorted(report.queueing_by_size.items())},
            "mean_allocation_rate": round(report.mean_allocation_rate, 4),
            "useful_gpu_hours": round(report.useful_gpu_hours)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=float, default=0.0, help="first day of the trace (default 0)")
    parser.add_argument("--until", type=float, default=200.0, help="day to stop at (default 200: the whole trace)")
    parser.add_argument("--max-drains", default="1,2,8", help="comma-separated values to compare (default 1,2,8)")
    parser.add_argument("--quick", action="store_true", help="days 20-22 only")
    args = parser.parse_args(argv)
    if args.quick:
        args.start, args.until = 20.0, 22.0
    try:
        values = [int(v) for v in args.max_drains.split(",")]
    except ValueError:
        parser.error(f"--max-drains: whole numbers separated by commas, not {args.max_drains!r}")
    if any(v < 0 for v in values):
        parser.error("--max-drains: each value must be 0 or more")
    rows = []
    for v in values:
        row = run_one(v, args.start, args.until)
        rows.append(row)
        sizes = " / ".join(f"{k}: {m}" for k, m in row["mean_wait_by_size_s"].items())
        print(f"max_drains {v}: CPU {row['cpu_s']} s, {row['cycles']} cycles, {row['evictions']} evictions, "
              f"{row['jobs_started']} started; wait mean {row['mean_wait_s']} s p50 {row['p50_s']} p90 {row['p90_s']} "
              f"p99 {row['p99_s']}; by size {sizes}; allocation {row['mean_allocation_rate']}, "
              f"useful {row['useful_gpu_hours']} GPU-h", flush=True)
    return {"days": [args.start, args.until], "runs": rows}


if __name__ == "__main__":
    main(sys.argv[1:])
