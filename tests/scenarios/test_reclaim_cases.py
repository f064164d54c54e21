"""Reclaim, preemption and backfill cases of ../shared/cases/, restated with the test builders."""
from collections import Counter

import pytest

from scheduler.core import CycleConfig
from scheduler.core.testing import ScenarioRunner, World


def queue_gpus(runner, queue):
    return sum(len(t.gpus) for j in runner.running.values() if j.queue == queue for t in j.placement)


def test_reclaim_needs_several_victims():
    """reclaim-needs-several-victims.yaml: victims are added up until the request fits."""
    world = (World().node(name="n1", gpus=8)
             .queue(name="a", quota={"H100": 8}).queue(name="b", quota={"H100": 0}, limit={"H100": 8}))
    for i in range(1, 5):
        world.job(name=f"b-{i}", queue="b", tasks=1, gpus_per_task=2, submit=0)
    world.job(name="a-big", queue="a", tasks=1, gpus_per_task=8, submit=10)
    runner = ScenarioRunner(world, grace=30).run(until=60, every=5)
    assert sorted(e.job_id for e in runner.evictions) == ["b-1", "b-2", "b-3", "b-4"]
    assert all(e.rule == "reclaim" and e.beneficiary == "a-big" for e in runner.evictions)
    assert runner.started["a-big"] == 40  # evicted at 10, 30 s of grace, started at the next cycle
    assert queue_gpus(runner, "a") == 8 and queue_gpus(runner, "b") == 0


def test_reclaim_ping_pong_settles():
    """reclaim-ping-pong.yaml: one reclaim of ja's surplus tasks, then 50 quiet cycles."""
    world = (World().nodes(count=6, gpus=2, flavor="A100")
             .queue(name="a", quota={"A100": 6}, limit={"A100": 12})
             .queue(name="b", quota={"A100": 6}, limit={"A100": 12})
             .job(name="ja", queue="a", tasks=6, gpus_per_task=2, min_available=2, submit=0)
             .job(name="jb", queue="b", tasks=6, gpus_per_task=2, min_available=2, submit=100))
    runner = ScenarioRunner(world, grace=10).run(until=200, every=10)
    assert {e.job_id for e in runner.evictions} == {"ja"}
    assert all(e.tasks for e in runner.evictions)  # surplus tasks only, never the gang
    assert queue_gpus(runner, "a") == 6 and queue_gpus(runner, "b") == 6
    evictions = len(runner.evictions)
    runner.run(start=210, until=700, every=10)  # 50 more cycles, no arrivals or departures
    assert len(runner.evictions) == evictions


@pytest.mark.parametrize("root_limit, spare", [(None, False), (320, False), (320, True)])
def test_reclaim_when_cluster_full(root_limit, spare):
    """reclaim-when-cluster-full.yaml: one b-load task (8 GPUs) is reclaimed; a2-load is untouched. Also
    with the root limited to the cluster's size (such a limit is no cap), and with a cordoned spare node
    so that the root's limit (320 of 328 GPUs) really binds: only victims below the root make room."""
    world = World().nodes(count=40, gpus=8)
    if spare:
        world.node(name="spare", gpus=8, state="cordoned")
    (world.queue(name="root", quota={"H100": 320}, limit={"H100": root_limit} if root_limit else None)
             .queue(name="a", parent="root", quota={"H100": 160})
             .queue(name="a1", parent="a", quota={"H100": 80})
             .queue(name="a2", parent="a", quota={"H100": 80})
             .queue(name="b", parent="root", quota={"H100": 160}))
    nodes = [f"n{i}" for i in range(1, 41)]
    world.running(name="b-load", queue="b", nodes=nodes[:30], gpus_per_task=8, min_available=1)
    world.running(name="a2-load", queue="a2", nodes=nodes[30:], gpus_per_task=8, min_available=10)
    world.job(name="a1-job", queue="a1", tasks=1, gpus_per_task=8, submit=0)
    runner = ScenarioRunner(world, grace=0).run(until=2)
    (ev,) = runner.evictions
    assert ev.job_id == "b-load" and len(ev.tasks) == 1 and ev.gpus == 8
    assert runner.started["a1-job"] == 1
    assert len(runner.running["a2-load"].placement) == 10
    decision = runner.history[0][1].decisions[0]
    assert decision["rule"] == "reclaim" and decision["beneficiary"] == "a1-job"
    assert decision["usage_before"]["b"]["H100"] == 240 and decision["usage_after"]["b"]["H100"] == 232


def test_reclaim_blocked_by_never_fits():
    """reclaim-blocked-by-never-fits.yaml: w4 never triggers an eviction; w1 is evicted once, w3 runs,
    and w1 is never re-admitted onto the GPUs held for w3."""
    world = (World().node(name="n1", gpus=3, flavor="A100")
             .queue(name="a", quota={"A100": 3}, limit={"A100": 3})
             .queue(name="b", quota={"A100": 0}, limit={"A100": 3})
             .job(name="w1", queue="b", tasks=1, gpus_per_task=1, submit=0)
             .job(name="w4", queue="a", tasks=1, gpus_per_task=4, submit=1)
             .job(name="w3", queue="a", tasks=1, gpus_per_task=3, submit=2))
    runner = ScenarioRunner(world, grace=20).run(until=120, every=5)
    assert [(e.job_id, e.beneficiary) for e in runner.evictions] == [("w1", "w3")]
    assert "w3" in runner.running and runner.started["w3"] == 25
    assert "w1" in runner.pending and runner.pending["w1"].attempts == 1
    assert runner.pending["w1"].submit_time == 0  # original submit time kept
    assert runner.history[-1][1].pending["w4"].terminal


def test_backfill_does_not_starve_big_job():
    """backfill-starves-big-job.yaml: l1 starts by l0's time limit plus one cycle, and small jobs
    only run before that where they end before l1's reserved start."""
    world = (World().node(name="n1", gpus=8).queue(name="q", quota={"H100": 8})
             .running(name="l0", queue="q", nodes=["n1"], gpus_per_task=6, time_limit=3600, started=0,
                      duration=3600, preemptible=False)
             .job(name="l1", tasks=1, gpus_per_task=6, priority=100, time_limit=3600, submit=10, duration=3600))
    for i in range(1, 501):
        world.job(name=f"s-{i}", tasks=1, gpus_per_task=1, time_limit=900, submit=20 + 60 * i, duration=900)
    runner = ScenarioRunner(world).run(until=4000, every=60)
    l1_start = runner.started["l1"]
    assert l1_start <= 3600 + 60
    l1_gpus = {g for t in runner.placements["l1"] for g in t.gpus}
    backfilled = 0
    for i in range(1, 501):
        name = f"s-{i}"
        if name in runner.started and runner.started[name] < l1_start:
            backfilled += 1
            gpus = {g for t in runner.placements[name] for g in t.gpus}
            if gpus & l1_gpus:  # on l1's reserved GPUs: must be gone before l1's start
                assert runner.started[name] + 900 <= l1_start, name
    assert backfilled >= 6  # the 2 idle GPUs kept running small jobs meanwhile (at most 8 fit)
    first = next(r for _, r in runner.history if "l1" in r.estimated_start)
    assert first.estimated_start["l1"] == 3600


def test_priority_preemption_only_when_it_lets_the_job_start():
    world = (World().node(name="n1", gpus=8).queue(name="q", quota={"H100": 8})
             .running(name="low", queue="q", nodes=["n1"], gpus_per_task=4, priority=0)
             .running(name="protected", queue="q", nodes=["n1"], gpus_per_task=4, priority=0, preemptible=False)
             .job(name="urgent", tasks=1, gpus_per_task=4, priority=10)
             .job(name="too-big", tasks=1, gpus_per_task=8, priority=10, submit=1))
    result = world.cycle(now=5)
    assert [(e.job_id, e.rule, e.beneficiary) for e in result.evictions] == [("low", "preempt", "urgent")]
    assert "too-big" not in {e.beneficiary for e in result.evictions}
    assert Counter(n.job_id for n in result.nominations) == {"urgent": 1}


def test_starving_gang_gets_a_drain_reservation_without_time_limits():
    """No job declares a time limit, so no backfill shadow can be computed; a stream of 1-GPU jobs
    keeps both 8-GPU nodes partly busy. After starvation_seconds the 8-GPU job gets a persistent
    reservation on the node quickest to drain and starts once its jobs end."""
    def world():
        w = World().nodes(count=2, gpus=8).queue(name="q", quota={"H100": 16})
        w.job(name="wide", tasks=1, gpus_per_task=8, submit=1200, duration=600)
        for i in range(400):
            w.job(name=f"s{i}", tasks=1, gpus_per_task=1, submit=30 * i, duration=600)
        return w
    runner = ScenarioRunner(world()).run(until=6000, every=30)
    assert "wide" in runner.started and runner.started["wide"] >= 1200 + 1800
    assert runner.started["wide"] <= 1200 + 1800 + 600 + 60  # threshold + one small job's run + a cycle
    off = ScenarioRunner(world(), config=CycleConfig(starvation_seconds=10 ** 9)).run(until=6000, every=30)
    assert "wide" not in off.started  # the stream starves it without the reservation
