"""The replay computes the GPU-hour ledger (scheduler.core.gpu_hours) from its own history (issue #20)."""
from __future__ import annotations

import math

import pytest

from scheduler.core.gpu_hours import BUCKETS
from scheduler.sim.failures import Checkpointing, FailureModel
from scheduler.sim.replay import replay

from test_fairness_failures import busy_trace
from test_replay import cluster as tiny_cluster
from test_replay import first_fit


@pytest.mark.parametrize("seed,interval", [(7, None), (3, 600.0)])
def test_replay_ledger_sums_to_capacity_and_agrees_with_the_goodput_books(seed, interval):
    model = FailureModel(rate=2000.0, detection_timeout=120.0, repair_time=1800.0, seed=seed)
    r = replay(tiny_cluster(), busy_trace(), engine=first_fit, failures=model, checkpoint=Checkpointing(interval))
    g = r.gpu_hours
    assert r.failures["node_failures"] > 0
    assert math.isclose(sum(g[b] for b in BUCKETS), g["capacity"], rel_tol=1e-9)
    assert math.isclose(g["capacity"], r.cluster_gpus * r.span_seconds / 3600.0, rel_tol=1e-9)
    assert g["useful"] == pytest.approx(r.useful_gpu_hours, rel=1e-9)  # same credits, same books
    w = r.waste_gpu_hours
    assert g["lost_to_failure"] == pytest.approx(w["lost_work"] + w["undetected"], rel=1e-6, abs=1e-6)
    assert g["down"] > 0 and g["lost_to_failure"] > 0
    assert g["idle_allocated"] == 0  # no telemetry in the replay
    assert g["effective_utilization"] == pytest.approx(g["useful"] / (g["capacity"] - g["down"]))


def test_held_counts_only_nominated_gpus_no_job_uses():
    """A nomination may cover GPUs a running job (a drain reservation's victim) still holds: those are the
    running job's, only the free nominated GPUs are `held`; releasing the job makes them held."""
    from scheduler.core.snapshot import Binding, TaskPlacement
    from scheduler.sim.state import ClusterState, job_info, queue_infos
    from test_replay import job

    spec = tiny_cluster()
    state = ClusterState(spec, queue_infos(spec, set()))
    state.submit(job_info(job("run", 0, 100, gpus=2)))
    state.bind(Binding("run", (TaskPlacement("worker", 0, "n0", (0, 1)),), "", 0), 0.0)
    state.submit(job_info(job("big", 0, 100, gpus=4)))
    state.set_holds({"big": (TaskPlacement("worker", 0, "n0", (0, 1, 2, 3)),)})
    assert state.reserved_gpus() == 2  # GPUs 2, 3; 0 and 1 are the running job's
    state.release("run")
    assert state.reserved_gpus() == 4
