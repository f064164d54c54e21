"""Issue 16's end-to-end and binding targets as ratios from one run: this checkout against a base checkout.

    python benchmarks/issue16_ab.py --base DIR [--pairs N] [--what e2e,bind]

Issue 16 set its targets on the machine it was filed on (end to end 2.07 s there, target under 1 s; binding at
least 10,000 tasks/s, where the code it was filed on bound 6,311) and asks for each "as a ratio from one run".
This runs the same measurement of two checkouts one after the other on this machine (the base first in odd pairs,
this one first in even pairs), each in its own process with that checkout's import path and its own throw-away
database (benchmarks/_db.bench_database of that checkout):

- e2e: `cycle_scale.end_to_end` on the headline world (`_common.scale_world(racks=280, pending=10_000,
  running=5_000)`: 20,160 GPUs; two cycles, the median of snapshot + engine + apply), seconds, after two engine
  cycles of that world (`cycle_scale.time_engine`), as `cycle_scale.py --e2e-only` runs it; e2e-cold: the same
  without the engine cycles before (the end to end first in its process);
- bind: `bind_throughput.main` with its defaults (20,000 one-GPU jobs on 20,160 GPUs), tasks bound and committed
  per second.

It prints each figure and the ratio this / base, and writes them to benchmarks/results/issue16_ab.json. With DIR
a checkout of b039d01 (the parent of issue 16's first commit, febe270: the code the issue measured), the targets as
ratios are: end to end at most 1.00 / 2.07 = 0.483 of the base's, binding at least 10,000 / 6,311 = 1.585 of the
base's (the whole Philly replay's, 60 / 256 = 0.234 of the base's, is benchmarks/philly_whole_ab.py). A single
measurement (`--one DIR WHAT OUT`) runs in the process and writes its figures as JSON to OUT (neither checkout's
results files are written there).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RATIO_TARGETS = {"e2e": ("total", "<=", 1.00 / 2.07), "e2e-cold": ("total", "<=", 1.00 / 2.07),
                 "bind": ("tasks_per_second", ">=", 10_000 / 6_311)}


def one(root: str, what: str, out: str) -> None:
    sys.path[:0] = [os.path.join(root, "benchmarks"), root, os.path.join(root, "platform")]
    import _common

    _common.save = lambda *a, **k: None  # neither checkout's committed results are overwritten
    if what in ("e2e", "e2e-cold"):
        import cycle_scale

        world = _common.scale_world(racks=280, pending=10_000, running=5_000)
        if what == "e2e":
            cycle_scale.time_engine(world, 2)  # as `cycle_scale.py --e2e-only` does before its end to end (warm)
        got = cycle_scale.end_to_end(world, 2)
        figures = {**got["median"], "binds": got["runs"][0]["binds"]}
    else:
        import bind_throughput

        got = bind_throughput.main([])
        figures = {"tasks_per_second": got["tasks_per_second"], "tasks_bound": got["tasks_bound"],
                   **got["split_seconds"]}
    with open(out, "w") as f:
        json.dump(figures, f)


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base")
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--what", default="e2e,bind")
    ap.add_argument("--one", nargs=3, metavar=("DIR", "WHAT", "OUT"))
    args = ap.parse_args(argv)
    if args.one:
        one(*args.one)
        return []
    if not args.base:
        ap.error("--base DIR is required (a checkout to compare with, e.g. a git worktree of b039d01)")
    here, tmp, rows = os.path.dirname(HERE), tempfile.mkdtemp(prefix="issue16_ab_"), []
    for what in [w.strip() for w in args.what.split(",") if w.strip()]:
        if what not in RATIO_TARGETS:
            ap.error(f"--what: {what!r} is not one of {', '.join(RATIO_TARGETS)}")
        key, sense, target = RATIO_TARGETS[what]
        for i in range(args.pairs):
            trees = [("base", args.base), ("this", here)] if i % 2 == 0 else [("this", here), ("base", args.base)]
            got = {}
            for name, root in trees:
                out = os.path.join(tmp, f"{what}-{name}{i}.json")
                subprocess.run([sys.executable, __file__, "--one", root, what, out], check=True,
                               stdout=subprocess.DEVNULL)
                with open(out) as f:
                    got[name] = json.load(f)
            ratio = got["this"][key] / got["base"][key]
            met = ratio <= target if sense == "<=" else ratio >= target
            rows.append({"what": what, "pair": i + 1, "first": trees[0][0], **{n: got[n] for n in got},
                         "ratio": ratio, "target": f"{sense} {target:.3f}", "met": met})
            print(f"{what} pair {i + 1} ({trees[0][0]} first): base {key} {got['base'][key]:.3f}, this "
                  f"{got['this'][key]:.3f}; this / base {ratio:.3f} (target {sense} {target:.3f}: "
                  f"{'met' if met else 'not met'}); base {_split(got['base'])}; this {_split(got['this'])}", flush=True)
    if rows:
        import _common

        _common.save("issue16_ab", {"machine": _common.machine(), "base": os.path.abspath(args.base),
                                    "command": "python benchmarks/issue16_ab.py " + " ".join(argv or sys.argv[1:]),
                                    "rows": rows})
    return rows


def _split(fig: dict) -> str:
    return " + ".join(f"{k} {fig[k]:.2f}" for k in ("snapshot", "engine", "apply") if k in fig)


if __name__ == "__main__":
    main(sys.argv[1:])
