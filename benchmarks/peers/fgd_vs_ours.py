#!/usr/bin/env python3
"""FGD simulator (hkust-adsl/kubernetes-scheduler-simulator, ATC '23) vs our engine on the same openb input.

Brought into the project from the shared peers folder (../shared/peers/fgd_vs_ours.py, written against
commit c2e1cc7) and adapted: importers moved to clusterspec.importers, fractional pods are kept as
fractions (issue 14), `occupied` counts GPUs holding a fraction.

    .venv/bin/python benchmarks/peers/fgd_vs_ours.py                # 1/10 of the GPU nodes, FGD + BestFit (~2-3 min)
    .venv/bin/python benchmarks/peers/fgd_vs_ours.py --full         # all 1,213 GPU nodes (~10 min per policy)
    options: --node-frac F --stop 1.3 --policies FGD,BestFit,GpuPacking,DotProd,GpuClustering,Random --batch 1 --kube

Needs bin/simon built (offline, from the repo's vendor/ with Debian golang-go 1.19):
    apt-get install -y golang-go
    python3 ../shared/peers/extract_git.py <mirror of hkust-adsl/kubernetes-scheduler-simulator> $PEERS_WORK/fgd
    cd $PEERS_WORK/fgd && GOFLAGS=-mod=vendor GOPROXY=off go build -o bin/simon ./cmd   # ~6 min wall, 150 s CPU here

The common input (written under $PEERS_WORK/fgd-input/<tag>/): the openb GPU nodes, every k-th
row of openb_node_list_gpu_node.csv for --node-frac (keeps the model mix); the openb default pod list,
GPU pods only (our importer skips CPU-only pods, so they are dropped for both), in our importer's order
(creation_time, stable), replayed from its start again with new names until the arrived GPU requests
reach --stop x capacity (the FGD paper's 130 % methodology; a fractional pod counts gpu_milli/1000).
Pod names get a sequence prefix so that simon (which orders pods by name when they carry no creation
annotation) and ours see the same order. No deletions, a pod that does not fit on arrival fails.

simon: scripts/generate_config_and_run.py -e -b -f <input> -<POLICY> 1000 (workload tuning off, so it
schedules exactly this list), curve read from its per-pod "[Alloc]" log lines (Used GPU Milli =
requested, Used GPUs = occupied, Arrived GPU Milli). simon's policies run in the background, in parallel
with ours (each its own process; its CPU = user + system of its process tree, os.wait4), so that one run
of the script at 1,213 nodes fits a session. Ours: benchmarks/openb_fgd.run (one engine cycle
per --batch arrivals, default 1 = pod by pod like simon) on load_openb_cluster / load_openb_trace of the
same CSV files, each config with its own EngineCache (as the platform keeps one), the FGD score given the
pod list's request mix as its expected workload (Snapshot.workload), as simon takes its typical pods from
the same list. `--ours full` / `--policies ""` run a subset. Both share GPUs: ours places fractions with scheduler/core/sharing.py (FGD's score, every
openb GPU in mode "auto"); whole-GPU pods go through the regular engine (binpack) in `ours_full`, and are
placed by the same FGD score in `ours_fgd_whole` (CycleConfig(fgd_whole=True), as simon places every pod).
"""
from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import time
from pathlib import Path

WORK = Path(__import__("os").environ.get("PEERS_WORK") or Path(__import__("tempfile").gettempdir()) / "peers-work")
FGD = WORK / "fgd"
MARKS = [round(0.1 * i, 1) for i in range(1, 14)]
ALLOC = re.compile(r"\[Alloc\]; Used nodes: (\d+); Used GPUs: (\d+); Used GPU Milli: (\d+); Total GPUs: (\d+); "
                   r"Arrived GPU Milli: (\d+)")


def requested(num_gpu: int, gpu_milli: int) -> float:
    return num_gpu if gpu_milli >= 1000 or num_gpu > 1 else gpu_milli / 1000.0


def build_input(product: Path, frac: float, stop: float) -> tuple[Path, dict]:
    src = product / "data" / "alibaba-openb-fgd"
    tag = f"frac{frac:g}-stop{stop:g}"
    out = WORK / "fgd-input" / tag
    out.mkdir(parents=True, exist_ok=True)
    with open(src / "nodes" / "openb_node_list_gpu_node.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    k = max(1, round(1 / frac))
    nodes = [r for i, r in enumerate(rows) if i % k == 0] if frac < 1 else rows
    cap = sum(int(r["gpu"]) for r in nodes)
    with open(out / "nodes.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(nodes)
    with open(src / "pods" / "openb_pod_list_default.csv", newline="") as f:
        pods_all = list(csv.DictReader(f))
    gpu_pods = [p for p in pods_all if int(p["num_gpu"]) > 0]
    gpu_pods = [p for _, p in sorted(enumerate(gpu_pods), key=lambda ip: (int(ip[1]["creation_time"]), ip[0]))]
    seq, arrived, i = [], 0.0, 0
    while arrived / cap < stop - 1e-9:
        p = dict(gpu_pods[i % len(gpu_pods)])
        rep = i // len(gpu_pods)
        p["name"] = f"s{i:06d}-{p['name']}" + (f"-r{rep}" if rep else "")
        p["creation_time"] = str(i)  # keeps the order in our importer
        p["deletion_time"] = ""
        p["scheduled_time"] = ""
        seq.append(p)
        arrived += requested(int(p["num_gpu"]), int(p["gpu_milli"]))
        i += 1
    with open(out / "pods.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(pods_all[0].keys()))
        w.writeheader()
        w.writerows(seq)
    # simon input folder: node YAML (the repo's own, filtered to our nodes) + pod YAML (the repo's converter)
    simon_in = out / "simon"
    simon_in.mkdir(exist_ok=True)
    keep = {r["sn"] for r in nodes}
    docs = (FGD / "data" / "node_yaml" / "openb_node_list_gpu_node.yaml").read_text().split("\n---\n")
    kept = [d for d in docs if (m := re.search(r"^  name: (\S+)", d, re.M)) and m.group(1) in keep]
    (simon_in / "openb_node_list_gpu_node.yaml").write_text("\n---\n".join(kept))
    sys.path.insert(0, str(FGD / "data"))
    import pandas as pd
    from pod_csv_to_yaml import output_pod
    df = pd.read_csv(out / "pods.csv", dtype={"gpu_index": str, "gpu_spec": str})
    df.gpu_spec = df.gpu_spec.fillna("")
    output_pod(df, str(simon_in / "pods.yaml"), node_select=False)
    info = {"nodes": len(nodes), "gpus": cap, "pods": len(seq), "arrived": arrived / cap,
            "fractional": sum(1 for p in seq if int(p["num_gpu"]) == 1 and int(p["gpu_milli"]) < 1000), "kept_yaml": len(kept)}
    return out, info


def curve_from(points, stop: float) -> list:
    """points: (arrived_ratio, requested_ratio, occupied_ratio) in arrival order -> values at the marks."""
    out, j = [], 0
    for mark in [m for m in MARKS if m <= stop + 1e-9]:
        while j < len(points) and points[j][0] < mark - 1e-9:
            j += 1
        if j < len(points):
            out.append({"arrived": mark, "requested": points[j][1], "occupied": points[j][2]})
    return out


def start_simon(inp: Path, policy: str):
    """Start one simon policy in the background (it runs while ours does; CPU is counted per process tree)."""
    exp = inp / f"simon-{policy}"
    exp.mkdir(exist_ok=True)
    for old in exp.glob("*"):
        old.unlink()
    cmd = [sys.executable, "scripts/generate_config_and_run.py", "-d", str(exp), "-e", "-b", "-f", str(inp / "simon"),
           f"-{policy}", "1000"]
    out = open(inp / f"simon-{policy}.out", "w")
    return {"exp": exp, "t0": time.perf_counter(), "proc": subprocess.Popen(cmd, cwd=FGD, stdout=out, stderr=subprocess.STDOUT),
            "out": out}


def finish_simon(run: dict, stop: float) -> dict:
    """Wait for a simon run; its CPU = user + system of its process tree (os.wait4: the child and the children
    it waited for, i.e. the simon binary)."""
    _, status, usage = os.wait4(run["proc"].pid, 0)
    run["proc"].returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - run["t0"]
    run["out"].close()
    if run["proc"].returncode:
        raise SystemExit(f"simon failed ({run['proc'].returncode}): see {run['out'].name}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, **read_simon(run["exp"], stop)}


def read_simon(exp: Path, stop: float) -> dict:
    """pods scheduled or failed, failed, curve at the marks reached, from simon's log (complete or still growing)."""
    logs = list(exp.glob("log-*.log"))
    text = logs[0].read_text(errors="replace")
    points = [(int(m[4]) / (int(m[3]) * 1000), int(m[2]) / (int(m[3]) * 1000), int(m[1]) / int(m[3]))
              for m in ALLOC.findall(text)]
    failed = len(re.findall(r"failed to schedule pod", text))
    return {"pods": len(points), "failed": failed, "curve": curve_from(points, stop), "log": str(logs[0])}


def run_ours(product: Path, inp: Path, stop: float, batch: int, kube: bool, configs=("full", "fgd_whole")) -> dict:
    sys.path[:0] = [str(product), str(product / "platform"), str(product / "benchmarks")]
    from clusterspec.importers.openb import load_openb_cluster, load_openb_trace
    from functools import partial
    from scheduler.core import CycleConfig, EngineCache, run_cycle
    import openb_fgd
    cluster = load_openb_cluster(inp / "nodes.csv", path_pod_csv=inp / "pods.csv")
    trace = load_openb_trace(inp / "pods.csv")
    res = {}
    # each config with its own EngineCache, as the platform keeps one (scheduling.store.ENGINE_CACHE)
    runs = [("ours_full", partial(run_cycle, cache=EngineCache()), CycleConfig()),
            ("ours_fgd_whole", partial(run_cycle, cache=EngineCache()), CycleConfig(fgd_whole=True))]
    runs = [r for r in runs if r[0][len("ours_"):] in configs]
    if kube:
        from scheduler.core.baselines import run_cycle_kube
        runs.append(("ours_kube_like", run_cycle_kube, openb_fgd.KUBE))
    for name, engine, cfg in runs:
        t0, c0 = time.perf_counter(), time.process_time()
        r = openb_fgd.run(cluster, trace, engine, cfg, batch, stop)
        r["wall_s"], r["cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
        res[name] = r
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="all 1,213 GPU nodes")
    ap.add_argument("--node-frac", type=float, default=None, help="share of the GPU nodes (default 0.1: 122 nodes / 626 GPUs, ~1 min CPU per simon policy)")
    ap.add_argument("--stop", type=float, default=1.3, help="arrived GPU requests / capacity to stop at")
    ap.add_argument("--policies", default="FGD,BestFit", help="simon score plugins (FGD,BestFit,GpuPacking,DotProd,GpuClustering,Random)")
    ap.add_argument("--batch", type=int, default=1, help="our arrivals per engine cycle (1 = pod by pod, like simon)")
    ap.add_argument("--kube", action="store_true", help="also our kube-like spread baseline")
    ap.add_argument("--ours", default="full,fgd_whole", help="our configs: full (CycleConfig()), fgd_whole")
    ap.add_argument("--product", default=".")
    ap.add_argument("--read-simon", action="store_true", help="only print what the simon logs of this input hold "
                    "so far (a run still going, or stopped)")
    args = ap.parse_args()
    frac = 1.0 if args.full else (args.node_frac or 0.1)
    product = Path(args.product)
    if args.read_simon:
        for exp in sorted((WORK / "fgd-input" / f"frac{frac:g}-stop{args.stop:g}").glob("simon-*/")):
            r = read_simon(exp, args.stop)
            print(f"{exp.name}: {r['pods']} pods, {r['failed']} failed; " + ", ".join(
                f"{c['arrived']:.0%}: {c['requested']:.1%} / {c['occupied']:.1%}" for c in r["curve"]))
        return
    if not (FGD / "bin" / "simon").exists():
        raise SystemExit("bin/simon missing: see the build steps in this script's docstring")
    inp, info = build_input(product, frac, args.stop)
    print(f"input {inp}: {info['nodes']} GPU nodes / {info['gpus']} GPUs, {info['pods']} GPU pods "
          f"({info['fractional']} fractional) arriving {info['arrived']:.2f}x capacity; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    simon = {pol: start_simon(inp, pol) for pol in args.policies.split(",") if pol}  # in parallel with ours
    results = run_ours(product, inp, args.stop, args.batch, args.kube, tuple(args.ours.split(",")))
    for k, r in results.items():
        print(f"{k}: {r['pods']} pods, {r['failed']} failed, {r['cycles']} cycles, wall {r['wall_s']:.1f} s "
              f"(engine {r['engine_seconds']:.1f} s), {r['pods'] / r['wall_s']:.0f} pods/s; load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)
    for pol, run in simon.items():
        r = finish_simon(run, args.stop)
        results[f"simon_{pol}"] = r
        print(f"simon_{pol}: {r['pods']} pods, {r['failed']} failed, wall {r['wall_s']:.1f} s (CPU {r['cpu_s']:.1f} s), "
              f"{r['pods'] / r['wall_s']:.0f} pods/s; load average {os.getloadavg()[0]:.1f}", flush=True)
    names = list(results)
    print("\n| arrived | " + " | ".join(f"{n} req / occ" for n in names) + f" | {names[0]} / " +
          " , ".join(n for n in names if n.startswith("simon")) + " (requested) |")
    print("| --- |" + " --- |" * (len(names) + 1))
    first = next(n for n in names if n.startswith("ours"))
    for k, mark in enumerate(results[first]["curve"]):
        cells, ratios = [], []
        for n in names:
            c = results[n]["curve"][k] if k < len(results[n]["curve"]) else None
            cells.append("-" if c is None else f"{c['requested']:.1%} / {c['occupied']:.1%}")
            if n.startswith("simon") and c and c["requested"]:
                ratios.append(f"{mark['requested'] / c['requested']:.3f}")
        print(f"| {mark['arrived']:.0%} | " + " | ".join(cells) + " | " + " , ".join(ratios) + " |")
    print("\n| run | wall s | CPU s | pods/s | failed pods |\n| --- | --- | --- | --- | --- |")
    for n in names:
        r = results[n]
        print(f"| {n} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['pods'] / r['wall_s']:.0f} | {r['failed']} |")


if __name__ == "__main__":
    main()
