"""Shared pieces of the benchmark scripts: import path, machine description, peak RSS, timing
statistics, and the synthetic scale worlds (NVL72-style racks, the Philly job-size mix).

Every script is plain Python, runnable as `python benchmarks/<name>.py [--quick]`, and exposes
`main(argv) -> dict` (the figures it measured) so `benchmarks/run.py` and the smoke test can call it.
"""
from __future__ import annotations

import csv
import datetime as _dt
import json
import os
import platform as _platform  # the standard library module (platform/ is a source root, never a package)
import random
import resource
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "platform")):
    if p not in sys.path:
        sys.path.insert(0, p)

from scheduler.core.snapshot import (  # noqa: E402
    DomainInfo, JobInfo, NodeInfo, QueueInfo, QuotaInfo, RoleInfo, Snapshot, TaskPlacement,
)

PHILLY_JOBS = ROOT / "data" / "philly" / "philly_jobs_pollux.csv"
RESULTS_DIR = ROOT / "benchmarks" / "results"


# -- machine, memory, timing -------------------------------------------------------------------------------
def machine() -> dict:
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, timeout=5).stdout.strip()
    except Exception:  # noqa: BLE001 - informational only
        commit = ""
    return {"nproc": os.cpu_count(), "cpu": cpu, "mem_gib": mem_gib, "python": _platform.python_version(),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit}


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mib() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return float("nan")


def stats(values: list[float]) -> dict:
    """median / p90 / min / max of a list of seconds (or anything)."""
    v = sorted(values)
    if not v:
        return {"n": 0}
    p90 = v[min(len(v) - 1, int(round(0.9 * (len(v) - 1))))]
    return {"n": len(v), "median": statistics.median(v), "p90": p90, "min": v[0], "max": v[-1]}


def save(name: str, data: dict) -> Path:
    """Write a benchmark's figures to benchmarks/results/<name>.json (the figures RESULTS.md quotes)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(data, indent=1, default=str, sort_keys=True))
    return path


def quick_flag(argv) -> bool:
    return "--quick" in (argv or [])


# -- the Philly job-size mix --------------------------------------------------------------------------------
# Sizes above Philly's largest job (128 GPUs) up to 1,024, so the scale worlds cover the issue's
# "1 to 1,024 GPUs": a thin tail added on top of the trace's own counts (per 82,247 jobs).
LARGE_TAIL = {256: 4, 512: 2, 1024: 1}


def philly_size_mix() -> list[tuple[int, float]]:
    """[(gpus, probability)] from num_gpus of philly_jobs_pollux.csv, plus LARGE_TAIL."""
    counts: Counter = Counter()
    try:
        with open(PHILLY_JOBS, newline="") as f:
            for row in csv.DictReader(f):
                counts[int(row["num_gpus"])] += 1
    except OSError:  # the data file is not there: its published counts
        counts.update({1: 76627, 2: 1818, 4: 1870, 8: 1643, 12: 7, 16: 199, 24: 7, 32: 67, 64: 6, 128: 3})
    counts.update(LARGE_TAIL)
    total = sum(counts.values())
    return [(g, c / total) for g, c in sorted(counts.items())]


def first_fit(free: list[int], order, per: int, tasks: int) -> list[int] | None:
    """The first `tasks` node indices in `order` with at least `per` free GPUs (free[k]), or None when fewer fit."""
    chosen = []
    for k in order:
        if free[k] >= per:
            chosen.append(k)
            if len(chosen) == tasks:
                return chosen
    return None


def shape(gpus: int, gpus_per_node: int = 4) -> tuple[int, int]:
    """(tasks, gpus_per_task): up to one node -> one task; more -> tasks of a whole node each."""
    if gpus <= gpus_per_node:
        return 1, gpus
    return -(-gpus // gpus_per_node), gpus_per_node


# -- synthetic NVL72-style worlds ---------------------------------------------------------------------------
def nvl_domains(racks: int, *, racks_per_leaf: int = 8):
    """Domain names and DomainInfo: `racks` tier-1 domains, leaf switches (tier 2) over
    `racks_per_leaf` racks each, one spine (tier 3)."""
    domains = [DomainInfo("spine", 3)]
    leaves = -(-racks // racks_per_leaf)
    domains += [DomainInfo(f"leaf{l}", 2, "spine") for l in range(leaves)]
    domains += [DomainInfo(f"nvl{r}", 1, f"leaf{r // racks_per_leaf}") for r in range(racks)]
    return tuple(domains)


def scale_world(*, racks: int = 280, nodes_per_rack: int = 18, gpus_per_node: int = 4, pending: int = 10_000,
                running: int = 5_000, queues: int = 8, seed: int = 7, topology_share: float = 0.0) -> Snapshot:
    """A cluster of racks x nodes_per_rack x gpus_per_node GPUs (default 280 x 18 x 4 = 20,160), with
    `running` jobs already placed (random rack, first fit from a random node: a mildly fragmented
    cluster) and `pending` jobs, both with the Philly size mix, spread over `queues` queues whose
    quotas split the cluster evenly (limit = the whole cluster, so queues may borrow).
    topology_share: fraction of multi-node jobs asking a hard tier-2 cap (the rest: no constraint)."""
    rng = random.Random(seed)
    domains = nvl_domains(racks)
    n_nodes = racks * nodes_per_rack
    names = [f"nvl{r}-n{i}" for r in range(racks) for i in range(nodes_per_rack)]
    free = [gpus_per_node] * n_nodes
    used: list[list[int]] = [[] for _ in range(n_nodes)]
    capacity = n_nodes * gpus_per_node
    qnames = [f"team{i}" for i in range(queues)]
    share = capacity // queues
    queue_infos = tuple(QueueInfo(q, quotas={"H100": QuotaInfo(guarantee=share // 2, quota=share, limit=capacity)})
                        for q in qnames)
    mix = philly_size_mix()
    sizes, weights = [m[0] for m in mix], [m[1] for m in mix]

    def draw() -> int:
        return min(rng.choices(sizes, weights)[0], capacity // 2)

    jobs: list[JobInfo] = []
    placed = 0
    attempts = 0
    while placed < running and attempts < running * 20:
        attempts += 1
        gpus = draw()
        tasks, per = shape(gpus, gpus_per_node)
        # a random window of whole racks large enough for the job, first fit from a random node inside it
        span = max(1, -(-tasks // nodes_per_rack))
        r0 = rng.randrange(0, racks - span + 1)
        lo, hi = r0 * nodes_per_rack, (r0 + span) * nodes_per_rack
        start = rng.randrange(lo, hi)
        chosen = first_fit(free, [*range(start, hi), *range(lo, start)], per, tasks)
        if chosen is None:
            continue
        placements = []
        for i, k in enumerate(chosen):
            gs = tuple(g for g in range(gpus_per_node) if g not in used[k])[:per]
            used[k].extend(gs)
            free[k] -= per
            placements.append(TaskPlacement("worker", i, names[k], gs))
        jobs.append(JobInfo(id=f"r{placed}", queue=rng.choice(qnames),
                            roles=(RoleInfo("worker", tasks, per, tasks),), submit_time=-3600.0 * rng.random(),
                            state="running", placement=tuple(placements), start_time=-60.0, name=f"r{placed}"))
        placed += 1
    for p in range(pending):
        gpus = draw()
        tasks, per = shape(gpus, gpus_per_node)
        hard = tasks > 1 and rng.random() < topology_share
        jobs.append(JobInfo(id=f"p{p}", queue=rng.choice(qnames), roles=(RoleInfo("worker", tasks, per, tasks),),
                            priority=rng.choice((0, 0, 0, 1)), submit_time=float(p),
                            topology_mode="hard" if hard else "none", highest_tier=2 if hard else None,
                            name=f"p{p}"))
    nodes = tuple(NodeInfo(name=names[k], flavor="H100", gpus=gpus_per_node, domain=f"nvl{k // nodes_per_rack}",
                           gpu_numa=(0, 0, 1, 1)[:gpus_per_node] if gpus_per_node == 4 else (),
                           used=frozenset(used[k]))
                  for k in range(n_nodes))
    return Snapshot(nodes=nodes, domains=domains, queues=queue_infos, jobs=tuple(jobs), now=0.0)


def racks_for_gpus(gpus: int, nodes_per_rack: int = 18, gpus_per_node: int = 4) -> int:
    return max(1, round(gpus / (nodes_per_rack * gpus_per_node)))
