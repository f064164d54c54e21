"""preferred_tier: the domain search starts at the job's preferred tier and falls back upward."""
from scheduler.core import CycleConfig
from scheduler.core.testing import World


def two_leaves(**job):
    """Racks (tier 1) of two 8-GPU nodes, two racks per leaf (tier 2), one spine (tier 3).
    Free GPUs: rack r1 16 (whole), r2 8, r3 12, r4 6: leaf-a 24, leaf-b 18."""
    world = World()
    for i in range(1, 9):
        world.node(name=f"n{i}", gpus=8, used={3: 8, 5: 4, 7: 2, 8: 8}.get(i, 0))
    for r in range(1, 5):
        world.domain(name=f"r{r}", tier=1, nodes=[f"n{2 * r - 1}", f"n{2 * r}"])
    world.domain(name="leaf-a", tier=2, children=["r1", "r2"]).domain(name="leaf-b", tier=2, children=["r3", "r4"])
    world.domain(name="spine", tier=3, children=["leaf-a", "leaf-b"])
    return world.queue(name="q", quota={"H100": 64}).job(name="j", queue="q", **job)


def test_preferred_tier_places_the_gang_best_fit_among_that_tiers_domains():
    """8 x 2 GPUs: without a preference the only rack with 16 free GPUs takes it (tier 1); preferring
    tier 2 puts it in the fullest leaf that holds it (leaf-b, across r3 and r4), and rack r1 stays whole."""
    plain = two_leaves(tasks=8, gpus_per_task=2, topology_mode="soft").cycle()
    (b,) = plain.bindings
    assert (b.domain, b.tier) == ("r1", 1) and plain.metrics["largest_runnable"][1] == 8
    preferred = two_leaves(tasks=8, gpus_per_task=2, topology_mode="soft", preferred_tier=2).cycle()
    (b,) = preferred.bindings
    assert (b.domain, b.tier) == ("leaf-b", 2)
    assert {t.node for t in b.tasks} <= {"n5", "n6", "n7", "n8"}
    assert preferred.metrics["largest_runnable"][1] == 16  # r1 is still a whole free NVLink domain


def test_preferred_tier_falls_back_upward_and_never_past_a_hard_cap():
    """11 x 2 GPUs fit no leaf (24 and 18 free, n4 half used): a soft job spreads over the spine, a hard
    job capped at tier 2 waits (it would fit an emptied leaf, so the wait is not terminal)."""
    soft = two_leaves(tasks=11, gpus_per_task=2, topology_mode="soft", preferred_tier=2)
    soft.node(name="n4", gpus=8, used=4, domain="r2")
    (b,) = soft.cycle().bindings
    assert (b.domain, b.tier) == ("spine", 3)
    hard = two_leaves(tasks=11, gpus_per_task=2, topology_mode="hard", highest_tier=2, preferred_tier=2)
    hard.node(name="n4", gpus=8, used=4, domain="r2")
    result = hard.cycle()
    assert not result.bindings and result.pending["j"].code == "no_domain" and not result.pending["j"].terminal


def test_preferred_lowest_tier_or_topology_off_changes_nothing():
    for job in (dict(preferred_tier=1), dict(preferred_tier=7)):  # the lowest tier; above every tier: ignored
        a = two_leaves(tasks=8, gpus_per_task=2, topology_mode="soft", **job).cycle()
        b = two_leaves(tasks=8, gpus_per_task=2, topology_mode="soft").cycle()
        assert a.bindings == b.bindings
    off = CycleConfig(topology=False)
    a = two_leaves(tasks=8, gpus_per_task=2, preferred_tier=2).cycle(config=off)
    b = two_leaves(tasks=8, gpus_per_task=2).cycle(config=off)
    assert a.bindings == b.bindings
