"""Property tests over many cycles: no thrashing in a stable world, guarantees and limits hold at every
level after every eviction, and a big job at the head of its queue is not starved by a stream of small
jobs (hypothesis, random clusters, queues and job streams)."""
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core import run_cycle
from scheduler.core.testing import World, check_result, role
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


def _wanting(snapshot, job_id, tasks, min_available):
    """The snapshot with running job `job_id` wanting `tasks` tasks (it runs fewer: an elastic job short of
    tasks, which grow places when they fit)."""
    return replace(snapshot, jobs=tuple(
        replace(j, roles=(role(tasks=tasks, gpus_per_task=j.roles[0].gpus_per_task, min_available=min_available),))
        if j.id == job_id else j for j in snapshot.jobs))


def test_job_preempted_this_cycle_does_not_grow():
    """Reduced from the stability property ("j2: bound and evicted"): elastic j2 runs 3 of its 4 one-GPU tasks;
    j0 (priority 1, not preemptible) may run only within q0's entitlement, so it preempts j2 (priority 0);
    n1/7 is still free, and grow used to give it to j2 in the same cycle: a job evicted and given a task at
    once (the task would start, then be killed with the job)."""
    w = (World().nodes(count=1, gpus=8, flavor="A100").queue(name="root", quota={"A100": 8})
         .queue(name="q0", parent="root", quota={"A100": 4}, limit={"A100": 7})
         .queue(name="q1", parent="root", quota={"A100": 4}, limit={"A100": 4})
         .running(name="j1", queue="q0", nodes=["n1", "n1"], gpus_per_task=2, priority=2, preemptible=False)
         .running(name="j2", queue="q0", nodes=["n1"] * 3, gpus_per_task=1)
         .job(name="j0", queue="q0", tasks=1, gpus_per_task=1, priority=1, preemptible=False))
    snap = _wanting(w.snapshot(now=10), "j2", 4, 3)
    result = run_cycle(snap)
    check_result(snap, result)
    assert [(e.job_id, e.rule, e.beneficiary, e.tasks) for e in result.evictions] == [("j2", "preempt", "j0", ())]
    assert [(n.job_id, [(t.node, t.gpus) for t in n.tasks]) for n in result.nominations] == [("j0", [("n1", (4,))])]
    assert result.growths == [] and result.metrics["free_gpus"] == 1  # n1/7 stays free


def test_job_reclaimed_this_cycle_does_not_grow_back():
    """Variant with a partial eviction: jb (qb, 2 x 2 GPUs) reclaims one surplus task of elastic ja (qa
    borrows; 5 of 8 one-GPU tasks) to get n3 whole; n5/1 stays free (jb cannot use one GPU), and grow used to
    give ja a task there in the cycle that took one back."""
    w = (World().nodes(count=5, gpus=2).queue(name="qa", quota={"H100": 2}).queue(name="qb", quota={"H100": 6})
         .running(name="ja", queue="qa", nodes=["n1", "n1", "n2", "n2", "n3"], gpus_per_task=1, min_available=2)
         .running(name="x", queue="qb", nodes=["n5"], gpus_per_task=1, preemptible=False)
         .job(name="jb", queue="qb", tasks=2, gpus_per_task=2, submit=10))
    snap = _wanting(w.snapshot(now=20), "ja", 8, 2)
    result = run_cycle(snap)
    check_result(snap, result)
    assert [(e.job_id, e.rule, e.beneficiary, e.tasks) for e in result.evictions] == [
        ("ja", "reclaim", "jb", (("worker", 4),))]
    assert result.growths == []


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
