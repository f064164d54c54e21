"""Forecast accuracy on the Philly replay (issue #15): scheduler.forecast.accuracy.measure.

    python benchmarks/forecast_accuracy.py [--days 30] [--start 20] [--every 3600] [--quick]

Philly cluster and trace at the importer defaults (624 GPUs), trace days `start` .. `start + days`
(default 20-50, the busy part), cold start, cycle interval 60 s, a forecast of every pending job every
`every` simulated seconds (horizon 7 days). Two runs: jobs WITHOUT time limits (run times from the
history estimator, learnt from the jobs this replay completes) and WITH exact time limits (each job
declares its trace duration). Figures per run: the forecast against "no estimate" and the backfill
reservation's estimate (scheduler/forecast/accuracy.py says how each is counted). Saved to
benchmarks/results/forecast_accuracy_full.json (read by the queueing page's plot; --quick:
_quick.json).
"""
from __future__ import annotations

import argparse
import sys
import time

import _common as C


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--start", type=float, default=20.0)
    ap.add_argument("--every", type=float, default=3600.0)
    ap.add_argument("--quick", action="store_true", help="2 days only")
    args = ap.parse_args(argv)
    from clusterspec.importers import load_cluster, load_trace
    from scheduler.forecast.accuracy import measure

    days = 2.0 if args.quick else args.days
    cluster = load_cluster("philly")
    trace = load_trace("philly", start_days=args.start, until_days=args.start + days)
    out = {"machine": C.machine(), "command": "python benchmarks/forecast_accuracy.py " + " ".join(argv or sys.argv[1:]),
           "start_day": args.start, "days": days, "cluster_gpus": cluster.gpus, "jobs": len(trace.jobs), "runs": {}}
    for name, factor in (("without_time_limits", None), ("with_time_limits", 1.0)):
        t0 = time.perf_counter()
        out["runs"][name] = measure(cluster, trace, every=args.every, time_limit_factor=factor)
        f = out["runs"][name]["forecast"]
        print(f"{name}: {out['runs'][name]['resolved']} predictions, median |err| {f['median_abs_error_s']} s, "
              f"p90 {f['p90_abs_error_s']} s, within 15 min {f['share_within_15min']}, within 25 % "
              f"{f['share_within_25pct_of_wait']} ({time.perf_counter() - t0:.0f} s)", flush=True)
    C.save("forecast_accuracy_quick" if args.quick else "forecast_accuracy_full", out)
    return out


if __name__ == "__main__":
    main()
