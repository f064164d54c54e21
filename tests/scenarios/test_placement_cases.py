"""Placement cases of ../shared/cases/ (second round, issue 11): nodes without a domain, NUMA, sub-groups,
heterogeneous jobs and held GPUs in the metrics, restated with the test builders, each with a variant."""
from collections import defaultdict

import pytest

from scheduler.core import run_cycle
from scheduler.core.domain_tree import node_domain
from scheduler.core.plugins.feasibility import never_fits
from scheduler.core.testing import ScenarioRunner, World, check_result, role


# -- topology-nodes-without-domain.yaml ------------------------------------------------------------------
def test_topology_nodes_without_domain():
    """topology-nodes-without-domain.yaml: s1-s4 land on n3 / n4 (no domain), rack-job starts at t=100 on
    n1 and n2, the only tier-1 domain."""
    world = (World().nodes(names=["n1", "n2", "n3", "n4"], gpus=8)
             .domain(name="r1", tier=1, nodes=["n1", "n2"])
             .queue(name="q", quota={"H100": 32}))
    for i in range(1, 5):
        world.job(name=f"s{i}", submit=0)
    world.job(name="rack-job", tasks=2, gpus_per_task=8, topology_mode="hard", highest_tier=1, submit=100)
    runner = ScenarioRunner(world).run(until=100, every=10)
    for i in range(1, 5):
        assert {t.node for t in runner.running[f"s{i}"].placement} <= {"n3", "n4"}
    assert runner.started["rack-job"] == 100
    assert sorted(t.node for t in runner.running["rack-job"].placement) == ["n1", "n2"]


def test_topology_nodes_without_domain_are_tier1_domains_each():
    """Variant: a two-tier tree (racks under a leaf) plus two 4-GPU nodes without a domain. 2-GPU jobs go to
    the domainless nodes (each its own tier-1 domain, named node:<name>); a hard tier-1 gang of two nodes
    never spans the two domainless nodes, even when they are all that is free."""
    world = (World().nodes(names=["a1", "a2"], gpus=8).nodes(names=["x1", "x2"], gpus=4)
             .domain(name="rack-a", tier=1, nodes=["a1", "a2"]).domain(name="leaf", tier=2, children=["rack-a"])
             .queue(name="q", quota={"H100": 24}))
    for i in range(4):
        world.job(name=f"small{i}", gpus_per_task=2, submit=i)
    result = world.cycle()
    check_result(world.snapshot(), result)
    assert {b.domain for b in result.bindings} == {node_domain("x1"), node_domain("x2")}
    assert all(b.tier == 1 for b in result.bindings)
    # the rack busy, the domainless nodes free: a hard tier-1 two-node gang waits, a soft one may spread
    world = (World().nodes(names=["a1", "a2"], gpus=8, used=8).nodes(names=["x1", "x2"], gpus=4)
             .domain(name="rack-a", tier=1, nodes=["a1", "a2"]).domain(name="leaf", tier=2, children=["rack-a"])
             .queue(name="q", quota={"H100": 24})
             .job(name="hard", tasks=2, gpus_per_task=4, topology_mode="hard", highest_tier=1)
             .job(name="soft", tasks=2, gpus_per_task=4, topology_mode="soft", highest_tier=1, submit=1))
    result = world.cycle()
    assert [b.job_id for b in result.bindings] == ["soft"]
    assert result.pending["hard"].code == "no_domain"


# -- numa-single-zone-placement.yaml ---------------------------------------------------------------------
def numa_world(*, nodes=("n1", "n2"), numa="prefer", racks=False):
    world = World()
    for n in nodes:
        world.node(name=n, gpus=8, numa=[0, 0, 0, 0, 1, 1, 1, 1])
    if racks:
        for n in nodes:
            world.domain(name=f"rack-{n}", tier=1, nodes=[n])
        world.domain(name="spine", tier=2, children=[f"rack-{n}" for n in nodes])
    world.queue(name="q", quota={"H100": 16})
    world.running(name="one-s0", nodes=["n1"], gpus_per_task=1, gpus=[(0,)])
    world.running(name="one-s1", nodes=["n1"], gpus_per_task=1, gpus=[(4,)])
    return world.job(name="big4", gpus_per_task=4, submit=1, numa=numa)


def _socket(world, binding):
    numa = {n.name: n.gpu_numa for n in world.node_infos}
    return {numa[t.node][g] for t in binding.tasks for g in t.gpus}


@pytest.mark.parametrize("racks", [False, True])
def test_numa_single_zone_placement(racks):
    """numa-single-zone-placement.yaml: big4 runs on n2 inside one socket (GPUs 0-3 or 4-7), also when n1
    and n2 are in different tier-1 domains and n1's is the better fit by free GPUs (variant)."""
    world = numa_world(racks=racks)
    result = world.cycle(now=1)
    check_result(world.snapshot(now=1), result)
    (binding,) = result.bindings
    assert [t.node for t in binding.tasks] == ["n2"]
    assert len(_socket(world, binding)) == 1


def test_numa_single_policy_waits_without_a_whole_socket():
    """numa-single-zone-placement.yaml, second half: without n2, under numa: single, big4 stays pending (the
    reason names the NUMA rule); under the default (prefer) it runs across n1's sockets."""
    result = numa_world(nodes=("n1",), numa="single").cycle(now=1)
    assert not result.bindings
    assert result.pending["big4"].code == "no_packing" and "NUMA" in result.pending["big4"].message
    (binding,) = numa_world(nodes=("n1",)).cycle(now=1).bindings
    assert sorted(g for t in binding.tasks for g in t.gpus) == [1, 2, 3, 5]


def test_numa_single_task_larger_than_any_numa_node_never_fits():
    """Variant: a 6-GPU task under numa: single can never fit 4-GPU NUMA nodes: refused at once (terminal),
    while the same job with the default policy fits."""
    nodes = World().node(name="n1", gpus=8, numa=[0, 0, 0, 0, 1, 1, 1, 1]).node_infos
    why = never_fits(nodes, (), [role(gpus_per_task=6)], numa="single")
    assert why is not None and why.code == "never_fits_numa"
    assert never_fits(nodes, (), [role(gpus_per_task=6)]) is None


# -- sub-groups (DESIGN section 4; api-subgroup-tier-limit-ignored.yaml's engine half) ------------------
def three_racks(used):
    world = World()
    for r in range(1, 4):
        world.domain(name=f"t1-{r}", tier=1)
    world.domain(name="spine", tier=2, children=["t1-1", "t1-2", "t1-3"])
    for r in range(1, 4):
        world.node(name=f"n{r}", gpus=2, used=used, domain=f"t1-{r}")
    return world.queue(name="q", quota={"H100": 6})


def test_subgroup_tier_limit_honoured():
    """api-subgroup-tier-limit-ignored.yaml (engine): a role whose 2 tasks must share a tier-1 domain waits
    while each tier-1 domain has one free GPU; without the sub-group it runs across the spine."""
    grouped = three_racks(used=1).job(name="tp", roles=[role(name="tp", tasks=2, group_size=2,
                                                             group_highest_tier=1)])
    result = grouped.cycle()
    assert not result.bindings and result.pending["tp"].code == "no_packing"
    assert "groups of 2" in result.pending["tp"].message
    (binding,) = three_racks(used=1).job(name="tp", roles=[role(name="tp", tasks=2)]).cycle().bindings
    assert binding.domain == "spine"
    # soft: prefers whole groups, spreads when none fits
    soft = three_racks(used=1).job(name="tp", roles=[role(name="tp", tasks=2, group_size=2, group_highest_tier=1,
                                                          group_mode="soft")])
    assert [b.job_id for b in soft.cycle().bindings] == ["tp"]


def test_subgroups_each_inside_one_rack_while_job_spans_racks():
    """Variant: 4 tensor-parallel groups of 2 tasks x 2 GPUs over three racks of two 4-GPU nodes where each
    rack has 4 or 6 GPUs free: every group lands inside one rack, the job spans racks; a group of 3 tasks
    fits only one rack, so two such groups wait."""
    def world():
        w = World()
        for r, used in ((1, (0, 4)), (2, (4, 0)), (3, (2, 0))):
            for i, u in enumerate(used, start=1):
                w.node(name=f"r{r}n{i}", gpus=4, used=u)
            w.domain(name=f"rack{r}", tier=1, nodes=[f"r{r}n1", f"r{r}n2"])
        return w.domain(name="spine", tier=2, children=["rack1", "rack2", "rack3"]).queue(name="q", quota={"H100": 24})

    w = world().job(name="tp", roles=[role(name="tp", tasks=6, gpus_per_task=2, group_size=2, group_highest_tier=1)])
    result = w.cycle()
    check_result(w.snapshot(), result)
    (binding,) = result.bindings
    racks = defaultdict(set)
    for t in binding.tasks:
        racks[t.index // 2].add(t.node[:2])
    assert len(racks) == 3 and all(len(r) == 1 for r in racks.values())
    assert binding.domain == "spine"
    w = world().job(name="tp3", roles=[role(name="tp", tasks=6, gpus_per_task=2, group_size=3, group_highest_tier=1)])
    result = w.cycle()
    assert not result.bindings and result.pending["tp3"].code == "no_packing"


def test_subgroup_larger_than_every_domain_never_fits():
    """A group that no domain of its tier can ever hold is refused as never fitting, not left waiting."""
    w = three_racks(used=0)
    why = never_fits(w.node_infos, w.domain_infos, [role(name="tp", tasks=4, group_size=4, group_highest_tier=1)])
    assert why is not None and why.code == "never_fits_group"
    assert never_fits(w.node_infos, w.domain_infos, [role(name="tp", tasks=4, group_size=2, group_highest_tier=1)]) is None


# -- heterogeneous jobs ------------------------------------------------------------------------------------
def hetero_world(a100_used=0):
    return (World().nodes(names=["h1", "h2"], gpus=8, flavor="H100")
            .nodes(names=["a1", "a2"], gpus=8, flavor="A100", used=a100_used)
            .queue(name="q", quota={"H100": 16, "A100": 16}))


def test_heterogeneous_job_each_role_on_its_flavor():
    """An RL job: trainer on H100, rollout workers on A100. Both flavors exist, so it is no "no node of
    flavor" refusal; it starts with each role on its own flavor."""
    roles = [role(name="trainer", gpus_per_task=8, flavors=["H100"]),
             role(name="rollout", tasks=4, gpus_per_task=4, flavors=["A100"])]
    w = hetero_world().job(name="rl", roles=roles)
    assert never_fits(w.node_infos, (), roles) is None
    result = w.cycle()
    check_result(w.snapshot(), result)
    (binding,) = result.bindings
    flavor = {n.name: n.flavor for n in w.node_infos}
    assert {flavor[t.node] for t in binding.tasks if t.role == "trainer"} == {"H100"}
    assert {flavor[t.node] for t in binding.tasks if t.role == "rollout"} == {"A100"}
    assert len(binding.tasks) == 5


def test_heterogeneous_job_gang_holds_across_roles():
    """Variant: the A100s are busy, so the rollout role cannot reach its minimum: nothing of the job is
    placed (the trainer's H100s stay free for others), and a role on a flavor the cluster lacks is refused
    naming the role."""
    roles = [role(name="trainer", gpus_per_task=8, flavors=["H100"]),
             role(name="rollout", tasks=2, gpus_per_task=4, flavors=["A100"])]
    w = hetero_world(a100_used=6).job(name="rl", roles=roles).job(name="other", gpus_per_task=8, flavors=["H100"],
                                                                   submit=1)
    result = w.cycle()
    check_result(w.snapshot(), result)
    assert [b.job_id for b in result.bindings] == ["other"]
    assert result.pending["rl"].code in {"insufficient_gpus", "no_packing", "no_domain"}
    why = never_fits(w.node_infos, (), [roles[0], role(name="rollout", gpus_per_task=4, flavors=["B200"])])
    assert why is not None and why.code == "never_fits_flavor" and "rollout" in why.message


# -- metrics-held-gpus-not-allocated.yaml -----------------------------------------------------------------
def test_metrics_held_gpus_not_allocated():
    """metrics-held-gpus-not-allocated.yaml: r6 runs on 6 of 8 GPUs, big (8 GPUs) gets a reservation
    holding the 2 free GPUs: allocated 6, rate 0.75, held 2, free 0."""
    w = (World().node(name="n1", gpus=8).queue(name="q", quota={"H100": 8})
         .running(name="r6", nodes=["n1"], gpus_per_task=6, time_limit=600)
         .job(name="big", gpus_per_task=8, submit=0))
    m = w.cycle().metrics
    assert (m["allocated_gpus"], m["held_gpus"], m["free_gpus"], m["schedulable_gpus"]) == (6, 2, 0, 8)
    assert m["allocation_rate"] == pytest.approx(0.75)


def test_metrics_nomination_hold_not_allocated():
    """Variant: an eviction beneficiary's hold from an earlier cycle (JobInfo.reserved) on a node where the
    victim still runs on 4 GPUs: the 4 free GPUs are held, not allocated."""
    from scheduler.core import TaskPlacement

    w = (World().node(name="n1", gpus=8).node(name="n2", gpus=8).queue(name="q", quota={"H100": 16})
         .running(name="victim", nodes=["n1"], gpus_per_task=4)
         .job(name="ben", gpus_per_task=8, reserved=[TaskPlacement(role="worker", index=0, node="n1",
                                                                   gpus=tuple(range(8)))])
         .running(name="filler", nodes=["n2"], gpus_per_task=8))
    result = run_cycle(w.snapshot())
    m = result.metrics
    assert (m["allocated_gpus"], m["held_gpus"], m["free_gpus"]) == (12, 4, 0)
    assert m["allocation_rate"] == pytest.approx(12 / 16)


def test_topology_one_gpu_jobs_fill_the_tightest_node_across_domains():
    """Variant: a rack of two 4-GPU nodes (named to sort first) and two domainless 8-GPU nodes (each a
    tier-1 domain of its own) have the same free GPUs per domain. A one-GPU job takes the node with the
    fewest free GPUs that holds it across the domains (issue 16: the node, not the domain's aggregate,
    is the best fit), so the 12 one-GPU jobs fill a1, a2 and then one 8-GPU node, and a whole 8-GPU node
    stays free: a hard tier-1 gang of 2 x 4 GPUs starts on it at once. (Before issue 16 the domains tied
    on aggregate free GPUs and the jobs went to z1 and z2, leaving the rack whole for the gang.)"""
    world = (World().nodes(names=["a1", "a2"], gpus=4).nodes(names=["z1", "z2"], gpus=8)
             .domain(name="a-rack", tier=1, nodes=["a1", "a2"]).queue(name="q", quota={"H100": 24}))
    for i in range(12):
        world.job(name=f"s{i}", submit=0)
    world.job(name="gang", tasks=2, gpus_per_task=4, topology_mode="hard", highest_tier=1, submit=10)
    runner = ScenarioRunner(world).run(until=10, every=5)
    on = [t.node for i in range(12) for t in runner.running[f"s{i}"].placement]
    assert sorted(on) == ["a1"] * 4 + ["a2"] * 4 + ["z1"] * 4
    assert runner.started["gang"] == 10
    assert {t.node for t in runner.running["gang"].placement} == {"z2"}
