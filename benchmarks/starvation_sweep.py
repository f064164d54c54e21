"""Drain reservations for starving gangs: their cost and benefit on a Philly slice (no time limits).

    python benchmarks/starvation_sweep.py [--days 14]

Replays days 20 .. 20+N of the Philly trace at the importer defaults with several CycleConfig settings of
the drain reservation (CycleConfig.starvation_seconds, max_reservations) and prints the mean allocation
rate and queueing p50 / p99 (seconds) by job size. Results: benchmarks/RESULTS.md.
"""
import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "platform")]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")

from clusterspec.importers import load_cluster, load_trace  # noqa: E402
from scheduler.core import CycleConfig  # noqa: E402
from scheduler.sim.replay import replay  # noqa: E402

SETTINGS = [
    ("no drain reservations", CycleConfig(starvation_seconds=1e12)),
    ("30 min, at most 4", CycleConfig(max_reservations=4)),
    ("30 min, at most 8 (default)", CycleConfig()),
    ("30 min, at most 16", CycleConfig(max_reservations=16)),
    ("2 h, at most 8", CycleConfig(starvation_seconds=7200, max_reservations=8)),
]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description="drain reservation sweep")
    parser.add_argument("--days", type=float, default=14.0)
    parser.add_argument("--quick", action="store_true", help="CI: 2 days, two settings")
    args = parser.parse_args(argv)
    days, settings = (2.0, SETTINGS[:2]) if args.quick else (args.days, SETTINGS)
    cluster = load_cluster("philly")
    trace = load_trace("philly", start_days=20, until_days=20 + days)
    print("| setting | mean allocation | 5-8 GPUs p50 / p99 | 9-32 GPUs p50 / p99 | 1 GPU p99 |")
    print("|---|---|---|---|---|")
    out = {"days": days, "results": {}}
    for label, config in settings:
        r = replay(cluster, trace, config=config).to_dict()
        q = r["queueing_by_size"]
        out["results"][label] = {"mean_allocation_rate": r["mean_allocation_rate"], "queueing_by_size": q}
        h = lambda s: f"{s / 3600:.1f} h" if s is not None else "-"  # noqa: E731
        print(f"| {label} | {r['mean_allocation_rate']:.1%} | {h(q['5-8']['p50'])} / {h(q['5-8']['p99'])} | "
              f"{h(q['9-32']['p50'])} / {h(q['9-32']['p99'])} | {h(q['1']['p99'])} |", flush=True)
    return out


if __name__ == "__main__":
    main()
