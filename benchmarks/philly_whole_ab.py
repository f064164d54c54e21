"""The whole Philly replay of two checkouts started together, CPU side by side and the reports compared (issue 16).

    python benchmarks/philly_whole_ab.py --base DIR [--until DAYS] [--pairs N]

Each pair starts the base checkout's replay and this one's as two processes at the same moment (the base first in
odd pairs, this one first in even pairs), each the defaults of benchmarks/replay_speed.py (load_cluster("philly"),
the whole trace from day 0, `replay` with its defaults), and prints each process's replay CPU and wall seconds, the
ratio this / base, and every report field that differs (timings left out: wall seconds and the *_ms means).
A single process (`--one DIR OUT`) replays one checkout and writes {cpu, wall, report} as JSON to OUT.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict

HERE = os.path.dirname(os.path.abspath(__file__))


def one(root: str, out: str, until: float | None) -> None:
    sys.path[:0] = [root, os.path.join(root, "platform")]
    from clusterspec.importers import load_cluster, load_trace
    from scheduler.sim.replay import replay
    cluster, trace = load_cluster("philly"), load_trace("philly", start_days=0.0, until_days=until)
    c0, t0 = time.process_time(), time.perf_counter()
    rep = replay(cluster, trace)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    with open(out, "w") as f:
        json.dump({"cpu": cpu, "wall": wall, "cycles": rep.cycles, "report": asdict(rep)}, f, default=str)


def diffs(a, b, path: str = "") -> tuple[int, list[str]]:
    """(fields compared, paths that differ) of two reports, timings left out."""
    if isinstance(a, dict) and isinstance(b, dict):
        n, out = 0, []
        for k in sorted(set(a) | set(b), key=str):
            if any(s in str(k) for s in ("wall", "_ms")):
                continue
            m, d = diffs(a.get(k), b.get(k), f"{path}.{k}")
            n, out = n + m, out + d
        return n, out
    return 1, ([] if a == b else [path])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base")
    ap.add_argument("--until", type=float, default=None)
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--one", nargs=2, metavar=("DIR", "OUT"))
    args = ap.parse_args(argv)
    if args.one:
        return one(args.one[0], args.one[1], args.until)
    here = os.path.dirname(HERE)
    tmp = tempfile.mkdtemp(prefix="philly_ab_")
    for i in range(args.pairs):
        trees = [("base", args.base), ("this", here)] if i % 2 == 0 else [("this", here), ("base", args.base)]
        procs = {}
        for name, root in trees:
            out = os.path.join(tmp, f"{name}{i}.json")
            cmd = [sys.executable, __file__, "--one", root, out] + (["--until", str(args.until)] if args.until else [])
            procs[name] = (subprocess.Popen(cmd), out)
        got = {}
        for name, (p, out) in procs.items():
            p.wait()
            with open(out) as f:
                got[name] = json.load(f)
        n, d = diffs(got["base"]["report"], got["this"]["report"])
        print(f"pair {i + 1} ({trees[0][0]} started first): base CPU {got['base']['cpu']:.1f} s wall "
              f"{got['base']['wall']:.1f} s, this CPU {got['this']['cpu']:.1f} s wall {got['this']['wall']:.1f} s, "
              f"this / base {got['this']['cpu'] / got['base']['cpu']:.3f}; cycles {got['base']['cycles']} / "
              f"{got['this']['cycles']}; report fields {n}, differing {len(d)} {d[:5]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
