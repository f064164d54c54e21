"""Property tests over many cycles: no thrashing in a stable world, guarantees and limits hold at every
level after every eviction, and a big job at the head of its queue is not starved by a stream of small
jobs (hypothesis, random clusters, queues and job streams)."""
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.testing import World, role
from scheduler.sim.scenario import ScenarioRunner


@st.composite
def contended_worlds(draw):
    world = World().nodes(count=draw(st.integers(2, 6)), gpus=draw(st.sampled_from([2, 4, 8])), flavor="A100")
    total = sum(n.gpus for n in world.node_infos)
    n_queues = draw(st.integers(2, 3))
    quotas = [total // n_queues] * n_queues
    world.queue(name="root", quota={"A100": total})
    for i, quota in enumerate(quotas):
        guarantee = draw(st.integers(0, quota))
        world.queue(name=f"q{i}", parent="root", quota={"A100": quota}, guarantee={"A100": guarantee},
                    limit={"A100": draw(st.integers(quota, total))})
    for j in range(draw(st.integers(2, 10))):
        tasks = draw(st.integers(1, 4))
        world.job(name=f"j{j}", queue=f"q{draw(st.integers(0, n_queues - 1))}",
                  roles=[role(tasks=tasks, gpus_per_task=draw(st.sampled_from([1, 2])),
                              min_available=draw(st.integers(1, tasks)))],
                  priority=draw(st.integers(0, 2)), submit=draw(st.sampled_from([0, 10, 20])),
                  preemptible=draw(st.booleans()))
    return world


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contended_worlds(), st.sampled_from([0, 10]))
def test_stable_world_stops_evicting_and_keeps_guarantees(world, grace):
    runner = ScenarioRunner(world, grace=grace).run(until=400, every=10)
    # no arrivals or departures after t=20: once settled, no more evictions
    late = [e for now, r in runner.history if now >= 250 for e in r.evictions]
    assert late == [], late
    queues = {q.name: q for q in world.queue_infos}
    for _, result in runner.history:
        for d in result.decisions:
            for q, usage in d["usage_after"].items():
                quota = queues[q].quotas.get("A100")
                if quota is not None and d["rule"] == "reclaim" and q != d["queue"]:
                    assert usage.get("A100", 0) >= quota.guarantee
        for q, usage in result.metrics["queue_usage"].items():
            quota = queues[q].quotas.get("A100")
            if quota is not None and quota.limit is not None:
                assert usage.get("A100", 0) <= quota.limit
    # every beneficiary of an eviction eventually started (no eviction for a job that does not start)
    for ev in runner.evictions:
        assert ev.beneficiary in runner.started or ev.beneficiary in runner.finished


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 8), st.integers(300, 1800), st.integers(30, 300))
def test_head_job_not_starved_by_small_jobs(gpus, small_limit, gap):
    world = (World().node(name="n1", gpus=8).queue(name="q", quota={"H100": 8})
             .running(name="blocker", queue="q", nodes=["n1"], gpus_per_task=gpus, time_limit=1000, duration=1000,
                      preemptible=False)
             .job(name="big", tasks=1, gpus_per_task=8, time_limit=1000, submit=5, duration=1000))
    for i in range(60):
        world.job(name=f"s{i}", tasks=1, gpus_per_task=1, time_limit=small_limit, submit=10 + gap * i,
                  duration=small_limit)
    runner = ScenarioRunner(world).run(until=4000, every=30)
    assert runner.started["big"] <= 1000 + 30
