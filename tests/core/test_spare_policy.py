"""Hot spares in the engine (scheduler/core/spares.py): only interruptible jobs are placed on a spare, after
everything else; a failed gang's restart takes a spare and stops its interruptible occupants at once."""
from __future__ import annotations

from dataclasses import replace

from scheduler.core.snapshot import TaskPlacement
from scheduler.core.spares import plan_restart
from scheduler.core.testing import World, check_result


def _world() -> World:
    """Two racks of one ordinary 8-GPU node each plus one spare per rack; the ordinary nodes are full."""
    return (World()
            .node(name="a1", gpus=8, domain="rackA").node(name="a-spare", gpus=8, domain="rackA", spare=True)
            .node(name="b1", gpus=8, domain="rackB").node(name="b-spare", gpus=8, domain="rackB", spare=True)
            .domain(name="rackA", tier=1).domain(name="rackB", tier=1)
            .domain(name="spine", tier=2, children=["rackA", "rackB"])
            .queue(name="q", quota={"H100": 32})
            .running(name="full-a", nodes=["a1"], gpus_per_task=8)
            .running(name="full-b", nodes=["b1"], gpus_per_task=8))


def test_a_job_that_may_not_be_stopped_at_once_is_never_placed_on_a_spare():
    world = _world().job(name="train", gpus_per_task=8, preemptible=True)
    snap = world.snapshot()
    result = world.cycle()
    check_result(snap, result)
    assert result.bindings == []
    assert "train" in result.pending


def test_an_interruptible_job_runs_on_a_spare_and_spare_gpus_stay_out_of_the_metrics():
    world = _world().job(name="scavenger", tasks=2, gpus_per_task=4, interruptible=True)
    snap = world.snapshot()
    result = world.cycle()
    check_result(snap, result)
    [b] = result.bindings
    assert b.job_id == "scavenger" and b.rule == "on_spare"
    assert {t.node for t in b.tasks} <= {"a-spare", "b-spare"} and len({t.node for t in b.tasks}) == 1
    assert "scavenger" not in result.pending
    assert result.metrics["spare_bindings"] == 1
    assert result.metrics["schedulable_gpus"] == 16  # the spares are not the cluster's schedulable capacity


def test_an_interruptible_job_prefers_ordinary_nodes_and_a_spare_takes_no_other_work():
    world = (World().node(name="n1", gpus=8).node(name="s1", gpus=8, spare=True).queue(name="q", quota={"H100": 16})
             .job(name="big", gpus_per_task=8, submit=0)
             .job(name="small", gpus_per_task=4, submit=1, interruptible=True)
             .job(name="other", gpus_per_task=4, submit=2))
    snap = world.snapshot()
    result = world.cycle()
    check_result(snap, result)
    where = {b.job_id: ({t.node for t in b.tasks}, b.rule) for b in result.bindings}
    assert where == {"big": ({"n1"}, "allocate"), "small": ({"s1"}, "on_spare")}
    assert "other" in result.pending  # 4 GPUs of s1 are free, but it may not be stopped at once


def test_no_spares_no_change():
    base = (World().nodes(count=2, gpus=8).queue(name="q", quota={"H100": 16})
            .job(name="j1", gpus_per_task=8, interruptible=True).job(name="j2", tasks=2, gpus_per_task=8, submit=1))
    result = base.cycle()
    assert [(b.job_id, b.rule) for b in result.bindings] == [("j1", "allocate")]
    assert "spare_bindings" not in result.metrics and "spares" not in result.timings


def _placement(node: str) -> tuple[TaskPlacement, ...]:
    return (TaskPlacement("worker", 0, node, tuple(range(8))), TaskPlacement("worker", 1, "b1", tuple(range(8))))


def test_recovery_takes_the_spare_of_the_failed_nodes_rack_and_stops_its_occupant():
    world = (World()
             .node(name="a1", gpus=8, domain="rackA").node(name="a-spare", gpus=8, domain="rackA", spare=True)
             .node(name="b1", gpus=8, domain="rackB").node(name="b-spare", gpus=8, domain="rackB", spare=True)
             .queue(name="q", quota={"H100": 32})
             .running(name="scav", nodes=["a-spare"], gpus_per_task=2, interruptible=True))
    snap = world.snapshot()
    a1 = next(n for n in snap.nodes if n.name == "a1")
    nodes = [replace(a1, state="not_ready") if n.name == "a1" else n for n in snap.nodes]
    rack = {"a1": "rackA", "a-spare": "rackA", "b1": "rackB", "b-spare": "rackB"}
    running = [j for j in snap.jobs if j.state == "running"]
    plan = plan_restart("gang", _placement("a1"), {"a1"}, nodes, running, rack)
    assert plan is not None
    assert dict(plan.swap) == {"a1": "a-spare"} and plan.stop == ("scav",)
    assert [(t.node, t.gpus) for t in plan.tasks] == [("a-spare", tuple(range(8))), ("b1", tuple(range(8)))]
    assert plan.binding.rule == "spare" and plan.binding.job_id == "gang"
    # the idle spare of the other rack comes after the failed node's own rack, occupied or not
    other = plan_restart("gang", _placement("a1"), {"a1"}, [n for n in nodes if n.name != "a-spare"], running, rack)
    assert dict(other.swap) == {"a1": "b-spare"} and other.stop == ()


def test_recovery_never_stops_a_job_that_may_not_be_stopped_at_once():
    world = (World().node(name="a1", gpus=8, state="not_ready").node(name="b1", gpus=8)
             .node(name="s1", gpus=8, spare=True).queue(name="q")
             .running(name="precious", nodes=["s1"], gpus_per_task=1))  # placed before the node was a spare
    snap = world.snapshot()
    running = [j for j in snap.jobs if j.state == "running"]
    assert plan_restart("gang", _placement("a1"), {"a1"}, snap.nodes, running, {}) is None
    # a kept node that is down or has a GPU taken: no restart either
    kept_busy = [replace(n, used=frozenset({3})) if n.name == "b1" else n for n in snap.nodes]
    idle = [j for j in running if j.id != "precious"]
    free_spare = [replace(n, used=frozenset()) if n.name == "s1" else n for n in kept_busy]
    assert plan_restart("gang", _placement("a1"), {"a1"}, free_spare, idle, {}) is None
    ok = [replace(n, used=frozenset()) if n.name == "s1" else n for n in snap.nodes]
    assert dict(plan_restart("gang", _placement("a1"), {"a1"}, ok, idle, {}).swap) == {"a1": "s1"}
    # no failed node in the gang's placement: nothing to do
    assert plan_restart("gang", _placement("a1"), {"zz"}, ok, idle, {}) is None
