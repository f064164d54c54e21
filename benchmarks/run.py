"""Run every benchmark in sequence and print a summary (issue #7).

    python benchmarks/run.py --quick    # CI: small settings, under 3 minutes on a 2-core machine
    python benchmarks/run.py --full     # the figures of benchmarks/RESULTS.md (tens of minutes)
    python benchmarks/run.py --quick --only cycle_scale,optimum_gap

One benchmark at a time (they time themselves; never run two at once on a shared machine). Each
script's figures are also written to benchmarks/results/<name>_<mode>.json. PostgreSQL parts are
skipped with a note when no server answers (BENCH_PG_URL, default postgres://postgres@127.0.0.1:5432).
Exit status 1 if a benchmark crashed; missed targets are reported, not failed.
"""
from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback

import _common as C

ORDER = ("cycle_scale", "bind_throughput", "replay_speed", "baselines", "optimum_gap", "openb_fgd",
         "topology_payload", "failure_sweep", "starvation_sweep", "execution_latency", "federation")


def summary_line(name: str, r: dict) -> str:
    if not isinstance(r, dict):
        return "no result"
    if r.get("skipped"):
        return f"skipped: {r['skipped']}"
    if name == "cycle_scale":
        h = r["headline"]
        s = (f"{h['world']['gpus']} GPUs / {h['world']['pending']} pending / {h['world']['running']} running: "
             f"engine {h['wall']['median']:.3f} s (target 0.5)")
        e = r.get("end_to_end", {})
        if "median" in e:
            m = e["median"]
            s += (f"; PostgreSQL end to end {m['total']:.2f} s = snapshot {m['snapshot']:.2f} + engine "
                  f"{m['engine']:.2f} + apply {m['apply']:.2f} (target {r['targets']['end_to_end_s']['target']:g} s, issue 16)")
        elif e.get("skipped"):
            s += f"; end to end skipped ({e['skipped']})"
        return s + f"; peak RSS {r['peak_rss_mib']:.0f} MiB"
    if name == "bind_throughput":
        return f"{r['tasks_bound']} tasks in {r['wall_seconds']:.2f} s = {r['tasks_per_second']:.0f} tasks/s (target {r['target']['target']:,.0f}, issue 16)"
    if name == "replay_speed":
        rep = r["report"]
        days = "whole trace" if r["until_days"] is None else f"{r['until_days']} days"
        return (f"philly {days}, {r['jobs']} jobs: {r['replay_wall_seconds']:.1f} s wall (target 60 s for the whole "
                f"trace), {rep['cycles']} cycles, peak RSS {r['peak_rss_mib']:.0f} MiB")
    if name == "baselines":
        return "; ".join(f"{k}: alloc {v['allocation_rate']:.1%} frag {v['fragmentation_rate']:.1%}"
                         for k, v in r["results"].items())
    if name == "optimum_gap":
        return (f"{len(r['snapshots'])} snapshots: gap mean {r['gap_full']['mean']:.2%}, worst "
                f"{r['gap_full']['worst']:.2%} (target: mean 1 %, worst 5 %)")
    if name == "openb_fgd":
        parts = []
        for k, v in r["results"].items():
            at = {c["arrived"]: c for c in v["curve"]}
            c = at.get(1.0) or v["curve"][-1]
            parts.append(f"{k}: {c['requested']:.1%} requested / {c['occupied']:.1%} occupied at "
                         f"{c['arrived']:.0%} arrived")
        return "; ".join(parts)
    if name == "execution_latency":
        parts = []
        for poll, v in r["latency"].items():
            lat = ", ".join(f"{size}: {s['summary']['bind_to_process']['median']:.2f}/"
                            f"{s['summary']['bind_to_process']['p99']:.2f}" for size, s in v["sizes"].items())
            parts.append(f"poll {float(poll):g} s bind->process median/p99 by gang size {lat} s")
        lat1 = r["latency"].get("1.0")
        if lat1:
            gone = [s["summary"]["stop_gone"]["median"] for s in lat1["sizes"].values()]
            parts.append(f"poll 1 s stop (cancel -> no process) {min(gone):.2f}-{max(gone):.2f} s")
        f = r["footprint"].get("8x8 poll 1")
        if f:
            parts.append(f"8 agents x 8 tasks: {f['agent_cpu_s_per_min_total']:.2f} agent CPU s/min, supervisor RSS "
                         f"{f['supervisor_rss_mib']['median']:.1f} MiB/task")
        return f"({r['database']}) " + "; ".join(parts)
    if name == "federation":
        d, f = r["policies"]["dispatcher"], r["policies"]["first-to-admit"]
        return (f"{r['jobs']} jobs on {'/'.join(map(str, r['clusters_gpus']))} GPUs: dispatcher vs first-to-admit "
                f"copies/job {d['copies_per_job']:.2f} vs {f['copies_per_job']:.2f}, borrowed starts "
                f"{d['borrowed_starts']} vs {f['borrowed_starts']}, reclaims {d['reclaims']} vs {f['reclaims']}, "
                f"mean wait {d['mean_wait_s']:.0f} vs {f['mean_wait_s']:.0f} s; decisions/s "
                f"{r['decisions_per_s'].get(10)} (10 clusters) / {r['decisions_per_s'].get(50)} (50)")
    return "done"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true")
    mode.add_argument("--full", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated benchmark names")
    args = ap.parse_args(argv)
    names = [n for n in ORDER if not args.only or n in args.only.split(",")]
    flag = [] if args.full else ["--quick"]
    print(f"benchmarks ({'full' if args.full else 'quick'}) on {C.machine()}", flush=True)
    results, crashed, times = {}, [], {}
    t_all = time.perf_counter()
    for name in names:
        print(f"\n== {name} {' '.join(flag)}", flush=True)
        t0 = time.perf_counter()
        try:
            results[name] = importlib.import_module(name).main(flag)
        except Exception:  # noqa: BLE001 - report and go on with the others
            traceback.print_exc()
            crashed.append(name)
            results[name] = None
        times[name] = time.perf_counter() - t0
    print(f"\n== summary ({time.perf_counter() - t_all:.0f} s)")
    for name in names:
        line = "CRASHED" if name in crashed else summary_line(name, results[name])
        print(f"{name:<16} {times[name]:>6.0f} s  {line}")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
