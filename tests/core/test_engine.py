"""Unit tests of the engine's policies: ordering, binpack, NUMA, feasibility, metrics, purity."""
import ast
import pathlib

import pytest

from scheduler.core import CycleConfig, NodeInfo, TopologyError, never_fits
from scheduler.core.testing import World, role


def test_fair_share_orders_queues_by_dominant_share():
    world = (World().nodes(count=1, gpus=4)
             .queue(name="rich", quota={"H100": 2}).queue(name="poor", quota={"H100": 2})
             .running(name="r0", queue="rich", nodes=["n1"], gpus_per_task=2)
             .job(name="rich-1", queue="rich", tasks=1, gpus_per_task=2, submit=0)
             .job(name="poor-1", queue="poor", tasks=1, gpus_per_task=2, submit=5))
    result = world.cycle()
    assert [b.job_id for b in result.bindings] == ["poor-1"]
    assert result.pending["rich-1"].code == "insufficient_gpus"


def test_priority_then_submit_time_inside_a_queue():
    world = (World().nodes(count=1, gpus=2).queue(name="q", quota={"H100": 2})
             .job(name="old", submit=0, gpus_per_task=2)
             .job(name="urgent", submit=9, priority=10, gpus_per_task=2))
    assert [b.job_id for b in world.cycle().bindings] == ["urgent"]


def test_binpack_fills_used_node_and_spread_does_not():
    world = (World().node(name="a", gpus=8, used=4).node(name="b", gpus=8)
             .job(name="j", gpus_per_task=2))
    assert world.cycle().bindings[0].tasks[0].node == "a"
    assert world.cycle(config=CycleConfig(binpack=False)).bindings[0].tasks[0].node == "b"


def _racks_with_holes() -> World:
    """rack0: n0 whole (8 free), n1 full; rack1: m0 5 free, m1 6 free; rack2: w0 whole, w1 full. By aggregate
    free GPUs rack0 and rack2 (8) fit a 4-GPU task better than rack1 (11), but only their whole nodes hold it."""
    return (World().node(name="n0", gpus=8).node(name="n1", gpus=8, used=8)
            .node(name="m0", gpus=8, used=3).node(name="m1", gpus=8, used=2)
            .node(name="w0", gpus=8).node(name="w1", gpus=8, used=8)
            .domain(name="rack0", tier=1, nodes=["n0", "n1"]).domain(name="rack1", tier=1, nodes=["m0", "m1"])
            .domain(name="rack2", tier=1, nodes=["w0", "w1"]).domain(name="spine", tier=2,
                                                                     children=["rack0", "rack1", "rack2"])
            .queue(name="q", quota={"H100": 48}))


def test_one_task_jobs_take_the_tightest_node_across_racks():
    """Issue 16 (optimum gap, seed 11 snapshot 18): two 4-GPU one-task jobs took the whole node n0 because
    rack0 was the best fit on aggregate free GPUs, and a 2 x 8 gang then found one whole node only. The node
    is now the best fit across the racks: the jobs take m0 (5 free) and m1 (6 free), and the gang starts
    on the two whole nodes (24 GPUs allocated, the optimum; 8 before)."""
    world = (_racks_with_holes().job(name="a", gpus_per_task=4, submit=0).job(name="b", gpus_per_task=4, submit=1)
             .job(name="gang", tasks=2, gpus_per_task=8, submit=2))
    result = world.cycle()
    on = {b.job_id: sorted(t.node for t in b.tasks) for b in result.bindings}
    assert on == {"a": ["m0"], "b": ["m1"], "gang": ["n0", "w0"]}
    assert sum(len(t.gpus) for b in result.bindings for t in b.tasks) == 24


def test_exact_fit_index_follows_takes_and_gives():
    """ClusterState.exact_fit_domains (the index behind the node-level best fit) stays equal to the one built
    from scratch while tasks are taken and given back."""
    import random

    from scheduler.core.state import ClusterState

    snap = _racks_with_holes().snapshot()
    state = ClusterState(snap)
    state.exact_fit_domains(1, "H100")  # built now, then kept up to date
    rng = random.Random(3)
    held = []
    for _ in range(60):
        k = rng.randrange(len(state.free))
        if held and rng.random() < 0.4:
            state.give(*held.pop(rng.randrange(len(held))), 0, 0)
        elif state.free[k]:
            gpus = tuple(state.free[k][:rng.randint(1, len(state.free[k]))])
            state.take(k, gpus, 0, 0)
            held.append((k, gpus))
        fresh = ClusterState.__new__(ClusterState)
        fresh.free_hist, fresh.hist_width, fresh.hist_off, fresh.tree, fresh.exact = \
            state.free_hist, state.hist_width, state.hist_off, state.tree, None
        for tier in (1, 2):
            assert state.exact_fit_domains(tier, "H100") == fresh.exact_fit_domains(tier, "H100")
    names = {state.tree.names[d] for d in state.exact_fit_domains(1, "H100")[8]}
    whole = {n.domain for k, n in enumerate(snap.nodes) if len(state.free[k]) == 8}
    assert names == whole


def test_gangs_of_several_tasks_keep_the_best_fit_domain():
    """The node-level best fit is for one-task jobs only: a 2 x 4 gang still goes to the best-fit domain on
    aggregate free GPUs (DESIGN section 5), here rack0's two half-free nodes, not the whole node of rack1."""
    world = (World().node(name="a1", gpus=8, used=4).node(name="a2", gpus=8, used=4)
             .node(name="b1", gpus=8).node(name="b2", gpus=8, used=7)
             .domain(name="rack0", tier=1, nodes=["a1", "a2"]).domain(name="rack1", tier=1, nodes=["b1", "b2"])
             .domain(name="spine", tier=2, children=["rack0", "rack1"]).queue(name="q", quota={"H100": 16})
             .job(name="gang", tasks=2, gpus_per_task=4))
    (binding,) = world.cycle().bindings
    assert sorted(t.node for t in binding.tasks) == ["a1", "a2"] and binding.domain == "rack0"


def test_task_gpus_stay_inside_one_numa_node():
    world = World().node(name="a", gpus=8, numa=[0, 0, 0, 0, 1, 1, 1, 1], used=1).job(name="j", gpus_per_task=4)
    gpus = world.cycle().bindings[0].tasks[0].gpus
    assert gpus == (4, 5, 6, 7)


def test_unhealthy_gpus_and_cordoned_nodes_take_no_work():
    world = (World().node(name="a", gpus=2, unhealthy=[0]).node(name="b", gpus=8, state="cordoned")
             .job(name="j", gpus_per_task=2))
    result = world.cycle()
    assert result.bindings == [] and not result.pending["j"].terminal
    assert result.metrics["schedulable_gpus"] == 1


def test_cpu_and_memory_are_checked_per_node():
    world = (World().node(name="a", gpus=8, cpu_milli=4000).node(name="b", gpus=8, cpu_milli=64000, used=6)
             .job(name="j", gpus_per_task=1, cpu_milli=8000))
    assert world.cycle().bindings[0].tasks[0].node == "b"


@pytest.mark.parametrize("job, code, words", [
    (dict(gpus_per_task=0, cpu_milli=99_999_999), "never_fits_cpu", "99999999 milli-CPU per task exceeds every H100"),
    (dict(gpus_per_task=1, memory_mib=2_147_483_647), "never_fits_memory", "2147483647 MiB of memory per task"),
])
def test_task_bigger_than_every_node_on_cpu_or_memory_is_terminal(job, code, words):
    """A task asking more CPU or memory than the largest node of its flavor can never run: terminal, with
    a reason naming CPU or memory (it used to wait for ever as 'no node packing fits ... 0 GPUs'), and the
    submission-time check answers the same."""
    world = World().nodes(count=2, gpus=2, cpu_milli=2000, memory_mib=24105).job(name="j", **job)
    reason = world.cycle().pending["j"]
    assert reason.terminal and reason.code == code and words in reason.message, reason
    assert "(largest has " in reason.message
    (j,) = world.jobs
    assert never_fits(world.node_infos, world.domain_infos, j.roles).message == reason.message
    # a node with cpu_milli / memory_mib 0 is unconstrained: the same task may fit there
    free = World().nodes(count=1, gpus=2, cpu_milli=2000, memory_mib=24105).node(name="big", gpus=2).job(name="j", **job)
    assert free.cycle().bindings[0].tasks[0].node == "big"


def test_a_gang_waiting_on_busy_cpu_says_so():
    """CPU that is there but taken blocks a task that fits an empty node: the waiting reason names the CPU."""
    world = (World().node(name="a", gpus=8, cpu_milli=4000).job(name="first", gpus_per_task=1, cpu_milli=3000)
             .job(name="j", gpus_per_task=1, cpu_milli=3000, submit=1.0))
    result = world.cycle()
    assert [b.job_id for b in result.bindings] == ["first"]
    reason = result.pending["j"]
    assert not reason.terminal and "3000 milli-CPU free per task" in reason.message, reason


def test_task_bigger_than_every_node_is_terminal():
    result = World().nodes(count=3, gpus=8).job(name="j", gpus_per_task=16).cycle()
    reason = result.pending["j"]
    assert reason.terminal and reason.code == "never_fits_node"


def test_hard_gang_bigger_than_every_domain_of_its_tier_is_terminal():
    world = (World().racks(count=2, nodes_per_rack=2, gpus=4)
             .job(name="j", tasks=3, gpus_per_task=4, topology_mode="hard", highest_tier=1))
    reason = world.cycle().pending["j"]
    assert reason.terminal and "every tier-1 domain" in reason.message
    soft = World().racks(count=2, nodes_per_rack=2, gpus=4).job(name="j", tasks=3, gpus_per_task=4, topology_mode="soft",
                                                                 highest_tier=1)
    assert soft.cycle().bindings[0].tier == 2


@pytest.mark.parametrize("job, code", [
    (dict(gpus_per_task=16), "never_fits_node"),
    (dict(tasks=3, gpus_per_task=4, topology_mode="hard", highest_tier=1), "never_fits_domain"),
    (dict(flavors=["B200"]), "never_fits_flavor"),
    (dict(tasks=3, gpus_per_task=4, topology_mode="soft", highest_tier=1), None),
])
def test_public_never_fits_gives_the_cycles_terminal_reason(job, code):
    """scheduler.core.never_fits (the submission-time check) answers what the cycle would, before any
    job runs: the same code and message, or None when the job may fit."""
    world = World().racks(count=2, nodes_per_rack=2, gpus=4).job(name="j", **job)
    (j,) = world.jobs
    reason = never_fits(world.node_infos, world.domain_infos, j.roles, topology_mode=j.topology_mode,
                        highest_tier=j.highest_tier)
    if code is None:
        assert reason is None and world.cycle().bindings
        return
    cycle = world.cycle().pending["j"]
    assert (reason.code, reason.message, reason.terminal) == (code, cycle.message, True) == (cycle.code, cycle.message, True)


def test_public_never_fits_raises_on_a_broken_tree():
    with pytest.raises(TopologyError):
        never_fits([NodeInfo(name="a", flavor="H100", gpus=1, domain="nowhere")], [], [role()])


def test_extra_tasks_above_minimum_are_placed_when_they_fit():
    world = World().nodes(count=2, gpus=4).job(name="j", roles=[role(tasks=6, gpus_per_task=2, min_available=2)])
    (binding,) = world.cycle().bindings
    assert len(binding.tasks) == 4


def test_extra_tasks_respect_queue_limit():
    world = (World().nodes(count=2, gpus=4).queue(name="q", quota={"H100": 4}, limit={"H100": 6})
             .job(name="j", roles=[role(tasks=6, gpus_per_task=2, min_available=2)]))
    assert len(world.cycle().bindings[0].tasks) == 3


def test_metrics_follow_design_section_6():
    world = (World().racks(count=2, nodes_per_rack=2, gpus=4)
             .running(name="x", nodes=["rack1-n1"], gpus_per_task=1))
    m = world.cycle().metrics
    assert m["schedulable_gpus"] == 16 and m["allocated_gpus"] == 1 and m["free_gpus"] == 15
    assert m["largest_runnable"] == {1: 8, 2: 12}  # rack2 whole; at tier 2, the 3 whole free nodes
    assert m["fragmentation_rate"] == pytest.approx(1 - 12 / 15)
    assert m["domain_completeness"] == 0.5


def test_inconsistent_tree_is_refused():
    world = World().node(name="a", gpus=1, domain="nowhere")
    with pytest.raises(TopologyError, match="unknown domain"):
        world.cycle()


def test_core_imports_no_framework():
    core = pathlib.Path(__file__).resolve().parents[2] / "scheduler" / "core"
    banned = {"django", "celery", "rest_framework", "plotly", "redis", "psycopg"}
    for path in core.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            for name in names:
                assert name.split(".")[0] not in banned, f"{path.name} imports {name}"


def test_decayed_usage_lets_yesterdays_heavy_user_yield():
    from scheduler.core.plugins.fairshare import decay_usage

    assert decay_usage({"H100": 8.0}, {"H100": 0.0}, 3600, 3600) == {"H100": 4.0}
    assert decay_usage({}, {"H100": 8.0}, 3600, 3600) == {"H100": 4.0}

    def world():
        return (World().nodes(count=1, gpus=2)
                .queue(name="burner", quota={"H100": 2}, recent_usage={"H100": 2.0})
                .queue(name="fresh", quota={"H100": 2})
                .job(name="b", queue="burner", gpus_per_task=2, submit=0)
                .job(name="f", queue="fresh", gpus_per_task=2, submit=5))
    # without decay both queues use nothing now: tie broken by name, "burner" first
    assert [b.job_id for b in world().cycle(config=CycleConfig(usage_half_life=None)).bindings] == ["b"]
    decayed = world().cycle(config=CycleConfig(usage_half_life=3600))
    assert [b.job_id for b in decayed.bindings] == ["f"]
    # on by default (7 days, Slurm's PriorityDecayHalfLife default)
    assert CycleConfig().usage_half_life == 7 * 24 * 3600
    assert [b.job_id for b in world().cycle().bindings] == ["f"]


def test_non_preemptible_jobs_run_only_within_quota():
    world = (World().nodes(count=1, gpus=8).queue(name="small", quota={"H100": 2}).queue(name="other", quota={"H100": 6})
             .job(name="pinned", queue="small", gpus_per_task=4, preemptible=False)
             .job(name="borrower", queue="small", gpus_per_task=4, submit=1))
    result = world.cycle()
    assert [b.job_id for b in result.bindings] == ["borrower"]
    assert "non-preemptible jobs run only within quota" in result.pending["pinned"].message


def test_a_holder_trying_elsewhere_never_takes_another_holders_gpus():
    """Found in the demo: a reclaim's beneficiary never started because another job holding a reservation,
    served first, started on its freed GPUs. Every hold is taken before any holder tries elsewhere."""
    from scheduler.core.snapshot import TaskPlacement

    world = (World().node(name="n1", gpus=8)
             .running(name="x", nodes=["n1"], gpus_per_task=4)
             .job(name="a", gpus_per_task=4, priority=5, reserved=[TaskPlacement("worker", 0, "n1", (0, 1, 2, 3))])
             .job(name="b", gpus_per_task=4, reserved=[TaskPlacement("worker", 0, "n1", (4, 5, 6, 7))]))
    result = world.cycle()
    assert [(b.job_id, b.rule, b.tasks[0].gpus) for b in result.bindings] == [("b", "reservation", (4, 5, 6, 7))]
    assert result.pending["a"].code == "nominated"
    assert [n.job_id for n in result.nominations] == ["a"]


def test_metrics_by_flavor_and_node_size_expose_what_the_cluster_rate_hides():
    """Issue 13: free GPUs on 2-GPU machines made the cluster's rate read low while no 8-GPU machine was
    free. Per group: every 8-GPU machine is partly used (largest runnable 4, rate 0.5), while the 2-GPU
    machines are whole (rate 0: a multi-node job can use all of them); a second flavor is its own group."""
    world = (World().nodes(count=2, gpus=8, prefix="big", used=4).nodes(count=6, gpus=2, prefix="small")
             .nodes(count=1, gpus=8, prefix="a100-", flavor="A100"))
    m = world.cycle().metrics
    groups = m["by_group"]
    assert set(groups) == {"H100 x8", "H100 x2", "A100 x8"}
    big, small, other = groups["H100 x8"], groups["H100 x2"], groups["A100 x8"]
    assert (big["nodes"], big["free_nodes"], big["free_gpus"], big["largest_runnable"]) == (2, 0, 8, 4)
    assert big["fragmentation_rate"] == pytest.approx(0.5)
    assert (small["free_nodes"], small["free_gpus"], small["largest_runnable"]) == (6, 12, 12)  # 6 whole nodes
    assert small["fragmentation_rate"] == 0.0
    assert (other["free_nodes"], other["largest_runnable"], other["fragmentation_rate"]) == (1, 8, 0.0)
    assert sum(g["free_gpus"] for g in groups.values()) == m["free_gpus"]


@pytest.mark.parametrize("engine", ["volcano_like", "kube"])
def test_a_backed_off_job_says_when_it_retries_as_an_iso_utc_time(engine):
    """A requeued job's pending reason names its retry time for people (ISO 8601, UTC), never the raw
    cluster-clock seconds ("retries at t=1796124829s"); both the engine and the kube-like baseline."""
    from dataclasses import replace

    from scheduler.core.baselines import run_cycle_kube
    from scheduler.core.cycle import run_cycle

    world = World().nodes(count=1, gpus=2).queue(name="q", quota={"H100": 2}).job(name="j")
    snap = world.snapshot(now=1796124000.0)
    snap = replace(snap, jobs=tuple(replace(j, not_before=1796124829.0, attempts=1) for j in snap.jobs))
    result = (run_cycle if engine == "volcano_like" else run_cycle_kube)(snap)
    reason = result.pending["j"]
    assert reason.code == "backoff" and "2026-12-01T11:33:49Z" in reason.message, reason.message
    assert "t=" not in reason.message and "1796124829" not in reason.message


def test_a_holder_left_waiting_holds_the_gpus_another_holder_gave_up():
    """Holders whose reservations overlap (issue 16, allocate's nomination path kept its hold's derivation): a
    is served first, holds n1's free GPUs 5-7 and starts on n2 instead, giving them up; b, still waiting for
    GPU 3, then holds 5-7 (all free now), not only the GPUs it held at the start of the cycle (none)."""
    from scheduler.core.snapshot import TaskPlacement

    world = (World().node(name="n1", gpus=8, used=5).node(name="n2", gpus=4)
             .job(name="a", gpus_per_task=4, priority=5, reserved=[TaskPlacement("worker", 0, "n1", (4, 5, 6, 7))])
             .job(name="b", gpus_per_task=4, reserved=[TaskPlacement("worker", 0, "n1", (3, 5, 6, 7))]))
    result = world.cycle()
    assert [(b.job_id, b.tasks[0].node) for b in result.bindings] == [("a", "n2")]
    assert result.pending["b"].code == "nominated"
    assert result.held == {"n1": (5, 6, 7)}


def test_a_holder_refused_without_a_search_still_holds_the_gpus_another_holder_gave_up():
    """The same with b refused without a search (issue 16, session 9: a holder's hold is given back only for a
    search): c, of b's shape, is served before b and fails its search (n1's three free GPUs, n2 taken by a, n3
    full), so b is refused from the cycle's failed shapes; b must still take n1's GPUs 5-7, freed by a."""
    from scheduler.core.snapshot import TaskPlacement

    world = (World().node(name="n1", gpus=8, used=5).node(name="n2", gpus=4).node(name="n3", gpus=4, used=4)
             .job(name="a", gpus_per_task=4, priority=5, reserved=[TaskPlacement("worker", 0, "n1", (4, 5, 6, 7))])
             .job(name="c", gpus_per_task=4, priority=3, reserved=[TaskPlacement("worker", 0, "n3", (0, 1, 2, 3))])
             .job(name="b", gpus_per_task=4, reserved=[TaskPlacement("worker", 0, "n1", (3, 5, 6, 7))]))
    result = world.cycle()
    assert [(b.job_id, b.tasks[0].node) for b in result.bindings] == [("a", "n2")]
    assert result.pending["b"].code == result.pending["c"].code == "nominated"
    assert result.held == {"n1": (5, 6, 7)}
