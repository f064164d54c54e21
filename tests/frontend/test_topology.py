"""frontend/topology.py: the map's pure builder (states, borrowing, levels, valid plotly figures)."""
from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from frontend.topology import gpu_state, topology_payload
from gpuplatform.borrowing import borrowed, borrowed_gpu_ids

DOMAINS = [(1, "spine", 3, None), (2, "leaf0", 2, 1), (3, "nvl0", 1, 2), (4, "nvl1", 1, 2)]
# (gpu_id, index, health, node_id, node, node_state, flavor, domain_id): nvl0 = n0 (ready), nvl1 = n1 (cordoned)
GPUS = [(i, i % 4, "unhealthy" if i == 7 else "healthy", i // 4, f"n{i // 4}", "ready" if i < 4 else "cordoned",
         "H100", 3 if i < 4 else 4) for i in range(8)]
JOBS = [  # start order
    {"id": 10, "name": "a", "state": "running", "team_id": 1, "team_name": "red", "queue_id": 100, "queue_name": "red"},
    {"id": 11, "name": "b", "state": "running", "team_id": 1, "team_name": "red", "queue_id": 100, "queue_name": "red"},
    {"id": 12, "name": "c", "state": "preempting", "team_id": 2, "team_name": "blue", "queue_id": 200, "queue_name": "blue"},
]
ALLOC = {0: 10, 1: 10, 2: 11, 4: 12}


def build(**kw):
    return topology_payload(domains=DOMAINS, gpus=GPUS, allocations=ALLOC, jobs=JOBS, quotas={100: 2, 200: 8}, **kw)


def test_borrowed_are_the_gpus_past_the_quota_in_start_order():
    """One definition: per queue the map marks exactly max(0, used - quota) GPUs borrowed (a gang that
    crosses the quota is split), so the map and the queue tree count the same."""
    jobs = [{"id": 1, "queue_id": 1}, {"id": 2, "queue_id": 1}, {"id": 3, "queue_id": 2}]
    alloc = {10: 1, 11: 1, 12: 2, 13: 2, **{20 + i: 3 for i in range(9)}}
    assert borrowed_gpu_ids(jobs, alloc, {1: 3, 2: 9}) == {13}
    assert len(borrowed_gpu_ids(jobs, alloc, {1: 1, 2: 4})) == borrowed(4, 1) + borrowed(9, 4) == 8
    assert borrowed(2, None) == 2 and borrowed(1, 5) == 0


@pytest.mark.parametrize("health, node, job, expected", [
    ("unhealthy", "ready", None, "unhealthy"), ("healthy", "not_ready", {"id": 1, "state": "running"}, "unhealthy"),
    ("healthy", "ready", {"id": 1, "state": "preempting"}, "preempting"),
    ("healthy", "ready", {"id": 2, "state": "running"}, "borrowed"), ("healthy", "ready", {"id": 1, "state": "running"}, "running"),
    ("healthy", "draining", None, "cordoned"), ("healthy", "ready", None, "free"),
])
def test_gpu_state(health, node, job, expected):
    assert gpu_state(health, node, job, borrowed=job is not None and job["id"] == 2) == expected


def test_cluster_level_counts_per_domain_and_is_a_valid_figure():
    p = build()
    go.Figure(p["figure"])
    json.dumps(p)
    assert p["level"] == "domains" and p["totals"] == {"free": 1, "running": 2, "borrowed": 1, "preempting": 1, "held": 0,
                                                       "unhealthy": 1, "cordoned": 2}
    assert [(r["domain"], r["free"], r["running"], r["borrowed"]) for r in p["rows"]] == [("nvl0", 1, 2, 1), ("nvl1", 0, 0, 0)]
    assert {t["type"] for t in p["figure"]["data"]} == {"bar"}


def test_zoom_draws_gpus_with_webgl_and_dims_what_the_filter_leaves_out():
    p = build(zoom="leaf0", team="blue")
    go.Figure(p["figure"])
    assert p["level"] == "gpus" and {t["type"] for t in p["figure"]["data"]} == {"scattergl"}
    pre = next(t for t in p["figure"]["data"] if t["name"].startswith("preempting"))
    run = next(t for t in p["figure"]["data"] if t["name"].startswith("running"))
    assert pre["marker"]["opacity"] == [1.0] and run["marker"]["opacity"] == [0.25, 0.25]


def test_other_teams_job_names_are_hidden():
    p = build(zoom="nvl1", visible_team_ids={1})
    assert {r["job"] for r in p["rows"]} == {"(other team)", ""}
    assert all("c ·" not in h for t in p["figure"]["data"] for h in t["hovertext"])


def test_a_big_zoom_stays_aggregated():
    assert build(zoom="leaf0", gpu_cell_limit=4)["level"] == "domains"
    with pytest.raises(KeyError):
        build(zoom="nope")


def test_domain_columns_are_drawn_to_scale():
    """A domain of 2 GPUs is a quarter of the height of one of 8 (issue 13: 2-GPU and 8-GPU machines)."""
    domains = [(1, "spine", 2, None), (2, "small", 1, 1), (3, "big", 1, 1)]
    gpus = [(i, i, "healthy", 0, "s0", "ready", "K80", 2) for i in range(2)]
    gpus += [(10 + i, i, "healthy", 1, "b0", "ready", "K80", 3) for i in range(8)]
    p = topology_payload(domains=domains, gpus=gpus, allocations={10: 99}, quotas={1: 8},
                         jobs=[{"id": 99, "name": "j", "state": "running", "team_id": 1, "team_name": "t",
                                "queue_id": 1, "queue_name": "t"}])
    height = {}
    for trace in p["figure"]["data"]:
        for x, y in zip(trace["x"], trace["y"]):
            height[x] = height.get(x, 0) + -y
    small, big = sorted(height.values())
    assert small == pytest.approx(big / 4, abs=0.002)
