"""Cost of the forecast (issue #15): 1,000 pending jobs on the 20,160-GPU world.

    python benchmarks/forecast_cost.py [--quick]

World: benchmarks/_common.scale_world (280 racks x 18 nodes x 4 GPUs = 20,160 GPUs) with 15,000 running
jobs (the cluster ~90 % busy, so pending jobs must wait for running ones to end) and 1,000 pending.
Running jobs' run times: drawn once per job from a log-uniform 10 min .. 3 days (a Philly-like spread),
already elapsed a random share; pending jobs: the same draw. `scheduler.forecast.forecast_start` runs the
median and the P90 pass (P90 = 2 x median here) with the production defaults (horizon 7 days, step 60 s,
resolution 0.05, max 400 cycles). Recorded: wall time of each pass, cycles, jobs with an estimate.
The bound: a second case forces the whole cycle budget to be spent (resolution 0, one cycle per 60 s
step with a running job ending every step), so its wall time is the most a forecast of this world can
cost with the production budget (2 passes x 400 cycles).
"""
from __future__ import annotations

import os
import random
import sys
import time

import _common as C
from scheduler.forecast import forecast_start


def main(argv) -> dict:
    quick = C.quick_flag(argv)
    snap = C.scale_world(pending=1000, running=15_000)
    rng = random.Random(3)
    runtime = {}
    for j in snap.jobs:
        runtime[j.id] = 600.0 * (432.0 ** rng.random())  # 10 min .. 3 days, log-uniform

    def estimate(job, elapsed):
        base = max(runtime[job.id], elapsed + 60.0)
        return base, 2 * base

    runs = []
    for _ in range(1 if quick else 3):
        t0, c0 = time.perf_counter(), time.process_time()
        starts, info = forecast_start(snap, estimate)
        runs.append({"wall_total_s": time.perf_counter() - t0, "cpu_total_s": time.process_time() - c0,
                     "wall_median_pass_s": info["wall"],
                     "wall_p90_pass_s": info["wall_p90"], "cycles": info["cycles"], "cycles_p90": info["cycles_p90"],
                     "truncated": info["truncated"],
                     "with_estimate": sum(1 for f in starts.values() if f.start is not None),
                     "without": sum(1 for f in starts.values() if f.start is None)})
    walls = [r["wall_total_s"] for r in runs]
    # worst case: a running job ends every 60 s, resolution 0: each step is a cycle until the budget is spent
    ends = {j.id: 60.0 * (1 + i % 2000) for i, j in enumerate(x for x in snap.jobs if x.state != "pending")}

    def estimate_dense(job, elapsed):
        base = ends.get(job.id, 86400.0)
        return base, 2 * base

    t0, c0 = time.perf_counter(), time.process_time()
    starts, info = forecast_start(snap, estimate_dense, resolution=0.0, step=60.0, max_cycles=400)
    worst = {"wall_total_s": time.perf_counter() - t0, "cpu_total_s": time.process_time() - c0,
             "cycles": info["cycles"], "cycles_p90": info["cycles_p90"],
             "truncated": info["truncated"], "with_estimate": sum(1 for f in starts.values() if f.start is not None),
             "without": sum(1 for f in starts.values() if f.start is None)}
    out = {"machine": C.machine(), "load_average": os.getloadavg(), "gpus": sum(n.gpus for n in snap.nodes),
           "running": sum(1 for j in snap.jobs if j.state != "pending"),
           "pending": sum(1 for j in snap.jobs if j.state == "pending"), "runs": runs, "wall": C.stats(walls),
           "worst_case_budget": worst,
           "peak_rss_mib": C.peak_rss_mib()}
    C.save("forecast_cost_quick" if quick else "forecast_cost_full", out)
    print(out)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
