"""Hot spare nodes (issue #21, DESIGN section 14): what a spare per rack buys in recovery time and costs in
capacity, on the Philly replay with failure_sweep.py's failure model.

    python benchmarks/spare_nodes.py [--quick] [--start DAYS] [--days DAYS] [--rate R] [--spares 0,1,2]
                                     [--interruptible 0,25]

Slice: Philly from day 20 (the busy part) for 7 days (quick: 1 day), importer defaults (scale 0.25 = 624
GPUs in 138 nodes, 9 racks: leaf domains of 10-16 nodes), the full policy. Failures: failure_sweep.py's
model (scheduler.sim.failures.FailureModel: per-GPU Poisson at `rate` per 1,000 GPU-days, default 10, the
sweep's rate; a failure takes its node down 4 h; detection 5 min; seed 1), checkpoints hourly, no stall.
Spares (replay(spares=n)): n nodes per rack that run only interruptible jobs (scheduler/core/spares.py); a
failed gang restarts at once on its old placement with the failed node replaced by a spare of the same
flavor (rack first, idle first), the interruptible jobs holding the GPUs it needs there stopped at once
(requeued, losing the work since their last checkpoint), the repaired node refilling the pool.
Interruptible jobs (replay(interruptible=)): Philly has no such flag, so P % of the jobs of at most one
node's GPUs (8), chosen by a stable hash of the job id (crc32 % 100 < P), are interruptible; each P of
`--interruptible` is run with every spare count above 0 (P = 0: the spares run nothing), spares 0 once
with the largest P (without spares the flag changes nothing). Per run: time to restart (failure ->
running again: detection + wait), time from detection to running again, restarts on a spare, jobs stopped
on a spare and the GPU-hours they lost, GPU-hours interruptible jobs ran on the spares, goodput, queueing of
all jobs, and the GPU-hour ledger (spares' idle GPUs are `held`). Writes
benchmarks/results/spare_nodes[_quick].json and prints a table.
"""
from __future__ import annotations

import argparse
import time
import zlib

import _common as C
from clusterspec.importers import load_cluster, load_trace
from scheduler.sim.failures import Checkpointing, FailureModel
from scheduler.sim.replay import replay

DAY = 86400.0


def interruptible_share(pct: float):
    """trace job -> interruptible: `pct` % of the jobs of at most 8 GPUs, by a stable hash of the id."""
    def pick(job) -> bool:
        return job.tasks * job.gpus_per_task <= 8 and zlib.crc32(str(job.id).encode()) % 100 < pct
    return pick if pct > 0 else None


def _count(trace, pct: float) -> int:
    pick = interruptible_share(pct)
    return sum(1 for j in trace.jobs if pick(j)) if pick else 0


def run_one(cluster, trace, until: float, rate: float, spares: int, pct: float = 0.0) -> dict:
    t0 = time.perf_counter()
    model = FailureModel(rate, 300.0, 4 * 3600.0, 1)
    r = replay(cluster, trace, until=until, failures=model, checkpoint=Checkpointing(3600.0), fairness=False,
               spares=spares, interruptible=interruptible_share(pct))
    f = r.failures or {}
    restart = f.get("time_to_restart") or {}
    after_detection = {k: (v - model.detection_timeout if isinstance(v, (int, float)) and k != "count" else v)
                       for k, v in restart.items()}
    return {"spares_per_rack": spares, "interruptible_pct": pct, "spares": r.spares, "goodput": r.goodput,
            "useful_gpu_hours": r.useful_gpu_hours, "gpu_hours": r.gpu_hours,
            "job_interruptions": f.get("job_interruptions"), "node_failures": f.get("node_failures"),
            "time_to_restart": restart, "detection_to_running": after_detection,
            "queueing": r.queueing, "jobs_started": r.jobs_started, "jobs_finished": r.jobs_finished,
            "wall_seconds": time.perf_counter() - t0}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--start", type=float, default=20.0)
    ap.add_argument("--days", type=float, default=None)
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--spares", default="0,1", help="comma-separated spares per rack to compare")
    ap.add_argument("--interruptible", default="0,25",
                    help="comma-separated % of the jobs of <= 8 GPUs that are interruptible (may run on spares)")
    args = ap.parse_args(argv)
    days = args.days if args.days is not None else (1.0 if args.quick else 7.0)
    cluster = load_cluster("philly")
    trace = load_trace("philly", start_days=args.start, until_days=args.start + days)
    runs = {}
    shares = [float(x) for x in args.interruptible.split(",")]
    for n in (int(x) for x in args.spares.split(",")):
        for pct in (shares if n else [max(shares)]):
            key = f"spares {n}" + (f" int {pct:g}%" if n else "")
            runs[key] = r = run_one(cluster, trace, days * DAY, args.rate, n, pct)
            print(f"{key}: {r['wall_seconds']:.0f}s", flush=True)
    out = {"machine": C.machine(), "slice": {"start_days": args.start, "days": days, "jobs": len(trace.jobs)},
           "failures": {"rate_per_1000_gpu_days": args.rate, "detection_timeout": 300.0, "repair_time": 4 * 3600.0,
                        "seed": 1, "checkpoint_interval": 3600.0},
           "interruptible": {"pct_of_jobs_up_to_8_gpus": shares, "jobs": {f"{p:g}%": _count(trace, p) for p in shares}},
           "runs": runs}
    C.save("spare_nodes_quick" if args.quick else "spare_nodes", out)
    print(f"{'run':<20}{'spare GPUs':>11}{'interr.':>8}{'on spare':>9}{'stopped':>8}{'restart p50':>12}{'p90':>9}"
          f"{'goodput':>9}{'eff. util':>10}{'held GPU-h':>11}{'on spares':>10}{'queue mean':>11}")
    for key, r in runs.items():
        t = r["time_to_restart"]
        g = r["gpu_hours"] or {}
        eff = g.get("effective_utilization")

        def m(v):
            return "-" if v is None else f"{v / 60:.1f} min"
        sp = r["spares"]
        print(f"{key:<20}{sp['gpus']:>11}{r['job_interruptions'] or 0:>8}{sp['restarts_on_spare']:>9}"
              f"{sp.get('stopped_on_spare', 0):>8}{m(t.get('p50')):>12}{m(t.get('p90')):>9}"
              f"{100 * (r['goodput'] or 0):>8.2f}%{'-' if eff is None else f'{100 * eff:.1f}%':>10}"
              f"{g.get('held', 0):>11,.0f}{sp.get('interruptible_gpu_hours_on_spares', 0):>10,.0f}"
              f"{m(r['queueing'].get('mean')):>11}")
    return out


if __name__ == "__main__":
    main()
