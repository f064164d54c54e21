"""The GPU-hour ledger (issue #20, DESIGN section 14) on the Philly replay: where the GPU-hours went.

    python benchmarks/utilization_ledger.py [--start DAYS] [--days DAYS] [--quick]

Slice: Philly from day 20 (the busy part) for 30 days (quick: 1 day), importer defaults (scale 0.25 = 624
GPUs, compress 1). Failures: benchmarks/failure_sweep.py's model (scheduler.sim.failures.FailureModel:
per-GPU Poisson, a failure takes its node down, repair 4 h, detection timeout 5 min, seed 1) at the Llama 3
rate (REFERENCE_RATE, 0.47 per 1,000 GPU-days) and at the sweep's 10 per 1,000 GPU-days; checkpoints hourly
(no stall). Policies on the same input: the full policy (run_cycle, CycleConfig()) and FIFO (the kube-like
baseline scheduler.core.baselines.run_cycle_kube: FIFO, pod by pod, no gang). Every bucket of
scheduler.core.gpu_hours in GPU-hours, and effective utilization = useful / (capacity - down). The replay has
no telemetry: idle_allocated is 0 there. Writes benchmarks/results/utilization_ledger[_quick].json.
"""
from __future__ import annotations

import argparse
import json
import time
from functools import partial

import _common as C
from clusterspec.importers import load_cluster, load_trace
from scheduler.core import EngineCache, run_cycle
from scheduler.core.baselines import run_cycle_kube
from scheduler.core.gpu_hours import BUCKETS
from scheduler.sim.failures import REFERENCE_RATE, Checkpointing, FailureModel
from scheduler.sim.replay import replay

DAY = 86400.0


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--start", type=float, default=20.0)
    ap.add_argument("--days", type=float, default=None)
    ap.add_argument("--policies", default="full,fifo", help="comma-separated subset of full,fifo")
    ap.add_argument("--rates", default="llama3,sweep_10", help="comma-separated subset of llama3,sweep_10")
    ap.add_argument("--merge", action="store_true", help="update the runs of an existing results file")
    args = ap.parse_args(argv)
    days = args.days if args.days is not None else (1.0 if args.quick else 30.0)
    cluster = load_cluster("philly")
    trace = load_trace("philly", start_days=args.start, until_days=args.start + days)
    runs = {}
    for rate_name, rate in (("llama3", REFERENCE_RATE), ("sweep_10", 10.0)):
        if rate_name not in args.rates.split(","):
            continue
        for policy in args.policies.split(","):
            engine = partial(run_cycle, cache=EngineCache()) if policy == "full" else run_cycle_kube
            t0 = time.perf_counter()
            r = replay(cluster, trace, engine=engine, until=days * DAY, fairness=False,
                       failures=FailureModel(rate, 300.0, 4 * 3600.0, 1), checkpoint=Checkpointing(3600.0))
            key = f"{policy} / {rate_name}"
            runs[key] = {"policy": policy, "failure_rate_per_1000_gpu_days": rate, "gpu_hours": r.gpu_hours,
                         "allocated_gpu_hours": r.allocated_gpu_hours, "goodput": r.goodput,
                         "node_failures": (r.failures or {}).get("node_failures"),
                         "jobs_started": r.jobs_started, "jobs_finished": r.jobs_finished,
                         "wall_seconds": time.perf_counter() - t0}
            print(key, f"{time.perf_counter() - t0:.0f}s", flush=True)
    out = {"machine": C.machine(), "slice": {"start_days": args.start, "days": days, "jobs": len(trace.jobs)},
           "checkpoint_interval": 3600.0, "detection_timeout": 300.0, "repair_time": 4 * 3600.0, "seed": 1,
           "runs": runs}
    name = "utilization_ledger_quick" if args.quick else "utilization_ledger"
    if args.merge:
        path = C.RESULTS_DIR / f"{name}.json"
        old = json.loads(path.read_text()) if path.exists() else {"runs": {}}
        out["runs"] = {**old.get("runs", {}), **runs}
        runs = out["runs"]
    C.save(name, out)
    cols = ("capacity",) + BUCKETS
    print(f"{'run':<18}" + "".join(f"{c[:12]:>13}" for c in cols) + f"{'eff. util':>11}")
    for key, r in runs.items():
        g = r["gpu_hours"]
        eff = g.get("effective_utilization")
        print(f"{key:<18}" + "".join(f"{g.get(c, 0):>13,.0f}" for c in cols)
              + f"{'-' if eff is None else f'{100 * eff:.1f} %':>11}")
    return out


if __name__ == "__main__":
    main()
