"""openb (Alibaba GPU trace v2023) importer on the shipped files and slices of them (no database)."""
from __future__ import annotations

import collections

import pytest

from clusterspec.importers import DATA_DIR, load_cluster, load_trace
from clusterspec.importers.openb import QOS_CLASSES, ROOT_QUEUE, load_openb_cluster, load_openb_trace

OPENB = DATA_DIR / "alibaba-openb-fgd"
NODES = OPENB / "nodes" / "openb_node_list_gpu_node.csv"
PODS = OPENB / "pods" / "openb_pod_list_default.csv"


def head(src, dst, rows: int):
    with open(src, newline="") as handle:
        lines = handle.readlines()[: rows + 1]
    dst.write_text("".join(lines))
    return dst


def test_full_default_trace_stats_match_sources():
    trace = load_trace("openb")
    assert trace.name == "openb-default"
    assert trace.stats["rows"] == 8152
    assert trace.stats["skipped_cpu_only"] == 1088
    assert trace.stats["fractional"] == 3078
    assert len(trace.jobs) == 8152 - 1088
    assert collections.Counter(j.gpus_per_task for j in trace.jobs) == {1: 6989, 8: 44, 2: 16, 4: 15}
    assert sum(1 for j in trace.jobs if j.gpu_milli < 1000) == 3078
    assert all(j.tasks == 1 and j.min_available == 1 for j in trace.jobs)
    submits = [j.submit for j in trace.jobs]
    assert submits == sorted(submits)


def test_slice_copies_requests_and_rounds_fractions(tmp_path):
    path = head(PODS, tmp_path / "openb_pod_list_default.csv", 200)
    trace = load_openb_trace(path)
    import csv
    with open(path, newline="") as handle:
        rows = {r["name"]: r for r in csv.DictReader(handle)}
    gpu_rows = [r for r in rows.values() if r["num_gpu"] != "0"]
    assert len(trace.jobs) == len(gpu_rows)
    assert trace.stats["skipped_cpu_only"] == 200 - len(gpu_rows)
    for job in trace.jobs:
        row = rows[job.id]
        assert job.queue == row["qos"]
        assert job.cpu_milli == int(row["cpu_milli"]) and job.memory_mib == int(row["memory_mib"])
        assert job.submit == int(row["creation_time"])
        assert job.duration == int(row["deletion_time"]) - int(row["creation_time"])
        assert job.gpus_per_task == int(row["num_gpu"])  # fractional 1-GPU pods stay 1 whole GPU
        if row["num_gpu"] == "1":
            assert job.gpu_milli == int(row["gpu_milli"])


def test_gpu_spec_and_open_ended_pods(tmp_path):
    path = tmp_path / "pods.csv"
    path.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
        "p0,1000,1024,1,500,V100M16|V100M32,LS,Running,10,,10\n"
        "p1,1000,1024,2,1000,,BE,Succeeded,5,100,5\n"
        "p2,1000,1024,0,0,,BE,Succeeded,7,50,7\n"
    )
    trace = load_openb_trace(path)
    jobs = {j.id: j for j in trace.jobs}
    assert [j.id for j in trace.jobs] == ["p1", "p0"]
    assert jobs["p0"].flavors == ("V100M16", "V100M32") and jobs["p1"].flavors == ()
    assert jobs["p0"].duration == 100 - 10  # runs to the last time seen in the file
    assert trace.stats["open_ended"] == 1 and trace.stats["fractional"] == 1
    assert trace.stats["skipped_cpu_only"] == 1


def test_cluster_flavors_no_domains_and_qos_queues():
    cluster = load_cluster("openb")
    assert len(cluster.nodes) == 1213 and cluster.gpus == 6212
    assert cluster.domains == () and all(n.domain is None for n in cluster.nodes)
    per_flavor = collections.Counter()
    for node in cluster.nodes:
        per_flavor[node.flavor] += node.gpus
    assert per_flavor == {"G2": 4392, "T4": 842, "G3": 312, "P100": 265, "V100M32": 204, "V100M16": 195, "A10": 2}
    queues = {q.name: q for q in cluster.queues}
    root = queues.pop(ROOT_QUEUE)
    assert root.quotas == {f: (0, g, g) for f, g in per_flavor.items()}
    assert set(queues) == set(QOS_CLASSES)
    for flavor, gpus in per_flavor.items():
        assert sum(q.quotas[flavor][1] for q in queues.values()) == gpus
    # LS holds ~81 % of the requested GPU-time, so ~81 % of every flavor
    assert queues["LS"].quotas["G2"][1] == pytest.approx(0.81 * 4392, abs=5)
    assert queues["LS"].quotas["G2"][1] > queues["Burstable"].quotas["G2"][1] > queues["BE"].quotas["G2"][1]


def test_cluster_without_pod_file_splits_equally(tmp_path):
    path = head(NODES, tmp_path / "nodes.csv", 10)
    cluster = load_openb_cluster(path)
    assert cluster.gpus == 20  # ten 2-GPU P100 nodes
    leaves = [q for q in cluster.queues if q.parent == ROOT_QUEUE]
    assert sorted(q.quotas["P100"][1] for q in leaves) == [5, 5, 5, 5]
    first = cluster.nodes[0]
    assert (first.name, first.flavor, first.gpus, first.cpu_milli, first.memory_mib) == (
        "openb-node-0000", "P100", 2, 64000, 262144)
