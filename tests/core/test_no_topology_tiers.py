"""A cluster with no domains at all (the local mode, openb): each node is a tier-1 domain of its own ("node:<name>")
under the synthetic root "cluster" at tier 2 (domain_tree.no_topology). Tier 1 serves the jobs that name it and the
metrics; a job that names no tier is placed over the whole cluster as when the cluster was one domain, and its
Binding names the lowest domain holding its tasks (new-user trial 23, F2: the engine said "cluster (tier 2)" for
every job, completeness counted one domain, while the API and the map showed node:<name> tier 1)."""
from scheduler.core import CycleConfig, run_cycle
from scheduler.core.domain_tree import build_tree
from scheduler.core.testing import World, check_result


def local(**job):
    """Two 4-GPU nodes without a domain; node a has 1 GPU used, so it is the tighter one."""
    world = World().node(name="a", gpus=4, used=1).node(name="b", gpus=4).queue(name="q", quota={"H100": 8})
    return world.job(name="j", queue="q", **job) if job else world


def test_the_tree_of_a_cluster_without_domains_is_nodes_at_tier_1_under_the_cluster_at_tier_2():
    tree = build_tree(local().snapshot())
    assert tree.no_topology and tree.tier_levels == [1, 2]
    assert {tree.names[d] for d in tree.by_tier[1]} == {"node:a", "node:b"}
    assert (tree.names[tree.root], tree.top_tier) == ("cluster", 2)
    with_domain = World().node(name="a", gpus=4, domain="r").node(name="b", gpus=4).domain(name="r", tier=1, nodes=["a"])
    assert not build_tree(with_domain.snapshot()).no_topology  # a topology cluster's domainless node: as before


def test_a_job_naming_no_tier_lands_where_it_did_and_is_named_by_its_node():
    """One 2-GPU task: the tightest node (a, 3 free) as before; the Binding says node:a (tier 1), not the root."""
    world = local(tasks=1, gpus_per_task=2)
    result = world.cycle()
    check_result(world.snapshot(), result)
    (b,) = result.bindings
    assert {t.node for t in b.tasks} == {"a"}
    assert (b.domain, b.tier) == ("node:a", 1)


def test_a_gang_over_two_nodes_is_named_by_the_cluster():
    world = local(tasks=2, gpus_per_task=3)
    (b,) = world.cycle().bindings
    assert {t.node for t in b.tasks} == {"a", "b"} and (b.domain, b.tier) == ("cluster", 2)


def test_highest_tier_1_keeps_the_gang_inside_one_node():
    """2 x 2 GPUs, hard tier 1: inside one node (b, the only one with 4 free); 2 x 3 GPUs cannot be, and waits."""
    fits = local(tasks=2, gpus_per_task=2, topology_mode="hard", highest_tier=1)
    (b,) = fits.cycle().bindings
    assert {t.node for t in b.tasks} == {"b"} and (b.domain, b.tier) == ("node:b", 1)
    too_big = local(tasks=2, gpus_per_task=3, topology_mode="hard", highest_tier=1).cycle()
    assert not too_big.bindings and "j" in too_big.pending
    spread = local(tasks=2, gpus_per_task=3, topology_mode="hard", highest_tier=2).cycle()
    assert len(spread.bindings) == 1


def test_preferred_tier_1_tries_one_node_first():
    """2 x 1 GPU: with no tier the search is over the whole cluster; preferring tier 1 keeps both in one node."""
    (b,) = local(tasks=2, gpus_per_task=1, topology_mode="soft", preferred_tier=1).cycle().bindings
    assert len({t.node for t in b.tasks}) == 1 and b.tier == 1


def test_domain_completeness_counts_each_node():
    """Node a all used, node b all free: both tier-1 domains are complete (it was 0: one half-used domain)."""
    world = World().node(name="a", gpus=4, used=4).node(name="b", gpus=4).queue(name="q", quota={"H100": 8})
    metrics = run_cycle(world.snapshot(), CycleConfig()).metrics
    assert metrics["domain_completeness"] == 1.0
    assert metrics["largest_runnable"] == {1: 4, 2: 4} and metrics["top_tier"] == 2
