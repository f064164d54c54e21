"""Gang cases of ../shared/cases/, restated with the test builders (the case file is named in each test)."""
from scheduler.core.testing import ScenarioRunner, World, role


def held_gpus(result, job_id):
    return sum(len(t.gpus) for b in result.bindings if b.job_id == job_id for t in b.tasks)


def test_gang_aggregate_fits_nodes_dont():
    """gang-aggregate-fits-nodes-dont.yaml: 12 free GPUs in total, but no node packing of 3 x 4 GPUs."""
    world = (World()
             .node(name="n1", gpus=8, used=2).node(name="n2", gpus=8, used=6)
             .node(name="n3", gpus=8, used=6).node(name="n4", gpus=8, used=6)
             .queue(name="q", quota={"H100": 32})
             .job(name="big", tasks=3, gpus_per_task=4, min_available=3, submit=0)
             .job(name="small-1", submit=1).job(name="small-2", submit=2))
    runner = ScenarioRunner(world)
    for now in (2, 3, 4):
        result = runner.step(now)
        assert held_gpus(result, "big") == 0
        assert "big" in runner.pending
    first = runner.history[0][1]
    assert {b.job_id for b in first.bindings} == {"small-1", "small-2"}
    reason = first.pending["big"]
    assert reason.code == "no_packing" and "no node packing fits" in reason.message
    assert "insufficient" not in reason.message


def test_gang_head_blocks_fitting_job():
    """gang-head-blocks-fitting-job.yaml: an older gang that can never fit does not block a younger job."""
    world = (World().node(name="n1", gpus=8).queue(name="q", quota={"H100": 8})
             .job(name="old-big", tasks=3, gpus_per_task=4, min_available=3, submit=0)
             .job(name="young-small", tasks=1, gpus_per_task=3, submit=1))
    result = world.cycle(now=1)
    assert [b.job_id for b in result.bindings] == ["young-small"]
    reason = result.pending["old-big"]
    assert reason.terminal and "can never fit" in reason.message
    assert held_gpus(result, "old-big") == 0


def test_gang_minimum_above_remaining():
    """gang-minimum-above-remaining.yaml: 5 completions, 4 at a time, min_available 4. After 4 complete,
    the effective minimum is the 1 task that remains, so it runs at the next cycle."""
    world = (World().nodes(count=2, gpus=8).queue(name="q", quota={"H100": 16})
             .job(name="batch", roles=[role(tasks=4, gpus_per_task=1, min_available=4)]))
    first = world.cycle()
    assert len(first.bindings[0].tasks) == 4
    # the 4 tasks completed; one task remains with min_available still 4 on the spec
    remaining = role(tasks=1, gpus_per_task=1, min_available=4)
    assert remaining.effective_min == 1
    world2 = (World().nodes(count=2, gpus=8).queue(name="q", quota={"H100": 16})
              .job(name="batch", roles=[remaining]))
    second = world2.cycle(now=100)
    assert [len(b.tasks) for b in second.bindings] == [1]


def test_gang_per_role_minimums():
    """gang-per-role-minimums.yaml: every role must reach its own minimum; the reason names the role."""
    def world(b_gpus):
        return (World().nodes(count=4, gpus=8).queue(name="q", quota={"H100": 32})
                .job(name="multi-role", roles=[
                    role(name="launcher", tasks=1, gpus_per_task=0, min_available=1, cpu_milli=1000),
                    role(name="worker-a", tasks=3, gpus_per_task=1, min_available=1),
                    role(name="worker-b", tasks=3, gpus_per_task=b_gpus, min_available=1)]))
    blocked = world(16).cycle()
    assert blocked.bindings == []
    assert "worker-b" in blocked.pending["multi-role"].message
    started = world(8).cycle()
    (binding,) = started.bindings
    roles = {t.role for t in binding.tasks}
    assert roles == {"launcher", "worker-a", "worker-b"}


def test_gang_two_whole_cluster_gangs_same_cycle():
    """gang-two-whole-cluster-gangs.yaml, same-cycle variant."""
    world = (World().nodes(count=100, gpus=8).queue(name="q", quota={"H100": 800})
             .job(name="j1", tasks=100, gpus_per_task=8, submit=0)
             .job(name="j2", tasks=100, gpus_per_task=8, submit=0))
    runner = ScenarioRunner(world).run(until=3)
    assert len(runner.running) == 1
    (winner,) = runner.running.values()
    assert len(winner.placement) == 100
    loser = ({"j1", "j2"} - {winner.id}).pop()
    for _, result in runner.history:
        assert held_gpus(result, loser) == 0
        assert loser in result.pending


def test_gang_two_whole_cluster_gangs_adjacent_cycles():
    """gang-two-whole-cluster-gangs.yaml, adjacent-cycles variant: j2 arrives after the first cycle."""
    world = (World().nodes(count=100, gpus=8).queue(name="q", quota={"H100": 800})
             .job(name="j1", tasks=100, gpus_per_task=8, submit=0)
             .job(name="j2", tasks=100, gpus_per_task=8, submit=1))
    runner = ScenarioRunner(world).run(until=3)
    assert set(runner.running) == {"j1"} and set(runner.pending) == {"j2"}
    assert all(held_gpus(r, "j2") == 0 for _, r in runner.history)
