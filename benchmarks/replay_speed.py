"""Replay speed and memory (issue #7 items 3 and 4): the whole Philly trace on its cluster.

    python benchmarks/replay_speed.py [--quick] [--until DAYS] [--profile]

Importer defaults (load_cluster("philly"), load_trace("philly")), `scheduler.sim.replay.replay` with its
defaults (one cycle per event batch, at most one per 60 s of simulated time). Measures the wall time of
the replay itself (import timed apart), peak RSS, and the report's figures. Target: the whole trace
(82,247 jobs) in at most 60 s wall. --profile runs it under cProfile and prints the top functions.
--quick replays the 3 days from day 20 (CI; the first 19.5 days see ~70 arrivals).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from dataclasses import asdict

import _common as C

TARGET_S = 60.0


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 replay days from day 20 only")
    ap.add_argument("--tiny", action="store_true", help="first 2 replay days (smoke test)")
    ap.add_argument("--until", type=float, default=None, help="replay days (default: the whole trace)")
    ap.add_argument("--profile", action="store_true", help="cProfile the replay, print the top 25 functions")
    args = ap.parse_args(argv)
    from clusterspec.importers import load_cluster, load_trace
    from scheduler.sim.replay import replay

    until_days = args.until if args.until is not None else 0.5 if args.tiny else 3 if args.quick else None
    t0 = time.perf_counter()
    cluster = load_cluster("philly")
    start_days = 20.0 if (args.quick or args.tiny) and args.until is None else 0.0  # the first 19.5 days are ~idle
    trace = load_trace("philly", start_days=start_days, until_days=None if until_days is None else start_days + until_days)
    import_s = time.perf_counter() - t0
    rss_before = C.current_rss_mib()
    profiler = cProfile.Profile() if args.profile else None
    t0, c0 = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    rep = replay(cluster, trace)
    if profiler:
        profiler.disable()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = {
        "machine": C.machine(), "mode": "tiny" if args.tiny else "quick" if args.quick else "full",
        "command": "python benchmarks/replay_speed.py " + " ".join(argv or sys.argv[1:]),
        "start_days": start_days, "until_days": until_days, "cluster_gpus": cluster.gpus, "cluster_nodes": len(cluster.nodes),
        "jobs": len(trace.jobs), "import_seconds": import_s, "replay_wall_seconds": wall, "replay_cpu_seconds": cpu,
        "load_average": os.getloadavg()[0],
        "rss_before_replay_mib": rss_before, "peak_rss_mib": C.peak_rss_mib(), "profiled": bool(profiler),
        "report": asdict(rep),
    }
    out["target"] = {"target": TARGET_S, "measured": wall, "met": wall <= TARGET_S,
                     "applies": until_days is None and not profiler}
    print(f"replay philly ({len(trace.jobs)} jobs, {cluster.gpus} GPUs, {rep.span_days:.1f} days): wall {wall:.1f} s "
          f"(CPU {cpu:.1f} s, load {out['load_average']:.1f}) "
          f"(import {import_s:.1f} s), {rep.cycles} cycles, engine mean {rep.engine_mean_ms:.1f} ms max "
          f"{rep.engine_max_ms:.0f} ms, peak RSS {out['peak_rss_mib']:.0f} MiB, started {rep.jobs_started}, "
          f"pending at end {rep.jobs_pending_at_end}, mean allocation {rep.mean_allocation_rate:.1%}", flush=True)
    if profiler:
        buf = io.StringIO()
        pstats.Stats(profiler, stream=buf).sort_stats("tottime").print_stats(25)
        out["profile_top"] = buf.getvalue()
        print(out["profile_top"])
    if not args.tiny:
        C.save(f"replay_speed_{out['mode']}{'_profile' if profiler else ''}", out)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
