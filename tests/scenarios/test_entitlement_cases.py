"""Entitlement cases of ../shared/cases/ (issue 11, quota / reclaim half), restated with the test builders,
each with a variant of the same kind (docs/quotas.md states the rules)."""
import pytest

from scheduler.core.testing import ScenarioRunner, World


def queue_gpus(runner, queue):
    return sum(len(t.gpus) for j in runner.running.values() if j.queue == queue for t in j.placement)


@pytest.mark.parametrize("org_quota", [{"H100": 8}, None, {"H100": 4}])
def test_reclaim_sibling_under_full_parent(org_quota):
    """reclaim-sibling-under-full-parent.yaml: R (below quota) takes 4 GPUs back from its over-quota sibling
    B although their parent org is at (or, variant: with quota 4, over) its quota because of B; also with
    no quota row on org. org's usage is the same before and after the transfer."""
    world = (World().node(name="n1", gpus=8)
             .queue(name="root", quota={"H100": 8}, limit={"H100": 8})
             .queue(name="org", parent="root", quota=org_quota)
             .queue(name="R", parent="org", quota={"H100": 8})
             .queue(name="B", parent="org", quota={"H100": 0}, limit={"H100": 8}))
    for i in range(4):
        world.running(name=f"b-{i}", queue="B", nodes=["n1"], gpus_per_task=2)
    world.job(name="r-job", queue="R", tasks=1, gpus_per_task=4, submit=10)
    runner = ScenarioRunner(world, grace=30).run(until=100, every=10)
    assert len(runner.evictions) == 2
    assert all(e.rule == "reclaim" and e.beneficiary == "r-job" for e in runner.evictions)
    assert runner.started["r-job"] == 40  # evicted at 10, 30 s grace
    decision = next(r for _, r in runner.history if r.decisions).decisions[0]
    assert decision["usage_before"].get("org", {"H100": 8}) == decision["usage_after"].get("org", {"H100": 8})
    assert queue_gpus(runner, "R") == 4 and queue_gpus(runner, "B") == 4


def test_reclaim_sibling_under_full_parent_cousins_untouched():
    """Variant: two branches under a full root; a child of branch x reclaims from its own over-quota sibling,
    never from the other branch y (which is within its quota)."""
    world = (World().nodes(count=2, gpus=8)
             .queue(name="root", quota={"H100": 16})
             .queue(name="x", parent="root", quota={"H100": 8})
             .queue(name="x1", parent="x", quota={"H100": 8})
             .queue(name="x2", parent="x", quota={"H100": 0})
             .queue(name="y", parent="root", quota={"H100": 8}))
    world.running(name="y-load", queue="y", nodes=["n2"], gpus_per_task=8)
    world.running(name="x2-load", queue="x2", nodes=["n1", "n1", "n1", "n1"], gpus_per_task=2, min_available=1)
    world.job(name="x1-job", queue="x1", tasks=1, gpus_per_task=6, submit=5)
    runner = ScenarioRunner(world, grace=10).run(until=60, every=5)
    assert {e.job_id for e in runner.evictions} == {"x2-load"}
    assert sum(e.gpus for e in runner.evictions) == 6
    assert "y-load" in runner.running and runner.started["x1-job"] == 15


@pytest.mark.parametrize("quota_on_child", [False, True])
def test_reclaim_zero_quota_child_under_parent(quota_on_child):
    """reclaim-zero-quota-child-under-parent.yaml: Z1 has no quota of its own and lives on P1's; it reclaims
    P1's quota from the other branch (P2/Y), exactly as with the quota on Z1 itself (the control)."""
    world = (World().node(name="n1", gpus=8)
             .queue(name="P1", quota={"H100": 8})
             .queue(name="Z1", parent="P1", quota={"H100": 8 if quota_on_child else 0})
             .queue(name="P2", quota={"H100": 0})
             .queue(name="Y", parent="P2", quota={"H100": 0})
             .running(name="y-job", queue="Y", nodes=["n1"], gpus_per_task=8)
             .job(name="z-job", queue="Z1", tasks=1, gpus_per_task=8, submit=10))
    runner = ScenarioRunner(world, grace=30).run(until=100, every=10)
    assert [(e.job_id, e.beneficiary, e.rule) for e in runner.evictions] == [("y-job", "z-job", "reclaim")]
    assert runner.started["z-job"] == 40


def test_reclaim_zero_quota_children_share_parent_unassigned():
    """Variant: P1 (quota 8) has a child with quota 2 and a child with none (lives on P1's 6 unassigned GPUs);
    the zero-quota child reclaims 6 from another top-level queue, not more; then a second job of the same
    child waits (P1 is at its 8 once the quota-2 child runs its 2)."""
    world = (World().nodes(count=2, gpus=8)
             .queue(name="P1", quota={"H100": 8})
             .queue(name="Q2", parent="P1", quota={"H100": 2})
             .queue(name="Z", parent="P1")  # no quota row at all
             .queue(name="other", quota={"H100": 8})
             .running(name="q2-job", queue="Q2", nodes=["n1"], gpus_per_task=2)
             .running(name="big", queue="other", nodes=["n1", "n2", "n2", "n2", "n2"], gpus_per_task=2,
                      min_available=1))
    world.running(name="other-2", queue="other", nodes=["n1", "n1"], gpus_per_task=2)
    world.job(name="z-job", queue="Z", tasks=3, gpus_per_task=2, min_available=1, submit=5)
    world.job(name="z-more", queue="Z", tasks=1, gpus_per_task=2, submit=30)
    runner = ScenarioRunner(world, grace=0).run(until=100, every=5)
    assert sum(e.gpus for e in runner.evictions) == 6
    assert len(runner.running["z-job"].placement) == 3
    assert "z-more" in runner.pending
    assert queue_gpus(runner, "other") == 8


@pytest.mark.parametrize("a2_submit", [20, 60])
def test_reclaim_beyond_quota_while_victims_drain(a2_submit):
    """reclaim-beyond-quota-while-victims-drain.yaml: GPUs held for A1 count as a's usage, so A2 (arriving
    while A1's victims drain, or after A1 started: the control) never reclaims past a's quota of 16."""
    world = (World().nodes(count=4, gpus=8)
             .queue(name="root", quota={"H100": 32}, limit={"H100": 32})
             .queue(name="a", parent="root", quota={"H100": 16})
             .queue(name="b", parent="root", quota={"H100": 0}, limit={"H100": 32}))
    for i in range(1, 5):
        world.running(name=f"b{i}", queue="b", nodes=[f"n{i}"], gpus_per_task=8)
    world.job(name="A1", queue="a", tasks=2, gpus_per_task=8, submit=10)
    world.job(name="A2", queue="a", tasks=1, gpus_per_task=4, submit=a2_submit)
    runner = ScenarioRunner(world, grace=30).run(until=200, every=10)
    assert len(runner.evictions) == 2
    assert {e.beneficiary for e in runner.evictions} == {"A1"}
    assert "A2" in runner.pending and queue_gpus(runner, "a") == 16


def test_reclaim_beyond_quota_while_victims_drain_elastic():
    """Variant: the second claimant is elastic and its queue's first reclaim is still draining: it may claim
    only what is left of the quota (4 GPUs), never the GPUs already held for the first."""
    world = (World().nodes(count=4, gpus=8)
             .queue(name="a", quota={"H100": 20})
             .queue(name="b", quota={"H100": 0}))
    for i in range(1, 5):
        world.running(name=f"b{i}", queue="b", nodes=[f"n{i}"] * 4, gpus_per_task=2, min_available=1)
    world.job(name="A1", queue="a", tasks=2, gpus_per_task=8, submit=10)
    world.job(name="A2", queue="a", tasks=8, gpus_per_task=2, min_available=1, submit=20)
    runner = ScenarioRunner(world, grace=30).run(until=200, every=10)
    assert sum(e.gpus for e in runner.evictions) == 20
    assert queue_gpus(runner, "a") == 20
    assert len(runner.running["A2"].placement) == 2


@pytest.mark.parametrize("quota_b", [16, 8])
def test_reclaim_borrowing_gang_spanning_quota(quota_b):
    """reclaim-borrowing-gang-spanning-quota.yaml: b's only job is a 32-GPU gang over b's quota; a's job takes
    its quota back: the gang goes whole (b ends below its quota: the gang reached past it), a-job starts
    after the grace period, and the gang then waits (it needs more than b may take back): no loop for 50
    cycles. Variant: b's quota 8."""
    world = (World().nodes(count=4, gpus=8)
             .queue(name="a", quota={"H100": 16}).queue(name="b", quota={"H100": quota_b})
             .running(name="b-gang", queue="b", nodes=["n1", "n2", "n3", "n4"], gpus_per_task=8, min_available=4)
             .job(name="a-job", queue="a", tasks=2, gpus_per_task=8, submit=10))
    runner = ScenarioRunner(world, grace=30).run(until=60, every=10)
    assert [(e.job_id, e.tasks, e.beneficiary, e.rule) for e in runner.evictions] == [("b-gang", (), "a-job", "reclaim")]
    assert runner.started["a-job"] == 40
    runner.run(start=70, until=570, every=10)
    assert len(runner.evictions) == 1
    assert "b-gang" in runner.pending and "a-job" in runner.running


def test_reclaim_borrowing_gang_control_surplus_only():
    """The control: with b-gang at min_available 2, only its 2 surplus tasks are reclaimed; b keeps its quota."""
    world = (World().nodes(count=4, gpus=8)
             .queue(name="a", quota={"H100": 16}).queue(name="b", quota={"H100": 16})
             .running(name="b-gang", queue="b", nodes=["n1", "n2", "n3", "n4"], gpus_per_task=8, min_available=2)
             .job(name="a-job", queue="a", tasks=2, gpus_per_task=8, submit=10))
    runner = ScenarioRunner(world, grace=30).run(until=200, every=10)
    assert [(e.job_id, len(e.tasks)) for e in runner.evictions] == [("b-gang", 2)]
    assert runner.started["a-job"] == 40 and queue_gpus(runner, "b") == 16


def _flavors_world():
    world = (World().nodes(count=3, gpus=5, flavor="H100", prefix="h").nodes(count=10, gpus=5, flavor="A10", prefix="a")
             .queue(name="A", quota={"H100": 5, "A10": 0}).queue(name="B", quota={"H100": 5, "A10": 0})
             .queue(name="C", quota={"H100": 5}))
    world.running(name="A-h100", queue="A", nodes=["h1"] * 4, gpus_per_task=1)
    world.running(name="A-a10", queue="A", nodes=[f"a{i}" for i in range(1, 7) for _ in range(5)], gpus_per_task=1)
    world.running(name="B-h100", queue="B", nodes=["h2"] * 5, gpus_per_task=1)
    world.running(name="B-a10", queue="B", nodes=[f"a{i}" for i in range(7, 11) for _ in range(5)], gpus_per_task=1)
    world.running(name="C-h100", queue="C", nodes=["h3"] * 5, gpus_per_task=1)
    return world


def test_fairshare_within_quota_first_across_flavors():
    """fairshare-within-quota-first-across-flavors.yaml: A-new (A uses 4 of its 5 H100) binds on the free
    H100 although A borrows 30 A10; C-new (it would borrow) waits; no eviction in any cycle."""
    world = (_flavors_world()
             .job(name="B-more", queue="B", tasks=10, gpus_per_task=1, flavors=["A10"], submit=0)
             .job(name="C-new", queue="C", tasks=1, gpus_per_task=1, flavors=["H100"], submit=1)
             .job(name="A-new", queue="A", tasks=1, gpus_per_task=1, flavors=["H100"], submit=2))
    runner = ScenarioRunner(world, grace=30).run(start=2, until=200, every=10)
    assert runner.started.get("A-new") == 2
    assert "C-new" in runner.pending and "B-more" in runner.pending
    assert runner.evictions == []


def test_fairshare_within_quota_first_decayed_history_variant():
    """Variant: the within-quota queue also has a long decayed history of the other model (recent_usage),
    and the borrower's job is older; the within-quota job still goes first and no
    eviction follows."""
    world = (World().nodes(count=2, gpus=4, flavor="H100", prefix="h").nodes(count=4, gpus=4, flavor="L4", prefix="l")
             .queue(name="within", quota={"H100": 3, "L4": 0}, recent_usage={"L4": 16.0, "H100": 1.0})
             .queue(name="borrower", quota={"H100": 3}))
    world.running(name="X-l4", queue="within", nodes=[f"l{i}" for i in range(1, 5)], gpus_per_task=4)
    world.running(name="X-h", queue="within", nodes=["h1"], gpus_per_task=1)
    world.running(name="Y-h", queue="borrower", nodes=["h1", "h1", "h1", "h2"], gpus_per_task=1)
    world.running(name="Y-h2", queue="borrower", nodes=["h2"], gpus_per_task=1)
    world.job(name="Y-new", queue="borrower", tasks=1, gpus_per_task=2, flavors=["H100"], submit=0)
    world.job(name="X-new", queue="within", tasks=1, gpus_per_task=2, flavors=["H100"], submit=3)
    from scheduler.core import CycleConfig
    runner = ScenarioRunner(world, grace=30, config=CycleConfig(usage_half_life=3600)).run(start=3, until=100, every=10)
    assert runner.started.get("X-new") == 3
    assert "Y-new" in runner.pending and runner.evictions == []


@pytest.mark.parametrize("victim_min", [2, 1])
def test_cancel_beneficiary_withdraws_eviction(victim_min):
    """cancel-beneficiary-withdraws-eviction.yaml: victim is reclaimed for beneficiary at t=6 (grace until 66);
    the beneficiary is cancelled at t=10 and the next cycle withdraws the eviction: victim runs again, never
    restarted (attempts 0), and the withdrawal says why. Variant: an elastic victim (min_available 1) gives
    one surplus task per needed 8 GPUs; the withdrawn tasks return to it."""
    world = (World().nodes(count=4, gpus=8)
             .queue(name="alpha", quota={"H100": 16}).queue(name="beta", quota={"H100": 16})
             .running(name="b-within", queue="beta", nodes=["n1", "n2"], gpus_per_task=8, preemptible=False)
             .running(name="victim", queue="beta", nodes=["n3", "n4"], gpus_per_task=8, min_available=victim_min)
             .job(name="beneficiary", queue="alpha", tasks=2 if victim_min == 2 else 1, gpus_per_task=8, submit=6))
    runner = ScenarioRunner(world, grace=60).run(start=0, until=8, every=2)
    assert [(e.job_id, e.beneficiary) for e in runner.evictions] == [("victim", "beneficiary")]
    assert "victim" not in runner.running or victim_min == 1
    runner.cancel("beneficiary", 10)
    runner.run(start=10, until=200, every=2)
    ((when, w),) = runner.withdrawals
    assert when == 10 and w.beneficiary == "beneficiary" and "withdrawn" in w.message
    assert len(runner.evictions) == 1
    victim = runner.running["victim"]
    assert victim.attempts == 0 and runner.started["victim"] == 0 and len(victim.placement) == 2


def test_cancel_beneficiary_withdraws_eviction_started_elsewhere():
    """Variant: the beneficiary starts elsewhere (a job of a third queue ends during the grace period): the
    eviction it no longer needs is withdrawn the same cycle and the victim keeps running."""
    world = (World().nodes(count=3, gpus=8)
             .queue(name="alpha", quota={"H100": 8}).queue(name="beta", quota={"H100": 8})
             .queue(name="gamma", quota={"H100": 8})
             .running(name="short", queue="gamma", nodes=["n1"], gpus_per_task=8, preemptible=False, duration=20)
             .running(name="b-within", queue="beta", nodes=["n2"], gpus_per_task=8, preemptible=False)
             .running(name="victim", queue="beta", nodes=["n3"], gpus_per_task=8)
             .job(name="beneficiary", queue="alpha", tasks=1, gpus_per_task=8, submit=6))
    runner = ScenarioRunner(world, grace=60).run(start=0, until=100, every=2)
    assert [e.job_id for e in runner.evictions] == ["victim"]
    assert runner.started["beneficiary"] == 20 and runner.placements["beneficiary"][0].node == "n1"
    assert [(t, w.job_id) for t, w in runner.withdrawals] == [(20, "victim")]
    assert runner.running["victim"].attempts == 0 and runner.started["victim"] == 0


@pytest.mark.parametrize("grace", [0, 30])
def test_elastic_job_grows_back(grace):
    """elastic-job-grows-back.yaml: jb reclaims 3 of ja's surplus tasks and starts after the grace period (grace
    0: at the next cycle); ja runs on with 3 (the tasks being released are never placed twice); when jb ends
    (300 s later) ja's 3 missing tasks are placed in that cycle: 6 tasks, no GPU idle, ja never restarted,
    and nothing evicted again. Variant: a 30 s grace period."""
    world = (World().nodes(count=6, gpus=2)
             .queue(name="qa", quota={"H100": 6}).queue(name="qb", quota={"H100": 6})
             .running(name="ja", queue="qa", nodes=[f"n{i}" for i in range(1, 7)], gpus_per_task=2, min_available=2)
             .job(name="jb", queue="qb", tasks=3, gpus_per_task=2, submit=10, duration=300))
    start = 10 + max(grace, 10)
    runner = ScenarioRunner(world, grace=grace).run(until=start + 290, every=10)
    assert runner.started["jb"] == start and len(runner.running["ja"].placement) == 3
    assert [len(e.tasks) for e in runner.evictions] == [3]
    runner.run(start=start + 300, until=800, every=10)
    assert runner.finished["jb"] == start + 300
    assert len(runner.running["ja"].placement) == 6 and runner.started["ja"] == 0
    grown = [(t, b) for t, r in runner.history for b in r.growths]
    assert [(t, len(b.tasks)) for t, b in grown] == [(start + 300, 3)]
    assert runner.history[-1][1].metrics["allocation_rate"] == 1.0
    assert len(runner.evictions) == 1


@pytest.mark.parametrize("mode, tier, expect", [("none", None, 4), ("soft", None, 4), ("hard", 1, 2), ("hard", 2, 4)])
def test_elastic_job_takes_every_task_that_fits_at_start(mode, tier, expect):
    """elastic-job-grows-back.yaml, variant at start: on an idle cluster of 2 tier-1 domains of 2 nodes x 8
    GPUs, an unconstrained 4 x 8-GPU job with min_available 1 starts all 4 tasks (across both domains); a
    hard tier-1 constraint keeps it to the 2 tasks of one domain, a hard tier-2 one lets it span both."""
    world = (World().racks(count=2, nodes_per_rack=2, gpus=8).queue(name="q", quota={"H100": 32})
             .job(name="j", tasks=4, gpus_per_task=8, min_available=1, topology_mode=mode, highest_tier=tier))
    result = world.cycle()
    (b,) = result.bindings
    assert len(b.tasks) == expect
    if expect == 4:
        assert b.domain == "spine" and b.tier == 2


def test_elastic_job_grows_within_its_queue_limit_and_domain():
    """Variant of elastic-job-grows-back: a running elastic job missing tasks grows only up to its queue's
    limit, only inside its hard domain, and never onto GPUs held for a reclaim beneficiary."""
    world = (World().racks(count=2, nodes_per_rack=2, gpus=4)
             .queue(name="q", quota={"H100": 8}, limit={"H100": 10}))
    world._jobs["e"] = None
    from dataclasses import replace as _replace
    from scheduler.core.snapshot import JobInfo, TaskPlacement
    from scheduler.core.testing import role
    world._jobs["e"] = JobInfo(id="e", name="e", queue="q", roles=(role(tasks=6, gpus_per_task=2, min_available=1),),
                              topology_mode="hard", highest_tier=1, state="running", start_time=0.0,
                              placement=(TaskPlacement("worker", 0, "rack1-n1", (0, 1)),))
    world._nodes["rack1-n1"] = _replace(world._nodes["rack1-n1"], used=frozenset({0, 1}))
    result = world.cycle(now=1)
    (g,) = result.growths
    assert g.rule == "grow" and g.job_id == "e"
    assert {t.node for t in g.tasks} <= {"rack1-n1", "rack1-n2"}  # hard tier 1: inside rack1
    assert len(g.tasks) == 3  # rack1 has 6 free GPUs; the limit of 10 would allow 4 more tasks
    world2 = (World().nodes(count=1, gpus=8).queue(name="q", quota={"H100": 8}, limit={"H100": 6}))
    world2._jobs["e"] = JobInfo(id="e", name="e", queue="q", roles=(role(tasks=4, gpus_per_task=2, min_available=1),),
                               state="running", start_time=0.0, placement=(TaskPlacement("worker", 0, "n1", (0, 1)),))
    world2._nodes["n1"] = _replace(world2._nodes["n1"], used=frozenset({0, 1}))
    (g2,) = world2.cycle(now=1).growths
    assert len(g2.tasks) == 2  # limit 6: 2 more tasks, not 3


def test_non_preemptible_job_runs_within_its_entitlement_not_only_its_own_quota():
    """The same entitlement decides what a non-preemptible job may take: a child without a quota of its own
    runs one on its parent's unassigned quota; past the entitlement it waits (it could never be reclaimed)."""
    world = (World().nodes(count=2, gpus=8)
             .queue(name="P", quota={"H100": 8}).queue(name="Z", parent="P", quota={"H100": 0})
             .job(name="pinned", queue="Z", tasks=1, gpus_per_task=8, preemptible=False)
             .job(name="pinned-2", queue="Z", tasks=1, gpus_per_task=4, preemptible=False, submit=1))
    result = world.cycle()
    assert [b.job_id for b in result.bindings] == ["pinned"]
    assert "non-preemptible jobs run only within quota" in result.pending["pinned-2"].message
