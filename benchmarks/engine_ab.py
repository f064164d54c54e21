"""The engine alone on one big cycle, before / after side by side, with the cycle's bindings compared (issue 16).

    python benchmarks/engine_ab.py --base DIR [--world headline|bind] [--rounds N] [--cycles C]

DIR is another checkout of the product (e.g. `git archive <commit> | tar -x -C DIR`). Each side builds the
world with its own benchmarks/_common.py and runs `run_cycle` with its own `scheduler`, in its own process;
sides alternate (base, this, base, this, ...) so both see the same load. Worlds: "headline" =
benchmarks/cycle_scale.py's (20,160 GPUs, 5,000 running, 10,000 pending: 10,000 starts in one cycle);
"bind" = benchmarks/bind_throughput.py's (the same cluster empty, 20,000 one-GPU jobs). Per process, C cycles
of each kind, process CPU (time.process_time) of `run_cycle` alone, the cyclic GC off as in the platform's
cycle: "cold" = a new EngineCache every cycle (a worker's first cycle); "fresh" = one EngineCache, every cycle
on new NodeInfo / JobInfo objects (copies: what the platform's snapshot gives each cycle). Every cycle's
bindings (job, every task's role, index, node and GPU indices, the domain and tier) are hashed; the script
prints the median CPU per side and kind, the ratio this / base, and whether the two sides' bindings are
identical.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import copy, dataclasses, gc, hashlib, json, sys, time
root, world, cycles = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path[:0] = [root + "/benchmarks", root, root + "/platform"]
import _common as C
from scheduler.core import EngineCache, run_cycle
if world == "headline":
    snap = C.scale_world(racks=280, pending=10_000, running=5_000)
else:
    import bind_throughput
    snap = bind_throughput.world(280, 20_000, 1)
run_cycle(snap.__class__(nodes=snap.nodes[:1], domains=snap.domains), None)  # imports and first-call costs

def fresh(s):
    return dataclasses.replace(s, nodes=tuple(copy.copy(n) for n in s.nodes), jobs=tuple(copy.copy(j) for j in s.jobs))

out, digests, binds = {"cold": [], "fresh": []}, set(), 0
for kind in ("cold", "fresh"):
    cache = EngineCache()
    for _ in range(cycles):
        s = fresh(snap)
        if kind == "cold":
            cache = EngineCache()
        gc.collect()
        gc.disable()
        t0 = time.process_time()
        result = run_cycle(s, None, cache=cache)
        out[kind].append(time.process_time() - t0)
        gc.enable()
        binds = len(result.bindings)
        digests.add(hashlib.sha256(repr([(b.job_id, [(t.role, t.index, t.node, t.gpus) for t in b.tasks], b.domain,
                                          b.tier) for b in result.bindings]).encode()).hexdigest())
print(json.dumps({**out, "binds": binds, "digests": sorted(digests)}))
"""


def run_side(tree: Path, world: str, cycles: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tree), world, str(cycles)], capture_output=True,
                          text=True, env=env, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, type=Path)
    ap.add_argument("--world", choices=("headline", "bind"), default="headline")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cycles", type=int, default=3)
    args = ap.parse_args(argv)
    sides = {"base": args.base.resolve(), "this": ROOT}
    runs: dict = {name: {"cold": [], "fresh": [], "digests": set(), "binds": set()} for name in sides}
    for r in range(args.rounds):
        for name, tree in sides.items():
            load = os.getloadavg()[0]
            got = run_side(tree, args.world, args.cycles)
            runs[name]["cold"] += got["cold"]
            runs[name]["fresh"] += got["fresh"]
            runs[name]["digests"].update(got["digests"])
            runs[name]["binds"].add(got["binds"])
            print(f"round {r + 1} {name:>4} (load {load:.1f}): cold {statistics.median(got['cold']):.3f} s, fresh "
                  f"{statistics.median(got['fresh']):.3f} s, binds {got['binds']}", flush=True)
    report: dict = {"world": args.world, "base": str(sides["base"])}
    for kind in ("cold", "fresh"):
        before, after = statistics.median(runs["base"][kind]), statistics.median(runs["this"][kind])
        report[kind] = {"base": before, "this": after, "ratio": after / before}
        print(f"{kind}: base {before:.3f} s, this {after:.3f} s, ratio {after / before:.2f} "
              f"(medians of {len(runs['base'][kind])} cycles each)")
    same = runs["base"]["digests"] == runs["this"]["digests"] and len(runs["this"]["digests"]) == 1
    report["bindings_identical"] = same
    print(f"bindings identical: {same} ({sorted(runs['this']['binds'])} binds; digest "
          f"{sorted(runs['this']['digests'])[0][:16]})")
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
