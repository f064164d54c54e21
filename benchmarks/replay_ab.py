"""Replay speed before / after, side by side in one run, with a proof that no decision changed (issue 16).

    python benchmarks/replay_ab.py --base DIR [--slice helios|philly] [--start D] [--days D] [--repeat N]

DIR is another checkout of the product (e.g. `git archive <commit> | tar -x -C DIR`). Each side replays the
same slice in its own process with its own code (`scheduler`, `clusterspec` from its tree), through
scheduler/sim/digest.py of this tree (loaded by path), and prints its process CPU time (time.process_time
of the replay alone), the digest of every cycle's decisions and the report's headline figures. Sides run
alternately (base, this, base, this, ...) so both see the same load; the CPU ratio this / base is the
median over the repeats. Slices: "helios" = benchmarks/peers/helios_vs_ours.py's input (Philly from day
`start` for `days`, the 11 VCs at 0.25 scale as hard partitions, cycle_interval 1 s, no fairness meter;
default 0.5 day from day 30, durations capped at 6 h); "philly" = the shipped Philly cluster and trace
from day `start` for `days` with the replay's defaults (default days 20-30).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CHILD = r"""
import importlib.util, json, sys, time
root, slice_, start, days = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
sys.path[:0] = [root, root + "/platform"]
spec = importlib.util.spec_from_file_location("perf_digest", sys.argv[5])
digest = importlib.util.module_from_spec(spec); spec.loader.exec_module(digest)
from clusterspec.importers import load_cluster, load_trace
if slice_ == "helios":
    spec = importlib.util.spec_from_file_location("perf_slices", sys.argv[6])
    slices = importlib.util.module_from_spec(spec); spec.loader.exec_module(slices)
    cluster, trace = slices.helios_slice(days, borrow=False, start=start)
    from scheduler.core import CycleConfig
    kw = dict(config=CycleConfig(), cycle_interval=1.0, fairness=False)
else:
    cluster, trace = load_cluster("philly"), load_trace("philly", start_days=start, until_days=start + days)
    kw = {}
c0 = time.process_time()
hexdigest, report, cycles = digest.replay_digest(cluster, trace, **kw)
cpu = time.process_time() - c0
print(json.dumps({"cpu": cpu, "digest": hexdigest, "cycles": cycles, "jobs": len(trace.jobs),
                  "started": report.jobs_started, "mean_queue_s": report.queueing.get("mean")}))
"""


def side(root: Path, args) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), args.slice, str(args.start), str(args.days),
         str(ROOT / "scheduler" / "sim" / "digest.py"), str(ROOT / "tests" / "sim" / "test_replay_digest.py")],
        capture_output=True, text=True, check=True, cwd=root)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the other checkout (before)")
    ap.add_argument("--slice", choices=("helios", "philly"), default="helios")
    ap.add_argument("--start", type=float, default=None)
    ap.add_argument("--days", type=float, default=None)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    if args.start is None:
        args.start = 30.0 if args.slice == "helios" else 20.0
    if args.days is None:
        args.days = 0.5 if args.slice == "helios" else 10.0
    print(f"slice {args.slice}, days {args.start}-{args.start + args.days}; load average {os.getloadavg()[0]:.1f}",
          flush=True)
    runs = {"base": [], "this": []}
    for _ in range(args.repeat):
        for name, root in (("base", Path(args.base)), ("this", ROOT)):
            r = side(root, args)
            runs[name].append(r)
            print(name, r, flush=True)
    same = len({r["digest"] for rs in runs.values() for r in rs}) == 1
    ratio = statistics.median(t["cpu"] / b["cpu"] for b, t in zip(runs["base"], runs["this"]))
    print(f"decisions identical (one digest for every run): {same}; CPU this / base, median of "
          f"{args.repeat}: {ratio:.2f}; load average {os.getloadavg()[0]:.1f}")
    return {"identical": same, "ratio": ratio, "runs": runs}


if __name__ == "__main__":
    main(sys.argv[1:])
