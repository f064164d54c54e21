"""Goodput against checkpoint interval and detection timeout (issue #6), one Philly slice, one process.

    python benchmarks/failure_sweep.py [--quick | --tiny] [--start DAYS] [--days DAYS] [--rate R] [--seed S]
                                       [--cost SECONDS]

Slice: Philly from day 20 (the busy part; the first 19.5 days have ~70 arrivals) for 14 days (quick: 1
day; tiny: 0.2 day, one interval and one timeout), importer defaults otherwise (scale 0.25 = 624 GPUs,
compress 1), the full policy. Failures: `rate` per 1,000 GPU-days (default 10, about 21x the Llama 3 405B
figure of 0.47, so that a 14-day slice on 624 GPUs sees ~86 node failures instead of ~4), repair 4 h,
seed 1; every run sees the same failure times (per-node streams). Sweeps: checkpoint interval 10 min, 30
min, 1 h, 3 h, none at detection timeout 5 min; detection timeout 30 s, 5 min, 15 min at checkpoint
interval 1 h; each with checkpoint stall `cost` (default 0 s) and, for the interval sweep, also 60 s.
Plus one run without failures as the baseline. Writes benchmarks/results/failure_sweep[_quick].json and
prints a table.
"""
from __future__ import annotations

import argparse
import time

import _common as C
from clusterspec.importers import load_cluster, load_trace
from scheduler.sim.failures import Checkpointing, FailureModel
from scheduler.sim.replay import replay

DAY = 86400.0
INTERVALS = (600.0, 1800.0, 3600.0, 10800.0, None)
TIMEOUTS = (30.0, 300.0, 900.0)


def run_one(cluster, trace, until, failures, checkpoint) -> dict:
    t0 = time.perf_counter()
    r = replay(cluster, trace, until=until, failures=failures, checkpoint=checkpoint, fairness=False)
    f = r.failures or {}
    return {
        "checkpoint_interval": checkpoint.interval, "checkpoint_cost": checkpoint.cost,
        "detection_timeout": failures.detection_timeout if failures else None,
        "goodput": r.goodput, "allocated_gpu_hours": r.allocated_gpu_hours, "useful_gpu_hours": r.useful_gpu_hours,
        "waste_gpu_hours": r.waste_gpu_hours, "jobs_started": r.jobs_started, "jobs_finished": r.jobs_finished,
        "restarts": r.restarts, "mean_allocation_rate": r.mean_allocation_rate,
        "queueing_p50": r.queueing["p50"], "queueing_p99": r.queueing["p99"],
        "node_failures": f.get("node_failures"), "node_failures_hitting_jobs": f.get("node_failures_hitting_jobs"),
        "job_interruptions": f.get("job_interruptions"),
        "time_to_detect": f.get("time_to_detect"), "time_to_requeue": f.get("time_to_requeue"),
        "time_to_restart": f.get("time_to_restart"), "restarted": f.get("restarted"),
        "wall_seconds": time.perf_counter() - t0,
    }


def _label(interval) -> str:
    return "none" if interval is None else (f"{interval / 3600:g} h" if interval >= 3600 else f"{interval / 60:g} min")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="smoke test: 0.2 day, 3 replays")
    ap.add_argument("--start", type=float, default=20.0)
    ap.add_argument("--days", type=float, default=None)
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repair", type=float, default=4 * 3600.0)
    ap.add_argument("--cost", type=float, default=0.0)
    args = ap.parse_args(argv)
    days = args.days if args.days is not None else (0.2 if args.tiny else 1.0 if args.quick else 14.0)
    intervals, timeouts = ((3600.0, None), (30.0,)) if args.tiny else (INTERVALS, TIMEOUTS)
    wall0 = time.perf_counter()
    cluster = load_cluster("philly")
    trace = load_trace("philly", start_days=args.start, until_days=args.start + days)
    until = days * DAY
    model = lambda timeout: FailureModel(args.rate, timeout, args.repair, args.seed)  # noqa: E731
    runs = {"baseline_no_failures": run_one(cluster, trace, until, None, Checkpointing())}
    costs = (args.cost,) if args.quick or args.tiny else tuple(dict.fromkeys((args.cost, 60.0)))
    for cost in costs:
        for interval in intervals:
            if interval is None and cost != args.cost:
                continue  # no checkpoints: the stall cost does not apply
            runs[f"interval {_label(interval)} cost {cost:g}s timeout 5 min"] = run_one(
                cluster, trace, until, model(300.0), Checkpointing(interval, cost if interval else 0.0))
    for timeout in timeouts:
        key = f"interval 1 h cost {args.cost:g}s timeout {timeout:g}s"
        if timeout == 300.0:
            continue  # in the interval sweep
        runs[key] = run_one(cluster, trace, until, model(timeout), Checkpointing(3600.0, args.cost))
    out = {
        "machine": C.machine(), "slice": {"start_days": args.start, "days": days, "jobs": len(trace.jobs)},
        "failures": {"rate_per_1000_gpu_days": args.rate, "repair_time": args.repair, "seed": args.seed},
        "runs": runs, "wall_seconds": time.perf_counter() - wall0,
    }
    if not args.tiny:
        C.save("failure_sweep_quick" if args.quick else "failure_sweep", out)
    print(f"{'run':<44}{'goodput':>9}{'lost':>9}{'undet.':>8}{'ckpt':>8}{'interr.':>8}{'restart p50':>12}{'wall':>7}")
    for key, r in runs.items():
        w = r["waste_gpu_hours"]
        p50 = (r["time_to_restart"] or {}).get("p50")
        print(f"{key:<44}{100 * (r['goodput'] or 0):>8.2f}%{w['lost_work']:>9,.0f}{w['undetected']:>8,.0f}"
              f"{w['checkpoint']:>8,.0f}{r['job_interruptions'] or 0:>8}"
              f"{'-' if p50 is None else f'{p50 / 60:.1f} min':>12}{r['wall_seconds']:>6.0f}s")
    return out


if __name__ == "__main__":
    main()
