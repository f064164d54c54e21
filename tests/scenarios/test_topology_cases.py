"""Topology and fragmentation cases of ../shared/cases/, restated with the test builders."""
from collections import Counter

import pytest

from scheduler.core.testing import ScenarioRunner, World


def rack_of(node: str) -> str:
    return node.split("-")[0]


def test_fragmentation_small_jobs_scatter():
    """fragmentation-small-jobs-scatter.yaml: 200 one-GPU jobs pack into 3 NVL72 domains, then an
    18 x 4 GPU hard tier-1 gang starts at its first cycle in a completely free domain."""
    world = World().racks(count=8, nodes_per_rack=18, gpus=4, flavor="GB200", tier=1).queue(name="q", quota={"GB200": 576})
    for i in range(200):
        world.job(name=f"small-{i + 1}", submit=i)
    world.job(name="rack-job", tasks=18, gpus_per_task=4, submit=300, topology_mode="hard", highest_tier=1)
    runner = ScenarioRunner(world)
    for now in range(0, 300):
        runner.step(now)
        racks = Counter(rack_of(t.node) for j in runner.running.values() for t in j.placement)
        # no small job opens a new domain while a partly used one has room
        partly_used = [r for r, used in racks.items() if used < 72]
        assert len(partly_used) <= 1, racks
    racks = Counter(rack_of(t.node) for j in runner.running.values() for t in j.placement)
    assert len(racks) <= 3
    metrics = runner.history[-1][1].metrics
    complete_free = 8 - len(racks)
    assert complete_free >= 4
    runner.step(300)
    assert runner.started["rack-job"] == 300
    rack_job = runner.running["rack-job"]
    assert len({rack_of(t.node) for t in rack_job.placement}) == 1
    assert metrics["largest_runnable"][1] == 72


def topology_world(**job):
    return (World()
            .nodes(names=["r1n1", "r1n2", "r1n3", "r1n4", "r2n1", "r2n2", "r2n3", "r2n4"], gpus=8)
            .domain(name="rack-1", tier=2, nodes=["r1n1", "r1n2", "r1n3", "r1n4"])
            .domain(name="rack-2", tier=2, nodes=["r2n1", "r2n2", "r2n3", "r2n4"])
            .domain(name="zone", tier=3, children=["rack-1", "rack-2"])
            .queue(name="q", quota={"H100": 64})
            .job(name="g", tasks=4, gpus_per_task=8, min_available=4, **job))


@pytest.mark.parametrize("required, preferred", [(2, 2), (3, 2), (2, None), (None, 2)])
def test_topology_required_equals_preferred_runs_in_one_rack(required, preferred):
    """topology-required-equals-preferred.yaml, the rows that must run inside one rack."""
    mode = "hard" if required is not None else "soft"
    result = topology_world(topology_mode=mode, highest_tier=required, preferred_tier=preferred).cycle()
    (binding,) = result.bindings
    assert binding.tier == 2
    assert len({t.node[:2] for t in binding.tasks}) == 1


def test_topology_soft_spreads_only_when_it_must():
    """topology-soft-spreads.yaml: leaf-1 is the only leaf with two free nodes, so the pair goes there."""
    world = (World().nodes(names=["n1", "n2", "n3", "n4", "n5", "n6"], gpus=8)
             .node(name="n4", gpus=8, used=8).node(name="n6", gpus=8, used=8)
             .domain(name="leaf-1", tier=2, nodes=["n1", "n2"])
             .domain(name="leaf-2", tier=2, nodes=["n3", "n4"])
             .domain(name="leaf-3", tier=2, nodes=["n5", "n6"])
             .domain(name="spine", tier=3, children=["leaf-1", "leaf-2", "leaf-3"])
             .queue(name="q", quota={"H100": 48})
             .job(name="pair", tasks=2, gpus_per_task=8, topology_mode="soft", highest_tier=2))
    (binding,) = world.cycle().bindings
    assert sorted(t.node for t in binding.tasks) == ["n1", "n2"]
    assert binding.domain == "leaf-1"


def test_topology_soft_spreads_across_leaves_when_no_leaf_fits():
    world = (World().nodes(names=["n1", "n2", "n3", "n4"], gpus=8)
             .node(name="n2", gpus=8, used=8).node(name="n4", gpus=8, used=8)
             .domain(name="leaf-1", tier=2, nodes=["n1", "n2"]).domain(name="leaf-2", tier=2, nodes=["n3", "n4"])
             .domain(name="spine", tier=3, children=["leaf-1", "leaf-2"])
             .job(name="soft", tasks=2, gpus_per_task=8, topology_mode="soft", highest_tier=2)
             .job(name="hard", tasks=2, gpus_per_task=8, topology_mode="hard", highest_tier=2, submit=1))
    result = world.cycle()
    assert [b.job_id for b in result.bindings] == ["soft"]
    assert result.bindings[0].tier == 3
    world2 = (World().nodes(names=["n1", "n2", "n3", "n4"], gpus=8)
              .node(name="n2", gpus=8, used=8).node(name="n4", gpus=8, used=8)
              .domain(name="leaf-1", tier=2, nodes=["n1", "n2"]).domain(name="leaf-2", tier=2, nodes=["n3", "n4"])
              .domain(name="spine", tier=3, children=["leaf-1", "leaf-2"])
              .job(name="hard", tasks=2, gpus_per_task=8, topology_mode="hard", highest_tier=2))
    result2 = world2.cycle()
    assert result2.bindings == []
    assert "tier-2" in result2.pending["hard"].message and not result2.pending["hard"].terminal
