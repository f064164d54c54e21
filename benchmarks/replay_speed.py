"""Replay speed and memory (issue #7 items 3 and 4): the whole Philly trace on its cluster.

    python benchmarks/replay_speed.py [--quick] [--until DAYS] [--profile]

Importer defaults (load_cluster("philly"), load_trace("philly")), `scheduler.sim.replay.replay` with its
defaults (one cycle per event batch, at most one per 60 s of simulated time). Measures the wall time of
the replay itself (import timed apart), peak RSS, and the report's figures. Target: the whole trace
(82,247 jobs) in at most 60 s wall. --profile runs it under cProfile and prints the top functions.
--quick replays the 3 days from day 20 (CI; the first 19.5 days see ~70 arrivals).
--by-day prints the process CPU, wall time, cycles and pending jobs of each simulated day (the replay's
progress hook); --profile-days 57-61[,64-70] profiles those days of the run (cProfile switched on and off
at day boundaries, so the state comes from every day before, unlike profile_replay.py's windows that start
from an empty cluster) and prints the top functions of each window.
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
    ap.add_argument("--by-day", action="store_true", help="CPU, wall, cycles and pending jobs per simulated day")
    ap.add_argument("--profile-days", default="", help="day windows to cProfile inside the run, e.g. 57-61,64-70")
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
    days = DayHook(args.profile_days) if args.by_day or args.profile_days else None
    t0, c0 = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    rep = replay(cluster, trace, progress=days)
    if days is not None:
        days.stop()
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
    if days is not None:
        out["by_day"] = days.rows
        if args.by_day:
            for day, r in sorted(days.rows.items()):
                print(f"day {day:4d}: {r['cycles']:5d} cycles, CPU {r['cpu']:6.2f} s, wall {r['wall']:6.2f} s, "
                      f"{1e3 * r['cpu'] / r['cycles']:5.2f} ms CPU / cycle, pending max {r['pending_max']}")
        out["profile_days"] = days.report()
        print(out["profile_days"])
    # the recorded results are whole runs: a run cut short (--until) or profiled by day windows is not one
    if not args.tiny and args.until is None and not args.profile_days:
        C.save(f"replay_speed_{out['mode']}{'_profile' if profiler else ''}", out)
    return out


class DayHook:
    """The replay's progress callback: per simulated day (since time 0 of the loaded trace: a slice loaded from day D starts at 0) the cycles,
    process CPU and wall seconds spent up to each cycle's end, and the most pending jobs; cProfile on
    during the day windows of `windows` ("57-61,64-70", days [start, end))."""

    def __init__(self, windows: str):
        self.windows = [tuple(map(float, w.split("-"))) for w in windows.split(",") if w]
        self.profiles = [cProfile.Profile() for _ in self.windows]
        self.cycles = [0] * len(self.windows)
        self.active = None
        self.rows: dict[int, dict] = {}
        self.mark = (time.process_time(), time.perf_counter())

    def __call__(self, p) -> None:
        cpu, wall = time.process_time(), time.perf_counter()
        day = int(p.now // 86400)
        r = self.rows.setdefault(day, {"cycles": 0, "cpu": 0.0, "wall": 0.0, "pending_max": 0})
        r["cycles"] += 1
        r["cpu"] += cpu - self.mark[0]
        r["wall"] += wall - self.mark[1]
        r["pending_max"] = max(r["pending_max"], p.pending)
        want = next((i for i, (s, e) in enumerate(self.windows) if s <= p.now / 86400 < e), None)
        if want != self.active:
            if self.active is not None:
                self.profiles[self.active].disable()
            if want is not None:
                self.profiles[want].enable()
            self.active = want
        if want is not None:
            self.cycles[want] += 1
        self.mark = (time.process_time(), time.perf_counter())

    def stop(self) -> None:
        if self.active is not None:
            self.profiles[self.active].disable()
            self.active = None

    def report(self) -> str:
        buf = io.StringIO()
        for (s, e), prof, cycles in zip(self.windows, self.profiles, self.cycles):
            buf.write(f"== days {s:g}-{e:g} (profiled inside the whole run): {cycles} cycles ==\n")
            if not cycles:
                continue
            stats = pstats.Stats(prof, stream=buf)
            stats.sort_stats("tottime").print_stats(25)
            stats.sort_stats("cumulative").print_stats(30)
        return buf.getvalue()


if __name__ == "__main__":
    main(sys.argv[1:])
