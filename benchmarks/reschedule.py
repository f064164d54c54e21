"""Rescheduling's gain against its cost (issue #17): replays with and without moves of migratable jobs.

    python benchmarks/reschedule.py [--trace philly|openb] [--start DAYS] [--days DAYS] [--k K ...]
                                    [--every N] [--grace S] [--restart S] [--min-run S] [--min-wait S]
                                    [--tag NAME] [--no-off] [--tiny]

Every job of the trace is declared migratable (it checkpoints on SIGTERM), may be moved after
`--min-run` seconds of running (default 600), writes its checkpoint in `--grace` seconds (default 60 s,
the checkpoint stall `cost` of benchmarks/failure_sweep.py's cost sweep) and redoes `--restart`
seconds of work when it restarts (default 60 s: reading the checkpoint back). Every run uses the same
periodic checkpoints (scheduler.sim.failures.Checkpointing(1 h, 60 s), failure_sweep's model) and no
failures, so the runs differ only in rescheduling. Runs: rescheduling off, then on with each K (moves
per hour per cluster), planning every `--every` cycles (60 s cycles).

Figures per run: time-weighted fragmentation rate, time-weighted mean largest runnable job per tier,
queueing (p50 / p90 / mean) of jobs of 32 GPUs and more and of all jobs, jobs finished, and the cost:
moves, GPUs moved, GPU-hours lost to checkpoint grace and to restarts. Writes
benchmarks/results/reschedule_<trace>.json (not with --tiny) and prints a table.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import replace

import _common as C
from clusterspec.importers import load_cluster, load_trace
from scheduler.core import CycleConfig
from scheduler.sim.failures import Checkpointing
from scheduler.sim.replay import replay

DAY = 86400.0


def run_one(cluster, trace, until, config, *, grace, restart, min_run) -> dict:
    t0 = time.perf_counter()
    fields = {"migratable": True, "min_run_before_move": min_run, "checkpoint_grace": grace}
    r = replay(cluster, trace, until=until, config=config, checkpoint=Checkpointing(3600.0, 60.0), fairness=False,
               migratable=lambda job: fields, restart_cost=restart)
    rs = r.rescheduling
    return {
        "reschedule": config.reschedule, "moves_per_hour": config.reschedule_moves_per_hour,
        "every": config.reschedule_every,
        "fragmentation_rate": r.mean_fragmentation_rate, "largest_runnable_mean": rs["largest_runnable_mean"],
        "queueing_32_plus": rs["queueing_32_plus"], "queueing": r.queueing,
        "queueing_by_size": r.queueing_by_size,
        "jobs_started": r.jobs_started, "jobs_finished": r.jobs_finished, "allocated_gpu_hours": r.allocated_gpu_hours,
        "mean_allocation_rate": r.mean_allocation_rate,
        "moves": rs["moves"], "moved_gpus": rs["moved_gpus"], "grace_gpu_hours": rs["grace_gpu_hours"],
        "restart_gpu_hours": rs["restart_gpu_hours"], "evictions_by_rule": r.evictions_by_rule,
        "engine_mean_ms": r.engine_mean_ms, "wall_seconds": time.perf_counter() - t0,
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", choices=("philly", "openb"), default="philly")
    ap.add_argument("--start", type=float, default=None, help="days (philly default 20, openb 0)")
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--k", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--grace", type=float, default=60.0)
    ap.add_argument("--restart", type=float, default=60.0)
    ap.add_argument("--min-run", type=float, default=600.0)
    ap.add_argument("--min-wait", type=float, default=600.0)
    ap.add_argument("--tiny", action="store_true", help="smoke test: 0.3 day, one K")
    ap.add_argument("--tag", default="", help="suffix of the results file name (a sensitivity run)")
    ap.add_argument("--no-off", action="store_true", help="skip the run without rescheduling")
    args = ap.parse_args(argv)
    start = args.start if args.start is not None else (20.0 if args.trace == "philly" else 0.0)
    days = 0.3 if args.tiny else args.days
    ks = args.k[:1] if args.tiny else args.k
    wall0 = time.perf_counter()
    cluster = load_cluster(args.trace)
    if args.trace == "philly":
        trace = load_trace("philly", start_days=start, until_days=start + days)
    else:
        trace = load_trace("openb")
        first = min(j.submit for j in trace.jobs)
        trace = replace(trace, jobs=[replace(j, submit=j.submit - first - start * DAY) for j in trace.jobs
                                     if start * DAY <= j.submit - first <= (start + days) * DAY])
    until = days * DAY
    opts = {"grace": args.grace, "restart": args.restart, "min_run": args.min_run}
    base = CycleConfig(reschedule_every=args.every, reschedule_min_wait=args.min_wait)
    runs = {} if args.no_off else {"off": run_one(cluster, trace, until, base, **opts)}
    for k in ks:
        runs[f"on K={k}"] = run_one(cluster, trace, until, replace(base, reschedule=True, reschedule_moves_per_hour=k),
                                    **opts)
    out = {"machine": C.machine(), "trace": args.trace,
           "slice": {"start_days": start, "days": days, "jobs": len(trace.jobs)},
           "migratable": {"all_jobs": True, **opts, "min_wait": args.min_wait, "checkpoint": "1 h interval, 60 s cost"},
           "runs": runs, "wall_seconds": time.perf_counter() - wall0}
    if not args.tiny:
        C.save(f"reschedule_{args.trace}{'_' + args.tag if args.tag else ''}", out)
    print(f"{args.trace} days {start:g}+{days:g}, {len(trace.jobs)} jobs")
    print(f"{'run':<12}{'frag':>7}{'largest(t)':>24}{'wait>=32 p50/mean h':>22}{'n':>5}{'moves':>7}"
          f"{'grace GPUh':>11}{'restart GPUh':>13}{'finished':>9}{'wall':>7}")
    for key, r in runs.items():
        q = r["queueing_32_plus"]
        largest = ",".join(f"{v:.0f}" for v in r["largest_runnable_mean"].values())
        p50 = "-" if q["p50"] is None else f"{q['p50'] / 3600:.2f}"
        mean = "-" if q["mean"] is None else f"{q['mean'] / 3600:.2f}"
        print(f"{key:<12}{100 * (r['fragmentation_rate'] or 0):>6.1f}%{largest:>24}{p50 + ' / ' + mean:>22}"
              f"{q['count']:>5}{r['moves']:>7}{r['grace_gpu_hours']:>11.1f}{r['restart_gpu_hours']:>13.1f}"
              f"{r['jobs_finished']:>9}{r['wall_seconds']:>6.0f}s")
    return out


if __name__ == "__main__":
    main()
