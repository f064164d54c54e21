"""New-user trial 3, item 4: GPUs held (reserved) for a job that has not started are "held" on the topology map,
not free, so its totals agree with the cluster sample, the cluster page's numbers and /metrics (free 0, held 2)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone as tz

import pytest
from rest_framework.test import APIClient

from clusterspec.spec import ClusterSpec, NodeSpec, QueueSpec
from frontend.topology import gpu_state

CLOCK = datetime(2024, 3, 1, 12, 0, tzinfo=tz.utc)


@pytest.fixture
def hold_world(db, django_user_model):
    """One 8-GPU node: a running 6-GPU job, then a pending 8-GPU job the cycle holds the 2 free GPUs for."""
    from gpuplatform import services
    from gpuplatform.models import Queue
    from gpuplatform.scheduling import store

    services.load_cluster_spec(ClusterSpec(name="one", nodes=(NodeSpec("n1", "H100", 8),),
                                           queues=(QueueSpec("q", team="alpha", quotas={"H100": (0, 8, 8)}),)))
    queue = Queue.objects.get(name="q")
    services.submit_job(team=queue.team, queue=queue, name="r6", roles=[{"tasks": 1, "gpus_per_task": 6}],
                        command=["sleep", "3600"], time_limit_seconds=600, submitted_at=CLOCK)
    store.run_cycle_once(clock=CLOCK)
    services.submit_job(team=queue.team, queue=queue, name="big", roles=[{"tasks": 1, "gpus_per_task": 8}],
                        command=["sleep", "3600"], submitted_at=CLOCK)
    store.run_cycle_once(clock=CLOCK + timedelta(seconds=10))
    return django_user_model.objects.create_user("ops", password="pw", is_staff=True)


def test_topology_totals_count_held_gpus_apart_from_free(hold_world):
    from gpuplatform.models import ClusterSample

    sample = ClusterSample.objects.order_by("-time", "-id").first()
    assert (sample.allocated_gpus, sample.held_gpus, sample.free_gpus) == (6, 2, 0)
    client = APIClient()
    client.force_login(hold_world)
    numbers = client.get("/cluster/metrics.json").json()["numbers"]
    topo = client.get("/topology.json").json()
    assert topo["totals"]["free"] == numbers["free_gpus"] == sample.free_gpus == 0
    assert topo["totals"]["held"] == numbers["held_gpus"] == sample.held_gpus == 2
    assert topo["totals"]["running"] + topo["totals"]["borrowed"] == sample.allocated_gpus
    # the map's cells count the same way: the domain column and its trace, and one square per GPU zoomed in
    assert sum(r["held"] for r in topo["rows"]) == 2 and sum(r["free"] for r in topo["rows"]) == 0
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
