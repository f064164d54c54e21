"""Philly importer on slices of the shipped files (no database)."""
from __future__ import annotations

import collections
import csv

import pytest

from clusterspec.importers import DATA_DIR, load_cluster, load_trace
from clusterspec.importers.philly import (
    DEFAULT_COMPRESS, DEFAULT_SCALE, FLAVOR, ROOT_QUEUE, SPINE, TRACE_ONLY_VCS, gang_shape,
    load_philly_cluster, load_philly_trace,
)

PHILLY = DATA_DIR / "philly"
MACHINES = PHILLY / "philly_cluster_machine_list.csv"
VCS = PHILLY / "philly_vc_nodes.csv"
JOBS = PHILLY / "philly_jobs_pollux.csv"


def head(src, dst, rows: int):
    """The header and the first `rows` data lines of a real file, written to dst."""
    with open(src, newline="") as handle:
        lines = handle.readlines()[: rows + 1]
    dst.write_text("".join(lines))
    return dst


# -- cluster -----------------------------------------------------------------------------------------

def test_full_machine_list_at_scale_one_keeps_every_machine():
    cluster = load_philly_cluster(MACHINES, VCS, scale=1.0)
    sizes = collections.Counter(n.gpus for n in cluster.nodes)
    assert sizes == {2: 321, 8: 231}
    assert cluster.gpus == 2490
    assert {n.flavor for n in cluster.nodes} == {FLAVOR}
    assert {n.labels["gpu_memory"] for n in cluster.nodes if n.gpus == 8} == {"24GB"}


def test_default_scale_keeps_a_quarter_of_each_size_class_evenly():
    cluster = load_philly_cluster(MACHINES, VCS)
    assert DEFAULT_SCALE == 0.25
    sizes = collections.Counter(n.gpus for n in cluster.nodes)
    assert sizes == {2: 80, 8: 58}  # round(321/4), round(231/4)
    assert cluster.gpus == 624
    # deterministic, and a subset of the list
    again = load_philly_cluster(MACHINES, VCS)
    assert [n.name for n in cluster.nodes] == [n.name for n in again.nodes]
    with open(MACHINES, newline="") as handle:
        listed = {row[0] for row in csv.reader(handle)}
    assert {n.name for n in cluster.nodes} <= listed


def test_scale_out_of_range_is_refused():
    with pytest.raises(ValueError):
        load_philly_cluster(MACHINES, VCS, scale=0)
    with pytest.raises(ValueError):
        load_philly_cluster(MACHINES, VCS, scale=1.5)


def test_topology_tiers_leaf_fanout_and_single_spine():
    cluster = load_philly_cluster(MACHINES, VCS, scale=1.0, leaf_fanout=16)
    domains = {d.name: d for d in cluster.domains}
    spines = [d for d in cluster.domains if d.tier == 3]
    assert [s.name for s in spines] == [SPINE] and spines[0].parent is None
    leaves = [d for d in cluster.domains if d.tier == 2]
    assert all(leaf.parent == SPINE for leaf in leaves)
    per_leaf = collections.defaultdict(list)
    for node in cluster.nodes:
        tier1 = domains[node.domain]
        assert tier1.tier == 1  # every machine, 8-GPU ones included, sits in a tier-1 domain
        assert sum(1 for n in cluster.nodes if n.domain == node.domain) == 1
        per_leaf[tier1.parent].append(node)
    assert set(per_leaf) == {leaf.name for leaf in leaves}
    for members in per_leaf.values():
        assert 1 <= len(members) <= 16
        assert len({n.gpus for n in members}) == 1  # sizes never mixed under one leaf
    # 231 / 16 -> 15 leaves of 8-GPU machines, 321 / 16 -> 21 leaves of 2-GPU machines
    assert collections.Counter(members[0].gpus for members in per_leaf.values()) == {8: 15, 2: 21}
    assert all(domains[n.domain].name.startswith("nvl-") for n in cluster.nodes if n.gpus == 8)


def test_quota_rule_shares_gpus_by_vc_node_count():
    cluster = load_philly_cluster(MACHINES, VCS, scale=0.5)
    queues = {q.name: q for q in cluster.queues}
    root = queues.pop(ROOT_QUEUE)
    assert root.parent is None and root.team is None
    assert root.quotas == {FLAVOR: (0, cluster.gpus, cluster.gpus)}
    assert all(q.parent == ROOT_QUEUE and q.team == q.name for q in queues.values())
    quota = {name: q.quotas[FLAVOR][1] for name, q in queues.items()}
    assert sum(quota.values()) == cluster.gpus  # children never exceed the parent
    assert all(q.quotas[FLAVOR][0] == 0 and q.quotas[FLAVOR][2] is None for q in queues.values())
    # 6214e9 has 64 of 352 VC nodes, ed69ec 8 of 352
    assert abs(quota["6214e9"] - cluster.gpus * 64 / 352) < 1
    assert abs(quota["ed69ec"] - cluster.gpus * 8 / 352) < 1
    # the trace-only VCs are borrow-only
    assert all(quota[vc] == 0 for vc in TRACE_ONLY_VCS)
    assert len(queues) == 15


def test_trace_vcs_all_have_a_queue():
    cluster = load_cluster("philly")
    with open(JOBS, newline="") as handle:
        trace_vcs = {row["cluster"] for row in csv.DictReader(handle)}
    assert len(trace_vcs) == 15
    assert trace_vcs == {q.name for q in cluster.queues} - {ROOT_QUEUE}


# -- trace -------------------------------------------------------------------------------------------

def test_gang_shapes():
    assert gang_shape(1) == (1, 1)
    assert gang_shape(8) == (1, 8)
    assert gang_shape(16) == (2, 8)
    assert gang_shape(128) == (16, 8)
    assert gang_shape(12) == (3, 4)
    assert gang_shape(24) == (3, 8)
    assert gang_shape(9) == (9, 1)


def test_slice_is_sorted_rebased_and_shaped(tmp_path):
    path = head(JOBS, tmp_path / "philly_jobs_pollux.csv", 200)
    trace = load_philly_trace(path, compress=1.0)
    assert len(trace.jobs) == 200 and trace.stats["jobs"] == 200
    submits = [j.submit for j in trace.jobs]
    assert submits == sorted(submits) and submits[0] == 0.0
    assert sorted(int(j.id) for j in trace.jobs) == list(range(1, 201))
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    for job in trace.jobs:
        row = rows[int(job.id) - 1]
        assert job.queue == row["cluster"]
        assert job.duration == float(row["duration"])
        assert job.tasks * job.gpus_per_task == int(row["num_gpus"])
        assert job.gpus_per_task <= 8 and job.min_available == job.tasks


def test_compression_divides_arrival_times_only(tmp_path):
    path = head(JOBS, tmp_path / "jobs.csv", 200)
    plain = {j.id: j for j in load_philly_trace(path, compress=1.0).jobs}
    fast = {j.id: j for j in load_philly_trace(path, compress=4.0).jobs}
    for job_id, job in plain.items():
        assert fast[job_id].submit == pytest.approx(job.submit / 4)
        assert fast[job_id].duration == job.duration
    assert load_philly_trace(path, compress=4.0).stats["offered_gpus"] == pytest.approx(
        4 * load_philly_trace(path, compress=1.0).stats["offered_gpus"])


def test_day_window(tmp_path):
    path = head(JOBS, tmp_path / "jobs.csv", 500)
    full = load_philly_trace(path)
    window = load_philly_trace(path, start_days=30, until_days=40)
    expected = [j for j in full.jobs if 30 * 86400 <= j.submit < 40 * 86400]
    assert [j.id for j in window.jobs] == [j.id for j in expected]
    assert all(0 <= j.submit < 10 * 86400 for j in window.jobs)
    assert window.stats["dropped"] == 500 - len(expected)


def test_full_trace_numbers_behind_the_defaults():
    trace = load_trace("philly")
    assert DEFAULT_COMPRESS == 1.0
    assert len(trace.jobs) == 82247
    assert trace.stats["gpu_seconds"] == pytest.approx(3.521082502e9)
    assert trace.stats["span_s"] / 86400 == pytest.approx(108.9, abs=0.05)
    assert trace.stats["offered_gpus"] == pytest.approx(374.2, abs=0.1)
    shapes = collections.Counter((j.tasks, j.gpus_per_task) for j in trace.jobs if j.tasks > 1)
    assert shapes[(16, 8)] == 3 and shapes[(2, 8)] == 199 and shapes[(3, 4)] == 7
    assert trace.stats["non_pow2_gangs"] == 7  # the 12-GPU jobs (24 = 3 x 8 is a multiple of 8)
