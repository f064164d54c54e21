#!/usr/bin/env python3
"""Helios QSSF-service simulator (S-Lab-System-Group/HeliosArtifact, SC '21) vs our replay on one Philly slice.

    .venv/bin/python benchmarks/peers/helios_vs_ours.py            # 0.5 day of arrivals from trace day 30, durations capped at 6 h (~15 s)
    .venv/bin/python benchmarks/peers/helios_vs_ours.py --full     # 2 days of arrivals, durations capped at 24 h
    options: --start DAYS --days DAYS --max-hours H --policies fifo,sjf,srtf

Setup (pure Python, runs with the product venv's pandas):
    python3 benchmarks/peers/extract_git.py <mirror of S-Lab-System-Group/HeliosArtifact> $PEERS_WORK/helios-artifact

The common input: our importer's Philly trace (load_philly_trace, compress 1.0) for [start, start+days)
replay days, restricted to the 11 VCs of philly_vc.csv (Helios' own VC node counts x --vc-scale, default 0.25 ->
88 x 8-GPU nodes = 704 GPUs, so a short slice has contention) and to jobs that fit their VC; submit and duration rounded to whole seconds (Helios steps one
second at a time and compares times for equality); durations capped at --max-hours for both so the
per-second Helios loop finishes in minutes. Helios: utils.simulate_vc per VC (hard partitions, 8-GPU nodes,
'consolidate' placement), its FIFO / SJF / SRTF policies (QSSF needs its trained estimator: not run).
Ours: scheduler.sim.replay on a cluster of the same 8-GPU nodes (leaves of 16, one spine) with one
queue per VC, guarantee = quota = limit = the VC's GPUs (no borrowing, like Helios' partitions; a
'borrow' variant lifts the limit), cycle_interval 1 s. Compared: mean queueing delay, mean JCT
(queue + run), jobs, wall time and simulated jobs per wall second.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

WORK = Path(__import__("os").environ.get("PEERS_WORK") or Path(__import__("tempfile").gettempdir()) / "peers-work")
HELIOS = WORK / "helios-artifact" / "framework" / "QSSF Service"


def common_jobs(product: Path, start: float, days: float, max_hours: float, vc_scale: float):
    sys.path[:0] = [str(product), str(product / "platform")]
    from clusterspec.importers.philly import load_philly_trace
    import csv
    vcs = {}
    with open(HELIOS / "data" / "philly_vc.csv") as f:
        for r in csv.DictReader(f):
            vcs[r["vc"]] = max(1, round(int(r["node num"]) * vc_scale))
    tr = load_philly_trace(product / "data" / "philly" / "philly_jobs_pollux.csv", compress=1.0,
                           start_days=start, until_days=start + days)
    jobs = []
    for j in tr.jobs:
        g = j.tasks * j.gpus_per_task
        if j.queue not in vcs or g > vcs[j.queue] * 8:
            continue
        jobs.append({"id": j.id, "vc": j.queue, "gpus": g, "tasks": j.tasks, "per": j.gpus_per_task,
                     "submit": int(round(j.submit)), "duration": max(1, int(round(min(j.duration, max_hours * 3600))))})
    return vcs, jobs


def run_helios(vcs: dict, jobs: list, policy: str, out: Path) -> dict:
    sys.path.insert(0, str(HELIOS))
    import pandas as pd
    import cluster as hcluster
    import utils as hutils
    logging.disable(logging.INFO)
    df = pd.DataFrame({"user": "u", "vc": [j["vc"] for j in jobs], "jobname": [j["id"] for j in jobs],
                       "gpu_num": [j["gpus"] for j in jobs], "state": "COMPLETED",
                       "submit_time": [j["submit"] for j in jobs], "duration": [j["duration"] for j in jobs]})
    df["remain"] = df["duration"]
    df["start_time"] = sys.maxsize
    df["end_time"] = sys.maxsize
    df["ckpt_times"] = 0
    df["queue"] = 0
    df["jct"] = 0
    df["status"] = None
    df = df.sort_values("submit_time").reset_index(drop=True)
    trace = hutils.trace_parser(df)
    used = {v: n for v, n in vcs.items() if (df["vc"] == v).any()}
    cl = hcluster.Cluster(used, 8, 96)
    log_dir = out / f"helios-{policy}"
    log_dir.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger("helios")
    t0, c0 = time.perf_counter(), time.process_time()
    for vc in cl.vc_list:
        hutils.simulate_vc(trace, vc, "consolidate", str(log_dir), policy, logger, 0)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    res = pd.concat([pd.read_csv(log_dir / vc.vc_name / f"{policy}_consolidate_{vc.vc_name}_log.csv") for vc in cl.vc_list])
    return {"jobs": len(res), "mean_queue_s": float(res["queue"].mean()), "mean_jct_s": float(res["jct"].mean()),
            "p99_queue_s": float(res["queue"].quantile(0.99)), "wall_s": wall, "cpu_s": cpu}


def run_ours(product: Path, vcs: dict, jobs: list, borrow: bool) -> dict:
    from scheduler.core import CycleConfig
    from scheduler.sim.replay import replay
    from clusterspec.spec import Trace, TraceJob, vc_partitioned_cluster
    cluster = vc_partitioned_cluster(vcs, borrow=borrow)
    trace = Trace("philly-slice", tuple(TraceJob(j["id"], j["vc"], float(j["submit"]), float(j["duration"]), j["tasks"],
                                                 j["per"], min_available=j["tasks"]) for j in jobs))
    t0, c0 = time.perf_counter(), time.process_time()
    rep = replay(cluster, trace, config=CycleConfig(), cycle_interval=1.0, fairness=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    mean_dur = sum(j["duration"] for j in jobs) / len(jobs)
    q = rep.queueing
    return {"jobs": rep.jobs_started, "finished": rep.jobs_finished, "mean_queue_s": q.get("mean"),
            "mean_jct_s": (q.get("mean") or 0) + mean_dur if rep.jobs_finished == len(jobs) else None,
            "p99_queue_s": q.get("p99"), "evictions": rep.evictions, "cycles": rep.cycles, "wall_s": wall, "cpu_s": cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--start", type=float, default=30.0, help="trace day of the slice start (default 30: busy; the first 19.5 days are ~idle)")
    ap.add_argument("--days", type=float, default=None, help="days of arrivals (default 0.5, --full 2)")
    ap.add_argument("--max-hours", type=float, default=None, help="duration cap (default 6 h, --full 24 h)")
    ap.add_argument("--policies", default="fifo,sjf")
    ap.add_argument("--vc-scale", type=float, default=0.25, help="VC node counts x this (default 0.25 = 88 nodes, like our 0.25-scale Philly cluster)")
    ap.add_argument("--product", default=".")
    args = ap.parse_args()
    days = args.days or (2.0 if args.full else 0.5)
    cap = args.max_hours or (24.0 if args.full else 6.0)
    product = Path(args.product)
    vcs, jobs = common_jobs(product, args.start, days, cap, args.vc_scale)
    print(f"slice: days {args.start}-{args.start + days}, {len(jobs)} jobs of {len(vcs)} VCs on {sum(vcs.values())} x 8 GPUs, "
          f"durations capped at {cap:g} h; load average {os.getloadavg()[0]:.1f}", flush=True)
    rows = {}
    for borrow in (False, True):
        r = run_ours(product, vcs, jobs, borrow)
        rows["ours" + ("_borrow" if borrow else "_partitioned")] = r
        print("ours", "borrow" if borrow else "partitioned", r, flush=True)
    for pol in args.policies.split(","):
        r = run_helios(vcs, jobs, pol, WORK / "helios-out")
        rows[f"helios_{pol}"] = r
        print("helios", pol, r, flush=True)
    print("\n| run | jobs | mean queue | p99 queue | mean JCT | wall s | CPU s | jobs simulated / wall s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for k, r in rows.items():
        jct = "-" if r["mean_jct_s"] is None else f"{r['mean_jct_s'] / 3600:.2f} h"
        print(f"| {k} | {r['jobs']} | {r['mean_queue_s'] / 60:.1f} min | {r['p99_queue_s'] / 3600:.2f} h | {jct} | "
              f"{r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['jobs'] / r['wall_s']:.0f} |")
    for pol in args.policies.split(","):  # issue 16's target: ours partitioned <= 0.5 x Helios, CPU
        if f"helios_{pol}" in rows:
            print(f"CPU ratio ours_partitioned / helios_{pol}: "
                  f"{rows['ours_partitioned']['cpu_s'] / rows[f'helios_{pol}']['cpu_s']:.2f}")


if __name__ == "__main__":
    main()
