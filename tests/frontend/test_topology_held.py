"""New-user trial 3, item 4: GPUs held (reserved) for a job that has not started are "held" on the topology map,
not free, so its totals agree with the cluster sample, the cluster page's numbers and /metrics (free 0, held 2)."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from frontend.topology import gpu_state


def test_topology_totals_count_held_gpus_apart_from_free(held_world):
    from gpuplatform.models import ClusterSample

    sample = ClusterSample.objects.order_by("-time", "-id").first()
    assert (sample.allocated_gpus, sample.held_gpus, sample.free_gpus) == (6, 2, 0)
    client = APIClient()
    client.force_login(held_world)
    numbers = client.get("/cluster/metrics.json").json()["numbers"]
    topo = client.get("/topology.json").json()
    assert topo["totals"]["free"] == numbers["free_gpus"] == sample.free_gpus == 0
    assert topo["totals"]["held"] == numbers["held_gpus"] == sample.held_gpus == 2
    assert topo["totals"]["running"] + topo["totals"]["borrowed"] == sample.allocated_gpus
    # the map's cells count the same way: one square per GPU (nodes without a domain: per GPU at the top level too,
    # trial 23) and its trace, and zoomed in
    assert topo["level"] == "gpus"
    assert [r["state"] for r in topo["rows"]].count("held") == 2 and not any(r["state"] == "free" for r in topo["rows"])
    held_trace = next(t for t in topo["figure"]["data"] if t["name"].startswith("held"))
    assert held_trace["name"] == "held (2)"
    zoomed = client.get("/topology.json?zoom=node:n1").json()
    assert zoomed["level"] == "gpus"
    assert sorted(r["state"] for r in zoomed["rows"]).count("held") == 2
    assert not any(r["state"] == "free" for r in zoomed["rows"])
    cell = next(t for t in zoomed["figure"]["data"] if t["name"].startswith("held"))
    assert len(cell["x"]) == 2 and "held (reserved) for a job that has not started" in cell["hovertext"][0]
    assert "gpu-held" in client.get("/topology/").content.decode()  # the legend names the state


@pytest.mark.parametrize("job, held, expected", [(None, True, "held"), (None, False, "free"),
                                                 ({"id": 1, "state": "running"}, True, "running")])
def test_gpu_state_held_only_when_not_allocated(job, held, expected):
    assert gpu_state("healthy", "ready", job, borrowed=False, held=held) == expected
    assert gpu_state("unhealthy", "ready", None, borrowed=False, held=True) == "unhealthy"
