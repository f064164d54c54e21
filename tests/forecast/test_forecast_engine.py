"""The pure forecaster (scheduler.forecast): estimated starts from the engine run forward, the run-time
estimator, the horizon / never-fits reasons, and agreement with the replay simulator."""
from __future__ import annotations

import math

import pytest

from clusterspec.spec import ClusterSpec, DomainSpec, NodeSpec, QueueSpec, Trace, TraceJob
from scheduler.core.testing import World
from scheduler.forecast import RuntimeEstimator, forecast, forecast_start
from scheduler.sim.replay import Replay


def _world() -> World:
    w = World().racks(count=1, nodes_per_rack=2, gpus=8)  # rack1-n1, rack1-n2: 16 GPUs
    w.queue(name="q", quota={"H100": 16}, limit={"H100": 16})
    return w


def test_running_jobs_end_at_their_expected_end_and_pending_start_in_order():
    w = _world()
    w.running(name="a", nodes=["rack1-n1"], gpus_per_task=8, started=0.0)
    w.running(name="b", nodes=["rack1-n2"], gpus_per_task=8, started=0.0)
    w.job(name="p1", tasks=1, gpus_per_task=8, submit=10.0)
    w.job(name="p2", tasks=2, gpus_per_task=8, submit=20.0)
    run = {"a": 3600.0, "b": 7200.0, "p1": 1800.0, "p2": 600.0}
    out = forecast(w.snapshot(now=100.0), lambda job, elapsed: run[job.id], resolution=0.0)
    # p1 starts when a ends (3600); p2 needs both nodes: b ends at 7200, p1 at 3600 + 1800
    assert out.starts == {"p1": 3600.0, "p2": 7200.0}
    assert out.no_estimate == {}
    # a variant: b ends first, so p1 (first in line) takes its node at 1000
    run["b"] = 1000.0
    out = forecast(w.snapshot(now=100.0), lambda job, elapsed: run[job.id], resolution=0.0)
    assert out.starts == {"p1": 1000.0, "p2": 3600.0}


def test_elapsed_time_is_passed_for_running_jobs():
    w = _world()
    w.running(name="a", nodes=["rack1-n1", "rack1-n2"], gpus_per_task=8, started=-500.0)
    w.job(name="p", tasks=1, gpus_per_task=8)
    seen = {}

    def runtime(job, elapsed):
        seen[job.id] = elapsed
        return 1500.0

    out = forecast(w.snapshot(now=0.0), runtime, resolution=0.0)
    assert seen["a"] == 500.0
    assert out.starts == {"p": 1000.0}  # started at -500, runs 1500 s


def test_horizon_and_never_fits_give_no_estimate_with_reason():
    w = _world()
    w.running(name="a", nodes=["rack1-n1", "rack1-n2"], gpus_per_task=8)
    w.job(name="late", tasks=1, gpus_per_task=8)
    w.job(name="huge", tasks=3, gpus_per_task=8)  # 24 GPUs on a 16-GPU cluster
    out = forecast(w.snapshot(), lambda job, el: 10 * 86400.0, horizon=86400.0)
    assert out.starts == {}
    assert "24 h horizon" in out.no_estimate["late"]
    assert out.no_estimate["huge"].startswith("can never start")


def test_a_job_in_its_restart_backoff_on_an_idle_cluster_starts_when_its_backoff_ends():
    """New-user report item 6: a job waiting out its restart backoff (not_before 20 s away) on an idle
    cluster had no estimate, "not started within the 168 h horizon": with nothing running, no event woke
    the forecast up. Its not_before is one."""
    from dataclasses import replace

    w = _world()
    w.job(name="retry", tasks=1, gpus_per_task=8)
    snap = w.snapshot(now=100.0)
    snap = replace(snap, jobs=tuple(replace(j, not_before=120.0) for j in snap.jobs))
    out = forecast(snap, lambda job, el: 600.0, resolution=0.0)
    assert out.starts == {"retry": 120.0} and out.no_estimate == {}


def test_cycle_budget_is_a_reason_too():
    w = _world()
    for i in range(6):
        w.job(name=f"p{i}", tasks=2, gpus_per_task=8, submit=float(i))
    out = forecast(w.snapshot(), lambda job, el: 3600.0, max_cycles=3, resolution=0.0)
    # cycles at 0 (p0 starts), 60 (the rerun after a start), 3600 (p0 ended: p1 starts); then the budget
    assert out.truncated and out.starts == {"p0": 0.0, "p1": 3600.0}
    assert set(out.no_estimate) == {"p2", "p3", "p4", "p5"}
    assert all("budget of 3 cycles" in r for r in out.no_estimate.values())


def test_p90_pass_is_never_earlier_than_the_median_pass():
    w = _world()
    w.running(name="a", nodes=["rack1-n1", "rack1-n2"], gpus_per_task=8)
    w.job(name="p1", tasks=2, gpus_per_task=8, submit=1.0)
    w.job(name="p2", tasks=1, gpus_per_task=8, submit=2.0)
    est = {"a": (1000.0, 4000.0), "p1": (500.0, 2000.0), "p2": (100.0, 100.0)}
    starts, info = forecast_start(w.snapshot(), lambda job, el: est[job.id], resolution=0.0)
    assert (starts["p1"].start, starts["p1"].start_p90) == (1000.0, 4000.0)
    assert (starts["p2"].start, starts["p2"].start_p90) == (1500.0, 6000.0)
    assert info["cycles"] >= 2


def test_the_forecast_agrees_with_the_replay_when_run_times_are_exact():
    """Same engine, same state machine: with exact run times and every job already submitted, the
    forecast from the first cycle's snapshot gives the starts the replay then makes."""
    nodes = tuple(NodeSpec(name=f"n{i}", flavor="H100", gpus=8, domain=f"r{i // 2}") for i in range(6))
    domains = tuple(DomainSpec(name=f"r{r}", tier=1, parent="spine") for r in range(3)) + (
        DomainSpec(name="spine", tier=2),)
    cluster = ClusterSpec(name="c", nodes=nodes, domains=domains,
                          queues=(QueueSpec(name="a", quotas={"H100": (0, 24, 48)}),
                                  QueueSpec(name="b", quotas={"H100": (0, 24, 48)})))
    sizes = [(1, 8), (2, 8), (1, 4), (4, 8), (1, 1), (3, 8), (1, 2), (2, 4), (6, 8), (1, 8), (2, 2), (1, 8)]
    jobs = tuple(TraceJob(id=f"j{i}", queue="ab"[i % 2], submit=0.0, duration=600.0 + 450.0 * ((i * 7) % 5),
                          tasks=t, gpus_per_task=g) for i, (t, g) in enumerate(sizes))
    trace = Trace(name="t", jobs=jobs)
    rep = Replay(cluster, trace, cycle_interval=60.0, fairness=False)
    starts: dict = {}
    orig = rep._start

    def record(binding, now):
        starts.setdefault(binding.job_id, now)
        orig(binding, now)

    rep._start = record
    first = {}
    orig_cycle = rep.cycle

    def cycle(now):
        if not first:
            first["snap"] = rep.state.snapshot(now)
        return orig_cycle(now)

    rep.cycle = cycle
    rep.run()
    duration = {j.id: j.duration for j in jobs}
    out = forecast(first["snap"], lambda job, el: duration[job.id], step=60.0, resolution=0.0)
    assert len(starts) == len(jobs) and any(s > 0 for s in starts.values())
    assert out.starts == starts


def test_estimator_levels_median_p90_and_elapsed():
    est = RuntimeEstimator(window=10, min_samples=3, default_seconds=1234.0)
    assert est.estimate("u", "q", 8).source == "default"
    assert est.estimate("u", "q", 8, time_limit=900.0).source == "time_limit"
    for s in (100, 200, 300, 400, 500, 600, 700, 800, 900, 1000):
        est.observe("other", "q", 1, s)
    e = est.estimate("u", "q", 8)
    assert (e.source, e.median, e.p90) == ("queue", 500.0, 900.0)
    for s in (50, 60, 70):
        est.observe("u", "q", 8, s)
    e = est.estimate("u", "q", 8)
    assert (e.source, e.median) == ("user_shape", 60.0)
    assert est.estimate("u", "q", 4).source == "queue"  # another shape of the same user
    assert est.estimate("u", "elsewhere", 4).source == "cluster"
    # conditional on elapsed: a job that already ran 65 s is one of the longer ones
    assert est.estimate("u", "q", 8, elapsed=65).median == 70.0
    # it outlived all its history: it runs on for a while
    outlived = est.estimate("u", "q", 8, elapsed=1000)
    assert outlived.median == 1500.0
    # and its 90 % bound from the same Pareto tail (median x 2^(1/a) = 1.5, P90 x 10^(1/a) = 1.5^log2(10) = 3.84),
    # not the median again (new-user trial 23, F3: the "90 %" start of a job behind it equalled its median start)
    assert outlived.p90 == pytest.approx(1000 * 1.5 ** math.log2(10)) and outlived.p90 > 3800
    assert est.estimate("u", "q", 8, elapsed=10).p90 >= est.estimate("u", "q", 8, elapsed=10).median
    # the window ages out old run times
    for _ in range(10):
        est.observe("other", "q", 1, 5000)
    assert est.estimate("v", "q", 2).median == 5000.0
    with pytest.raises(ValueError):
        RuntimeEstimator(window=0)
