"""Microsoft Philly (ATC '19) cluster and job trace -> ClusterSpec / Trace.

Files (see data/README.md): ``philly_cluster_machine_list.csv`` (machineId, number of GPUs, single GPU
mem), ``philly_vc_nodes.csv`` (vc, node num) and ``philly_jobs_pollux.csv`` (timestamp, duration,
num_gpus, gpu_time, cluster). Units: GPUs, seconds.

Cluster rules (Philly publishes no topology and no quotas, so these are ours):

* Flavor: ONE flavor, ``philly-gpu``, for all 552 machines (321 x 2-GPU 12 GB, 231 x 8-GPU 24 GB).
  Trace jobs name no GPU model, and a single flavor lets the per-team quotas apply cluster-wide. The
  GPU memory is kept as the node label ``gpu_memory``; node sizes are preserved.
* Scale: ``scale`` in (0, 1] keeps, within each GPU-count class, k = max(1, round(n * scale)) of its n
  machines, taken evenly spaced (index floor(j * n / k), j = 0..k-1) in machine-id numeric order.
  Deterministic. Quotas are computed on the kept GPUs.
* Topology, three tiers. Tier 1: every machine is its own scale-up domain (``nvl-<id>`` for 8-GPU
  machines, ``pcie-<id>`` for 2-GPU ones), so every node sits in a tier-1 domain and the tree has one
  depth. Tier 2: leaf switches of ``leaf_fanout`` machines (default 16), filled in machine-id order,
  never mixing GPU-count classes (``leaf-8g-00``, ``leaf-2g-00``...). Tier 3: one spine, ``spine``.
* Queues: a root queue ``root`` (platform, no team) with quota = limit = all kept GPUs, and one leaf
  queue per virtual cluster (team name = queue name = VC id). The 11 VCs of philly_vc_nodes.csv share
  the kept GPUs in proportion to their node counts (largest-remainder rounding, so the team quotas sum
  to exactly the root quota). Node counts are used as shares, not as sizes: they add up to 352 nodes
  = 2,816 GPUs at 8 GPUs a node, more than the 2,490 GPUs of the machine list. The 4 VCs that appear
  only in the job trace (``TRACE_ONLY_VCS``, 18 jobs in all) get quota 0: borrow-only. Every team
  queue has guarantee 0 and limit None (may borrow up to the root), weight 1.

Trace rules:

* submit = (timestamp - earliest timestamp of the file) / ``compress``: arrivals come ``compress``
  times faster, durations are unchanged (so offered load is multiplied by ``compress``). Timestamps
  carry no time zone; only differences are used.
* ``start_days`` / ``until_days`` (in replay days, i.e. after compression) keep jobs with
  start_days <= submit < until_days and re-base submit on start_days.
* Gang shape: num_gpus <= 8 -> 1 task x num_gpus GPUs; num_gpus > 8 -> tasks of g GPUs where g is the
  largest power of two <= 8 dividing num_gpus (16 -> 2 x 8; 12 -> 3 x 4; 24 -> 3 x 8).
  min_available = tasks (all-or-nothing). queue = VC id. id = 1-based data row number, as a string.
  Jobs are sorted by (submit, row).

Defaults (measured on the shipped file, 82,247 jobs): submit times span 108.9 days (9.409e6 s) and the
jobs hold 3.521e9 GPU-seconds, so the offered load is 3.521e9 / 9.409e6 = 374 GPUs busy on average,
445 over the busy part (days 20-109; the first 19.5 days see only ~70 arrivals) and up to 833 on the
busiest day, against the list's 2,490 GPUs: the whole cluster never queues.
DEFAULT_SCALE = 0.25 keeps 80 x 2-GPU + 58 x 8-GPU machines = 624 GPUs (the 128-GPU jobs need 16 of
the 58 8-GPU machines). Offered load / capacity = 374 / 624 = 0.60 on average, 445 / 624 = 0.71 over
the busy part, daily peaks 833 / 624 = 1.33. DEFAULT_COMPRESS = 1.0: time is not compressed.
Why these, checked with an idealised replay (GPU counts per node, best-fit, no topology or quota
limits, every job that fits starts at once: an optimistic estimate of queueing), mean / p90 wait and
share of jobs that wait:
    scale 0.40, compress 1    : 0.01 h / 0 h,    3 %   (no contention)
    scale 0.30, compress 1    : 0.9 h / 1.6 h,  29 %   (Philly's own mean GPU-job queue time: 1.04 h,
                                                   acmetrace cluster_summary.csv)
    scale 0.25, compress 1    : 6.2 h / 20 h,   47 %   <- default: teams contend in busy weeks
    scale 0.25, compress 1.25 : 23 h / 51 h,    62 %   (p99 11 days: backlog of weeks)
    scale 0.25, compress 2    : 97 h / 176 h,   84 %   (offered 1.20 x capacity: queues never drain)
A real cycle (gangs in one domain, quotas, reservations) queues more than this estimate, so a higher
compress would mostly measure an ever-growing backlog.
"""
from __future__ import annotations

import os
from datetime import datetime

from clusterspec.spec import ClusterSpec, DomainSpec, NodeSpec, QueueSpec, Trace, TraceJob

from ._csv import MAX_DURATION, MAX_JOB_GPUS, apportion, read_rows
from .errors import ImportFormatError

FLAVOR = "philly-gpu"
ROOT_QUEUE = "root"
SPINE = "spine"
DEFAULT_SCALE = 0.25
DEFAULT_COMPRESS = 1.0
DEFAULT_LEAF_FANOUT = 16
MAX_GPUS_PER_TASK = 8
TRACE_ONLY_VCS = ("23dbec", "51b7ef", "795a4c", "925e2b")

MACHINE_COLUMNS = ("machineId", "number of GPUs", "single GPU mem")
VC_COLUMNS = ("vc", "node num")
JOB_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
# A job row's bounds: _csv's MAX_DURATION and MAX_JOB_GPUS; gpu_time is duration x num_gpus (so in every row of
# the shipped trace).


def _id_key(machine_id: str):
    """Numeric order for ids like m7, m100; other ids after them, alphabetically."""
    digits = machine_id.lstrip("m")
    return (0, int(digits), machine_id) if digits.isdigit() else (1, 0, machine_id)


def read_machines(path) -> list[tuple[str, int, str]]:
    """(machineId, gpus, gpu memory like '24GB') per data row, in file order."""
    machines, seen = [], set()
    for row in read_rows(path, MACHINE_COLUMNS):
        machine_id = row.text("machineId")
        if machine_id in seen:
            raise row.error("machineId", f"duplicate machine id {machine_id!r}")
        seen.add(machine_id)
        gpus = row.integer("number of GPUs", minimum=1)
        memory = row.text("single GPU mem")
        if not (memory.upper().endswith("GB") and memory[:-2].isdigit()):
            raise row.error("single GPU mem", f"expected a size like 24GB, got {memory!r}")
        machines.append((machine_id, gpus, memory))
    return machines


def read_vc_nodes(path) -> dict[str, int]:
    """vc -> node count, in file order."""
    vcs: dict[str, int] = {}
    for row in read_rows(path, VC_COLUMNS):
        vc = row.text("vc")
        if vc in vcs:
            raise row.error("vc", f"duplicate virtual cluster {vc!r}")
        vcs[vc] = row.integer("node num", minimum=0)
    return vcs


def select_machines(machines, scale: float) -> list[tuple[str, int, str]]:
    """The scale rule of the module docstring; result grouped by GPU count (largest first)."""
    if not 0 < scale <= 1:
        raise ValueError(f"scale must be in (0, 1], got {scale}")
    kept = []
    for gpus in sorted({m[1] for m in machines}, reverse=True):
        group = sorted((m for m in machines if m[1] == gpus), key=lambda m: _id_key(m[0]))
        k = max(1, round(len(group) * scale))
        kept.extend(group[j * len(group) // k] for j in range(k))
    return kept


def load_philly_cluster(path_machine_list, path_vc_nodes, *, scale: float = DEFAULT_SCALE,
                        leaf_fanout: int = DEFAULT_LEAF_FANOUT, name: str = "philly",
                        extra_vcs=TRACE_ONLY_VCS) -> ClusterSpec:
    """Nodes, 3-tier domains and team queues of the Philly cluster (rules in the module docstring).

    `extra_vcs`: team ids not in philly_vc_nodes.csv that still get a (quota-0) queue.
    """
    if leaf_fanout < 1:
        raise ValueError(f"leaf_fanout must be >= 1, got {leaf_fanout}")
    machines = read_machines(path_machine_list)
    vc_nodes = read_vc_nodes(path_vc_nodes)
    if not machines:
        raise ImportFormatError(path_machine_list, None, None, "no machines listed")
    kept = select_machines(machines, scale)

    domains = [DomainSpec(SPINE, 3, None)]
    nodes = []
    for gpus in sorted({m[1] for m in kept}, reverse=True):
        group = [m for m in kept if m[1] == gpus]
        for index, (machine_id, _, memory) in enumerate(group):
            if index % leaf_fanout == 0:
                leaf = f"leaf-{gpus}g-{index // leaf_fanout:02d}"
                domains.append(DomainSpec(leaf, 2, SPINE))
            tier1 = f"{'nvl' if gpus == 8 else 'pcie'}-{machine_id}"
            domains.append(DomainSpec(tier1, 1, leaf))
            nodes.append(NodeSpec(machine_id, FLAVOR, gpus, domain=tier1, labels={"gpu_memory": memory}))

    total = sum(n.gpus for n in nodes)
    quotas = apportion(total, vc_nodes)
    queues = [QueueSpec(ROOT_QUEUE, None, None, 1.0, {FLAVOR: (0, total, total)})]
    for vc, quota in quotas.items():
        queues.append(QueueSpec(vc, ROOT_QUEUE, vc, 1.0, {FLAVOR: (0, quota, None)}))
    for vc in extra_vcs:
        if vc not in quotas:
            queues.append(QueueSpec(vc, ROOT_QUEUE, vc, 1.0, {FLAVOR: (0, 0, None)}))

    notes = (
        f"{len(kept)} of {len(machines)} machines kept (scale {scale}: evenly spaced per GPU-count class), "
        f"{total} GPUs, one flavor {FLAVOR!r}",
        f"topology (ours, Philly publishes none): each machine its own tier-1 domain, leaf switches of "
        f"{leaf_fanout} same-size machines (tier 2), one spine (tier 3)",
        f"team quotas: {total} GPUs split in proportion to philly_vc_nodes.csv node counts; "
        f"VCs absent from it get quota 0 (borrow-only)",
    )
    return ClusterSpec(name, tuple(nodes), tuple(domains), tuple(queues), notes)


def gang_shape(num_gpus: int) -> tuple[int, int]:
    """(tasks, gpus_per_task) for a Philly job of num_gpus GPUs (rule in the module docstring)."""
    if num_gpus <= MAX_GPUS_PER_TASK:
        return 1, num_gpus
    per_task = MAX_GPUS_PER_TASK
    while num_gpus % per_task:
        per_task //= 2
    return num_gpus // per_task, per_task


def load_philly_trace(path_jobs, *, compress: float = DEFAULT_COMPRESS, until_days: float | None = None,
                      start_days: float = 0.0, name: str = "philly") -> Trace:
    """Gang jobs of philly_jobs_pollux.csv, sorted by submit (rules in the module docstring).

    stats: rows, jobs, dropped (outside the day window), gpu_seconds, span_s (first to last kept
    submit, replay time), offered_gpus (gpu_seconds / span_s), non_pow2_gangs (jobs > 8 GPUs that are
    not a multiple of 8).
    """
    if compress <= 0:
        raise ValueError(f"compress must be > 0, got {compress}")
    rows = []
    for row in read_rows(path_jobs, JOB_COLUMNS):
        stamp = row.timestamp("timestamp")
        duration = row.number("duration", minimum=0, maximum=MAX_DURATION, unit=" seconds (366 days)")
        num_gpus = row.integer("num_gpus", minimum=1, maximum=MAX_JOB_GPUS)
        gpu_time = row.number("gpu_time", minimum=0)
        if abs(gpu_time - duration * num_gpus) > max(1.0, 1e-6 * duration * num_gpus):
            raise row.error("gpu_time", f"expected duration x num_gpus = {duration * num_gpus:g}, got {gpu_time:g}")
        rows.append((stamp, duration, num_gpus, row.text("cluster")))
    if not rows:
        return Trace(name, (), ("empty trace",), {"rows": 0, "jobs": 0})

    origin: datetime = min(r[0] for r in rows)
    start = start_days * 86400.0
    until = None if until_days is None else until_days * 86400.0
    jobs, non_pow2 = [], 0
    for number, (stamp, duration, num_gpus, vc) in enumerate(rows, start=1):
        submit = (stamp - origin).total_seconds() / compress
        if submit < start or (until is not None and submit >= until):
            continue
        tasks, per_task = gang_shape(num_gpus)
        non_pow2 += num_gpus > MAX_GPUS_PER_TASK and num_gpus % MAX_GPUS_PER_TASK != 0
        jobs.append(TraceJob(str(number), vc, submit - start, duration, tasks, per_task, min_available=tasks))
    jobs.sort(key=lambda j: (j.submit, int(j.id)))

    gpu_seconds = sum(j.duration * j.tasks * j.gpus_per_task for j in jobs)
    span = jobs[-1].submit - jobs[0].submit if jobs else 0.0
    stats = {
        "rows": len(rows), "jobs": len(jobs), "dropped": len(rows) - len(jobs),
        "gpu_seconds": gpu_seconds, "span_s": span,
        "offered_gpus": gpu_seconds / span if span > 0 else 0.0, "non_pow2_gangs": non_pow2,
    }
    notes = (
        f"source {os.path.basename(os.fspath(path_jobs))}, origin {origin:%Y-%m-%d %H:%M:%S}, arrivals "
        f"compressed x{compress} (durations unchanged), window [{start_days}, {until_days}) replay days",
        "gang: <= 8 GPUs -> 1 task; more -> tasks of the largest power of two <= 8 dividing the size",
    )
    return Trace(name, tuple(jobs), notes, stats)
