"""Trial 20, F2 and F3: two starving gangs must not hold the same GPUs (a second drain reservation counted the GPUs
an earlier drain waits for as drained, and both then waited on each other for hours), and a holder whose reserved
GPUs another hold has taken is told so, not that evicted jobs are releasing them."""
from collections import Counter
from dataclasses import replace

import pytest

from scheduler.core import CycleConfig, run_cycle
from scheduler.core.snapshot import TaskPlacement
from scheduler.core.testing import World
from scheduler.sim.scenario import ScenarioRunner


def _busy_world(*, nodes: int = 4, big: int = 4):
    """`nodes` 8-GPU nodes, each full with a job running without a time limit (no EASY shadow: only drains, and
    no GPU free for a hold to take: the holds only want GPUs); two gangs wanting whole nodes: `small` (2 x 8)
    first, then `big` (`big` x 8)."""
    world = World().nodes(count=nodes, gpus=8).queue(name="q", quota={"H100": nodes * 8})
    for i in range(1, nodes + 1):
        world.running(name=f"r{i}", nodes=[f"n{i}"], gpus_per_task=8, duration=10 ** 6)
    world.job(name="small", tasks=2, gpus_per_task=8, submit=0, duration=600)
    world.job(name="big", tasks=big, gpus_per_task=8, submit=1, duration=600)
    return world


def _overlaps(result) -> Counter:
    """(node, GPU) -> how many nominations of the cycle want it, for those wanted by more than one."""
    seen = Counter((t.node, g) for n in result.nominations for t in n.tasks for g in t.gpus)
    return Counter({k: v for k, v in seen.items() if v > 1})


def test_a_second_drain_keeps_clear_of_the_first():
    config = CycleConfig(starvation_seconds=60, max_drains=2)
    runner = ScenarioRunner(_busy_world(nodes=6, big=3), config=config).run(until=600, every=30)
    holders = set()
    for now, result in runner.history:
        assert not _overlaps(result), (now, _overlaps(result))
        holders.update(n.job_id for n in result.nominations)
    assert holders == {"small", "big"}  # both drain, each on its own nodes (2 + 3 of the 6)
    last = runner.history[-1][1]
    nodes = {n.job_id: {t.node for t in n.tasks} for n in last.nominations}
    assert len(nodes["small"]) == 2 and len(nodes["big"]) == 3 and not nodes["small"] & nodes["big"]


def test_no_drain_when_only_the_first_drains_gpus_would_do():
    """4 nodes: `small` drains 2; `big` (4 x 8) could only be placed on GPUs `small` waits for, so it gets no drain
    reservation (before the fix it held the GPUs of all 4 nodes, 2 of them wanted by `small` as well)."""
    config = CycleConfig(starvation_seconds=60, max_drains=2)
    runner = ScenarioRunner(_busy_world(nodes=4, big=4), config=config).run(until=600, every=30)
    for now, result in runner.history:
        assert not _overlaps(result), (now, _overlaps(result))
        assert "big" not in {n.job_id for n in result.nominations}, now
    assert {n.job_id for n in runner.history[-1][1].nominations} == {"small"}


@pytest.mark.parametrize("max_drains", [1, 2])
def test_drains_in_force_are_capped_by_max_drains(max_drains):
    """Each drain holds GPUs idle while its nodes drain: at most `max_drains` are in force (the default, 1: one
    target job at a time, as Volcano's reservation elects one); the next starving gang drains once one starts."""
    config = CycleConfig(starvation_seconds=60, max_drains=max_drains)
    world = _busy_world(nodes=6, big=3)
    runner = ScenarioRunner(world, config=config).run(until=600, every=30)
    most = max(len(r.nominations) for _, r in runner.history)
    assert most == max_drains
    if max_drains == 1:
        assert {n.job_id for n in runner.history[-1][1].nominations} == {"small"}
        assert "big" not in {n.job_id for _, r in runner.history for n in r.nominations}


def test_the_default_is_one_drain_and_eviction_holds_do_not_count():
    assert CycleConfig().max_drains == 1
    # an eviction's beneficiary holding GPUs is not a drain: a starving gang still drains beside it
    world = World().nodes(count=4, gpus=8).queue(name="q", quota={"H100": 32})
    for i in (2, 3, 4):
        world.running(name=f"r{i}", nodes=[f"n{i}"], gpus_per_task=8, duration=10 ** 6)
    world.running(name="victim", nodes=["n1"], gpus_per_task=8, duration=10 ** 6)
    held = (TaskPlacement(role="worker", index=0, node="n1", gpus=tuple(range(8))),)
    world.job(name="beneficiary", tasks=1, gpus_per_task=8, submit=0, reserved=held, priority=5)
    world.job(name="starving", tasks=1, gpus_per_task=8, submit=0)
    snapshot = world.snapshot(now=5000)
    jobs = tuple(replace(j, state="preempting", evicted_for="beneficiary") if j.id == "victim" else j
                 for j in snapshot.jobs)
    result = run_cycle(replace(snapshot, jobs=jobs), CycleConfig(starvation_seconds=60))
    assert {n.job_id for n in result.nominations} == {"beneficiary", "starving"}
    # the same hold with no eviction for it is a drain: the cap is reached and the starving gang waits
    result = run_cycle(snapshot, CycleConfig(starvation_seconds=60))
    assert {n.job_id for n in result.nominations} == {"beneficiary"}


def test_a_holder_whose_gpus_another_hold_took_is_told_so():
    """Two holds made before drains kept clear of each other (or an eviction's beneficiary on GPUs a drain waits
    for): the GPUs the other hold has taken are named as held for that job, not as in use by evicted jobs."""
    world = World().nodes(count=2, gpus=8).queue(name="q", quota={"H100": 16})
    world.running(name="r2", nodes=["n2"], gpus_per_task=8, duration=10 ** 6)
    mine = (TaskPlacement(role="worker", index=0, node="n1", gpus=tuple(range(8))),
            TaskPlacement(role="worker", index=1, node="n2", gpus=tuple(range(8))))
    theirs = (TaskPlacement(role="worker", index=0, node="n1", gpus=tuple(range(8))),)
    world.job(name="a-first", tasks=1, gpus_per_task=8, submit=0, reserved=theirs, priority=1)
    world.job(name="b-second", tasks=2, gpus_per_task=8, submit=1, reserved=mine)
    result = run_cycle(world.snapshot(now=100), CycleConfig())
    started = {b.job_id for b in result.bindings}
    assert started == {"a-first"}  # its hold was whole: it starts on it
    reason = result.pending["b-second"].message
    assert "16 GPUs reserved for it are still in use" in reason  # n1 (a-first now) and n2 (r2)
    # a-first started on n1 this cycle: its GPUs are in use by a running job now, not held
    assert "held for another reservation" not in reason


def test_the_reason_names_the_other_holder_while_both_wait():
    world = World().nodes(count=2, gpus=8).queue(name="q", quota={"H100": 16})
    world.running(name="r2", nodes=["n2"], gpus_per_task=4, duration=10 ** 6)
    both = (TaskPlacement(role="worker", index=0, node="n1", gpus=tuple(range(8))),
            TaskPlacement(role="worker", index=1, node="n2", gpus=tuple(range(8))))
    world.job(name="a-first", tasks=2, gpus_per_task=8, submit=0, reserved=both, priority=1)
    world.job(name="b-second", tasks=2, gpus_per_task=8, submit=1, reserved=both)
    result = run_cycle(world.snapshot(now=100), CycleConfig())
    assert not result.bindings
    first, second = result.pending["a-first"].message, result.pending["b-second"].message
    assert "4 GPUs reserved for it are still in use" in first and "another reservation" not in first
    assert "4 GPUs reserved for it are still in use" in second
    assert "12 GPUs reserved for it are held for another reservation (12 for job a-first)" in second
