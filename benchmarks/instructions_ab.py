"""Instructions executed by one replay of the Helios slice, per checkout, counted by valgrind (issue 16).

    python benchmarks/instructions_ab.py ROOT [ROOT2 ...] [--days 2] [--parallel]
    python benchmarks/instructions_ab.py ROOT [ROOT2 ...] --philly 28-30 [--parallel]

Wall and CPU time on a shared two-core box move by 10-40 % with the other work on it, more than most single
speed-ups; the number of instructions a run executes does not (two runs of one tree agree within ~0.04 %).
Each ROOT (a checkout: its `scheduler`, `clusterspec` and tests/sim/test_replay_digest.py's helios_slice) is
run under `valgrind --tool=cachegrind --cache-sim=no` twice: once up to the replay (interpreter start, imports,
trace load) and once through it; the difference is the replay's own instructions. PYTHONHASHSEED=0 fixes string
hashing, so the runs are repeatable. Prints per ROOT the replay's instructions, its report's cycles and mean
queueing delay (the same decisions give the same figures: the Helios slice's are 14,800 cycles and
9230.686056458511 s), and each ROOT's ratio to the first. About 1 min per ROOT and day of the slice under
valgrind (x20 of a plain run); --parallel runs the ROOTs at once (one process each).

Instructions are a proxy: a change that trades instructions for cache misses or allocation can move time and
instructions differently. Confirm a kept change with `benchmarks/helios_slice_cpu.py` on a quiet box.
--philly START-END counts a window of the shipped Philly trace instead (load_cluster("philly"),
load_trace("philly", start_days=START, until_days=END), `replay` with its defaults: the whole-trace replay's
settings from an empty cluster); its REPORT line is the cycles and the mean allocation rate.
Requires valgrind (Debian package `valgrind`).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

_CHILD = r"""
import importlib.util, sys
root, days, through = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
sys.path[:0] = [root, root + "/platform"]
if days.startswith("philly:"):
    from clusterspec.importers import load_cluster, load_trace
    from scheduler.sim.replay import replay
    s, e = map(float, days[7:].split("-"))
    cluster, trace = load_cluster("philly"), load_trace("philly", start_days=s, until_days=e)
    if through:
        rep = replay(cluster, trace)
        print("REPORT", rep.cycles, repr(rep.mean_allocation_rate))
    sys.exit(0)
days = float(days)
from scheduler.core import CycleConfig
from scheduler.sim.replay import replay
spec = importlib.util.spec_from_file_location("slices", root + "/tests/sim/test_replay_digest.py")
slices = importlib.util.module_from_spec(spec)
spec.loader.exec_module(slices)
cluster, trace = slices.helios_slice(days, borrow=False, start=30.0, **({"max_hours": 24.0} if days >= 2 else {}))
if through:
    rep = replay(cluster, trace, config=CycleConfig(), cycle_interval=1.0, fairness=False)
    print("REPORT", rep.cycles, repr(rep.queueing.get("mean")))
"""


def _count(root: str, days, through: bool) -> tuple[int, str]:
    """(instructions, the child's REPORT line or '') of one run under cachegrind."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    out = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                          sys.executable, "-c", _CHILD, root, str(days), "1" if through else "0"],
                         capture_output=True, text=True, env=env, check=True)
    refs = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if refs is None:
        raise RuntimeError(f"no instruction count from valgrind for {root}:\n{out.stderr[-2000:]}")
    report = next((line for line in out.stdout.splitlines() if line.startswith("REPORT")), "")
    return int(refs.group(1).replace(",", "")), report


def measure(root: str, days) -> dict:
    """{'root', 'replay_instructions', 'cycles', 'figure'} of one checkout: figure = the report's mean queueing delay
    (s; the Helios slice) or mean allocation rate (--philly)."""
    setup, _ = _count(root, days, False)
    total, report = _count(root, days, True)
    _, cycles, mean = report.split()
    return {"root": root, "replay_instructions": total - setup, "cycles": int(cycles), "figure": mean}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", help="checkouts to compare; the first is the base")
    parser.add_argument("--days", type=float, default=2.0, help="days of the slice from day 30 (default 2)")
    parser.add_argument("--philly", default="", help="a window START-END of the Philly trace instead, e.g. 28-30")
    parser.add_argument("--parallel", action="store_true", help="run the checkouts at once")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind)")
    roots = [os.path.abspath(r) for r in args.roots]
    with ThreadPoolExecutor(max_workers=len(roots) if args.parallel else 1) as pool:
        what = "philly:" + args.philly if args.philly else args.days
        rows = list(pool.map(lambda r: measure(r, what), roots))
    base = rows[0]["replay_instructions"]
    for row in rows:
        print(f"{row['root']}: {row['replay_instructions']:,} instructions in the replay "
              f"({row['replay_instructions'] / base:.4f} of the first), {row['cycles']} cycles, "
              + (f"mean allocation {row['figure']}" if args.philly else f"mean queue {row['figure']} s"))


if __name__ == "__main__":
    main()
