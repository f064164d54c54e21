"""Alibaba cluster-trace-gpu-v2023 ("openb", FGD paper, ATC '23) -> ClusterSpec / Trace.

Files (see data/README.md): ``openb_node_list_gpu_node.csv`` (sn, cpu_milli, memory_mib, gpu, model)
and ``openb_pod_list_*.csv`` (name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos,
pod_phase, creation_time, deletion_time, scheduled_time). Units: GPUs, millicores, MiB, seconds.

Cluster rules:

* Flavor = the node's ``model`` (P100, T4, V100M16, V100M32, A10, G2, G3...). Nodes with ``gpu`` = 0
  (CPU-only rows, as in openb_node_list_all_node.csv) are skipped; a GPU node without a model is an
  error. cpu_milli and memory_mib are kept.
* GPU sharing: every GPU is in mode "auto" (NodeSpec.gpu_sharing): it takes whole-GPU pods while it holds
  no fraction and fractions while no whole-GPU pod holds it, as in the FGD simulator and Kubernetes with a
  GPU-sharing device plugin.
* Topology: none is published, so nodes get no domain (domain=None) and no domains are emitted; the
  engine then treats the whole cluster as one domain.
* Queues: openb has no teams, only QoS classes. A root queue ``root`` (platform) has, per flavor,
  quota = limit = that flavor's GPUs. Under it, one leaf queue per QoS class (``QOS_CLASSES``: LS, BE,
  Burstable, Guaranteed), all owned by one team named after the cluster (``openb``). Each flavor's GPUs
  are split among the classes in proportion to the class's share of requested GPU-time in the pod
  trace given as ``path_pod_csv`` (num_gpu after rounding up x duration; largest-remainder rounding,
  so the shares sum to the root quota exactly). Default trace shares: LS 81.0 %, Burstable 12.5 %,
  BE 4.4 %, Guaranteed 2.2 %. Without a pod file the split is equal. guarantee 0, limit None (a class
  may borrow up to the root), weight 1.

Trace rules:

* Pods with num_gpu = 0 are CPU-only: skipped, counted in stats["skipped_cpu_only"] (1,088 in default).
* num_gpu = 1 with gpu_milli < 1000 is a fractional (GPU-sharing) request, kept as that fraction
  (TraceJob.gpu_milli; the replay asks for RoleInfo.gpu_milli of one GPU, no rounding), counted in
  stats["fractional"] (3,078 in default). gpu_milli must be in 1..1000 for a GPU pod. The quota split
  below still counts a fractional pod as one GPU-time unit per second (the class shares predate sharing).
* One task x num_gpu GPUs, min_available 1; cpu_milli / memory_mib copied per task.
* gpu_spec "A|B" -> flavors ("A", "B"); empty = any model.
* queue = qos; id = pod name; priority 0 (QoS is expressed by the queue, not by priority).
* submit = creation_time; duration = deletion_time - creation_time: the pod's lifetime, which in the
  real cluster includes its wait for scheduling. An empty deletion_time means "still alive at trace
  end": the pod runs to the last creation/deletion time seen in the file (stats["open_ended"]). GPU pods
  still Pending at trace end (861 in default) are kept as demand (stats["pending_at_end"]).
* Sorted by (submit, row).

Load note: the default trace's 7,064 GPU pods hold 2.15e8 GPU-seconds over 149 days, i.e. ~17 GPUs busy
on average against 6,212 GPUs (most pods arrive in the last ~18 days). The FGD paper does not replay it in
time: it submits pods until the cluster is full and measures fragmentation. Replaying openb in time
exercises GPU models, fractional rounding and packing, not contention.
"""
from __future__ import annotations

import os

from clusterspec.spec import ClusterSpec, NodeSpec, QueueSpec, Trace, TraceJob

from ._csv import MAX_DURATION, MAX_JOB_GPUS, apportion, read_rows

ROOT_QUEUE = "root"
QOS_CLASSES = ("LS", "BE", "Burstable", "Guaranteed")
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos",
               "creation_time", "deletion_time")
# A pod row's bounds: _csv's MAX_DURATION and MAX_JOB_GPUS (the shipped list's longest pod runs 145 days), and
# times within 3660 days of the trace's start.
MAX_TIME = 3660 * 86400


def load_openb_cluster(path_node_csv, *, path_pod_csv=None, name: str = "openb") -> ClusterSpec:
    """GPU nodes by model and one queue per QoS class (rules in the module docstring)."""
    nodes, seen, skipped = [], set(), 0
    for row in read_rows(path_node_csv, NODE_COLUMNS):
        node_name = row.text("sn")
        if node_name in seen:
            raise row.error("sn", f"duplicate node name {node_name!r}")
        seen.add(node_name)
        cpu = row.integer("cpu_milli", minimum=0)
        memory = row.integer("memory_mib", minimum=0)
        gpus = row.integer("gpu", minimum=0)
        if gpus == 0:
            skipped += 1
            continue
        nodes.append(NodeSpec(node_name, row.text("model"), gpus, None, cpu, memory, gpu_sharing="auto"))

    per_flavor: dict[str, int] = {}
    for node in nodes:
        per_flavor[node.flavor] = per_flavor.get(node.flavor, 0) + node.gpus
    if path_pod_csv is not None:
        weights = qos_gpu_seconds(load_openb_trace(path_pod_csv))
        basis = f"share of requested GPU-time in {os.path.basename(os.fspath(path_pod_csv))}"
    else:
        weights, basis = {qos: 1 for qos in QOS_CLASSES}, "equal shares (no pod file given)"
    split = {flavor: apportion(gpus, weights) for flavor, gpus in per_flavor.items()}

    queues = [QueueSpec(ROOT_QUEUE, None, None, 1.0, {f: (0, g, g) for f, g in per_flavor.items()})]
    for qos in QOS_CLASSES:
        quotas = {flavor: (0, split[flavor][qos], None) for flavor in per_flavor}
        queues.append(QueueSpec(qos, ROOT_QUEUE, name, 1.0, quotas))
    notes = (
        f"{len(nodes)} GPU nodes, {sum(per_flavor.values())} GPUs, flavors = GPU model; "
        f"{skipped} CPU-only rows skipped",
        "no topology published: nodes have no domain (one flat domain)",
        f"one queue per QoS class; each flavor's GPUs split by {basis}",
    )
    return ClusterSpec(name, tuple(nodes), (), tuple(queues), notes)


def qos_gpu_seconds(trace: Trace) -> dict[str, float]:
    """Requested GPU-seconds per QoS class (every class of QOS_CLASSES present, maybe 0)."""
    totals = {qos: 0.0 for qos in QOS_CLASSES}
    for job in trace.jobs:
        totals[job.queue] += job.tasks * job.gpus_per_task * job.duration
    return totals


def load_openb_trace(path_pod_csv, *, name: str = "openb-default") -> Trace:
    """GPU pods of an openb pod list as one-task jobs (rules in the module docstring).

    stats: rows, jobs, skipped_cpu_only, fractional, open_ended, pending_at_end,
    gpu_seconds, span_s (first to last submit), offered_gpus (gpu_seconds / span_s).
    """
    parsed, end = [], 0
    for row in read_rows(path_pod_csv, POD_COLUMNS):
        pod = row.text("name")
        cpu = row.integer("cpu_milli", minimum=0)
        memory = row.integer("memory_mib", minimum=0)
        num_gpu = row.integer("num_gpu", minimum=0, maximum=MAX_JOB_GPUS)
        gpu_milli = row.integer("gpu_milli", minimum=0)
        if num_gpu > 0 and not 1 <= gpu_milli <= 1000:
            raise row.error("gpu_milli", f"expected 1..1000 for a GPU pod, got {gpu_milli}")
        spec = row.text("gpu_spec", allow_empty=True)
        flavors = tuple(part.strip() for part in spec.split("|")) if spec else ()
        if any(not flavor for flavor in flavors):
            raise row.error("gpu_spec", f"expected GPU models separated by '|', got {spec!r}")
        qos = row.text("qos")
        if qos not in QOS_CLASSES:
            raise row.error("qos", f"expected one of {', '.join(QOS_CLASSES)}, got {qos!r}")
        created = row.integer("creation_time", minimum=0, maximum=MAX_TIME)
        deleted = row.integer("deletion_time", minimum=0, empty=-1, maximum=MAX_TIME)
        if deleted != -1 and deleted < created:
            raise row.error("deletion_time", f"expected >= creation_time {created}, got {deleted}")
        if deleted != -1 and deleted - created > MAX_DURATION:
            raise row.error("deletion_time", f"expected at most {MAX_DURATION:,} seconds (366 days) after creation_time "
                                             f"{created}, got {deleted}")
        end = max(end, created, deleted)
        phase = row.get("pod_phase")
        parsed.append((pod, cpu, memory, num_gpu, gpu_milli, flavors, qos, created, deleted, phase))

    jobs, cpu_only, fractional, open_ended, pending = [], 0, 0, 0, 0
    for pod, cpu, memory, num_gpu, gpu_milli, flavors, qos, created, deleted, phase in parsed:
        if num_gpu == 0:
            cpu_only += 1
            continue
        if num_gpu == 1 and gpu_milli < 1000:
            fractional += 1
        if deleted == -1:
            open_ended += 1
            deleted = end
        pending += phase == "Pending"
        jobs.append(TraceJob(pod, qos, float(created), float(deleted - created), 1, num_gpu,
                             min_available=1, cpu_milli=cpu, memory_mib=memory, flavors=flavors,
                             gpu_milli=gpu_milli if num_gpu == 1 else 1000))
    jobs.sort(key=lambda j: j.submit)  # stable: ties keep file order

    gpu_seconds = sum(j.gpus_per_task * j.duration for j in jobs)
    span = jobs[-1].submit - jobs[0].submit if jobs else 0.0
    stats = {
        "rows": len(parsed), "jobs": len(jobs), "skipped_cpu_only": cpu_only,
        "fractional": fractional, "open_ended": open_ended, "pending_at_end": pending,
        "gpu_seconds": gpu_seconds, "span_s": span, "offered_gpus": gpu_seconds / span if span > 0 else 0.0,
    }
    notes = (
        f"source {os.path.basename(os.fspath(path_pod_csv))}: CPU-only pods skipped, fractional GPU "
        f"requests kept as fractions of one GPU, duration = deletion - creation (open-ended pods run to t={end} s)",
    )
    return Trace(name, tuple(jobs), notes, stats)
