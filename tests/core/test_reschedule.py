"""Rescheduling (scheduler/core/actions/reschedule.py): moves of migratable jobs that unblock a job waiting
on fragmentation alone, their bounds, the advice, and the property that it never lowers the largest
runnable job nor loops."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings, strategies as st

from scheduler.core import run_cycle
from scheduler.core.snapshot import CycleConfig, Move
from scheduler.core.testing import World, check_result
from scheduler.core.metrics import cluster_metrics
from scheduler.core.state import ClusterState

ON = CycleConfig(reschedule=True, reschedule_every=1, reschedule_min_wait=0)


def fragmented(*, migratable=True, second_rack_job_nodes=("rack2-n1",), **running_kwargs) -> World:
    """Two racks (tier 1) of 4 nodes x 8 GPUs under a spine: rack1 has 3 nodes busy, rack2 one node busy
    (32 GPUs free in all, 24 at most in one rack); `big` wants a whole rack (4 x 8, hard tier 1)."""
    w = World().racks(count=2, nodes_per_rack=4, gpus=8).queue(name="q", quota={"H100": 64})
    for i in (1, 2, 3):
        w.running(name=f"a{i}", nodes=[f"rack1-n{i}"], gpus_per_task=8, started=0)
    for i, n in enumerate(second_rack_job_nodes):
        w.running(name=f"b{i}", nodes=[n], gpus_per_task=8, started=0, migratable=migratable, **running_kwargs)
    w.job(name="big", tasks=4, gpus_per_task=8, topology_mode="hard", highest_tier=1, submit=0)
    return w


def test_blocked_by_fragmentation_moves_one_job():
    w = fragmented(checkpoint_grace=120)
    snap = w.snapshot(now=3600)
    off = run_cycle(snap)
    assert off.pending["big"].code == "no_domain" and not off.evictions
    result = run_cycle(snap, ON)
    check_result(snap, result)
    assert [(e.job_id, e.rule, e.beneficiary, e.grace) for e in result.evictions] == [("b0", "reschedule", "big", 120)]
    held = {n.job_id: n.tasks for n in result.nominations}
    assert {t.node for t in held["big"]} == {f"rack2-n{i}" for i in range(1, 5)}
    assert [t.node for t in held["b0"]] == ["rack1-n4"]  # the moved job's new place, held at once
    assert result.moves[0].job_id == "b0" and result.moves[0].tasks == held["b0"]
    assert result.pending["big"].code == "nominated"
    assert result.decisions[-1]["rule"] == "reschedule" and result.decisions[-1]["domain"] == "rack2"


def test_not_migratable_no_move_but_advice():
    w = fragmented(migratable=False)
    snap = w.snapshot(now=3 * 3600)
    assert not run_cycle(snap, ON).evictions
    result = run_cycle(snap, replace(ON, reschedule_advice=True))
    assert not result.evictions
    [advice] = result.advice
    assert advice["beneficiary"] == "big" and advice["domain"] == "rack2"
    assert [m["job"] for m in advice["moves"]] == ["b0"] and advice["moves"][0]["to"] == "rack1"
    assert advice["message"] == "moving job b0 would free rack2 for job big (32 GPUs, waiting 3 h)"


def test_bounds_min_run_window_budget_and_wait():
    w = fragmented(min_run_before_move=7200)
    assert not run_cycle(w.snapshot(now=3600), ON).evictions  # ran 1 h of the 2 h minimum
    assert run_cycle(w.snapshot(now=7200), ON).evictions
    snap = w.snapshot(now=3600)
    w2 = fragmented()
    moved_lately = replace(w2.snapshot(now=3600), recent_moves=(Move(job_id="b0", time=0.0),))
    assert not run_cycle(moved_lately, ON).evictions  # moved within the window: never twice
    budget_spent = replace(w2.snapshot(now=3600), recent_moves=tuple(Move(job_id=f"x{i}", time=3000.0)
                                                                     for i in range(ON.reschedule_moves_per_hour)))
    assert not run_cycle(budget_spent, ON).evictions  # K moves in the last hour
    assert not run_cycle(w2.snapshot(now=60), replace(ON, reschedule_min_wait=600)).evictions
    assert not run_cycle(replace(snap, cycle=3), replace(ON, reschedule_every=5)).evictions  # not this cycle
    assert not run_cycle(w2.snapshot(now=3600)).evictions  # off by default


def test_no_move_when_waiting_job_could_not_start():
    """Only 24 GPUs free in all: a 32-GPU job is short of GPUs, not fragmented; nothing moves."""
    w = fragmented(second_rack_job_nodes=("rack2-n1", "rack2-n2"))
    result = run_cycle(w.snapshot(now=3600), ON)
    assert result.pending["big"].code == "insufficient_gpus" and not result.evictions


def test_moved_job_without_new_place_is_not_moved():
    """Variant: the rack2 job is 16 GPUs on 2 nodes that must stay in one rack, and rack1 has one free node:
    it has nowhere to go, so it is not moved (with no topology rule it may spread, and it is)."""
    w = World().racks(count=2, nodes_per_rack=4, gpus=8).queue(name="q", quota={"H100": 64})
    for i in (1, 2, 3):
        w.running(name=f"a{i}", nodes=[f"rack1-n{i}"], gpus_per_task=8)
    w.running(name="b", nodes=["rack2-n1", "rack2-n2"], gpus_per_task=8, migratable=True)
    w.job(name="mid", tasks=3, gpus_per_task=8, topology_mode="hard", highest_tier=1)
    w.job(name="big", tasks=4, gpus_per_task=8, topology_mode="hard", highest_tier=1, submit=1)
    snap = w.snapshot(now=3600)
    spread = run_cycle(snap, ON)
    assert [(e.job_id, e.beneficiary) for e in spread.evictions] == [("b", "mid")]
    assert {t.node for m in spread.moves for t in m.tasks} == {"rack1-n4", "rack2-n4"}
    pinned = replace(snap, jobs=tuple(replace(j, topology_mode="hard", highest_tier=1) if j.id == "b" else j
                                      for j in snap.jobs))
    assert not run_cycle(pinned, ON).evictions


def test_moved_job_restarts_on_its_held_place_and_beneficiary_starts():
    """End to end on the simulator: the mover is requeued with its hold and restarts there; big starts."""
    from scheduler.core.snapshot import Binding
    from scheduler.sim.state import ClusterState as SimState

    w = fragmented(checkpoint_grace=60)
    sim = SimState.from_infos(tuple(replace(n, used=frozenset()) for n in w.node_infos), w.domain_infos,
                              w.queue_infos)
    for job in w.jobs:
        if job.state == "running":
            sim.submit(replace(job, state="pending", placement=(), start_time=None))
            sim.bind(Binding(job_id=job.id, tasks=job.placement, domain="", tier=1), 0.0)
            sim.running[job.id] = replace(sim.running[job.id], migratable=job.migratable)
        else:
            sim.submit(job)
    result = run_cycle(replace(sim.snapshot(3600.0), cycle=0), ON)
    [ev] = result.evictions
    sim.mark_preempting(ev.job_id)
    sim.set_holds({n.job_id: n.tasks for n in result.nominations})
    assert sim.running["b0"].reserved  # the mover keeps its new place while it checkpoints
    result = run_cycle(replace(sim.snapshot(3630.0), cycle=1), ON)
    assert {n.job_id for n in result.nominations} == {"big", "b0"} and not result.bindings
    sim.set_holds({n.job_id: n.tasks for n in result.nominations})
    info = sim.release("b0")
    sim.requeue(info)  # its grace ended: requeued with its hold
    assert sim.pending["b0"].reserved
    result = run_cycle(replace(sim.snapshot(3660.0), cycle=2), ON)
    check_result(sim.snapshot(3660.0), result)
    started = {b.job_id: b for b in result.bindings}
    assert started["b0"].rule == "reservation" and [t.node for t in started["b0"].tasks] == ["rack1-n4"]
    assert started["big"].rule == "reservation" and started["big"].domain == "rack2"


# -- property: never lowers the largest runnable job, never loops --------------------------------------------
@st.composite
def worlds(draw):
    racks = draw(st.integers(2, 4))
    per_rack = draw(st.integers(2, 4))
    w = World().racks(count=racks, nodes_per_rack=per_rack, gpus=8).queue(name="q", quota={"H100": 512})
    n = 0
    for r in range(1, racks + 1):
        for i in range(1, per_rack + 1):
            free = 8
            for _ in range(draw(st.integers(0, 2))):
                g = draw(st.sampled_from([1, 2, 4, 8]))
                if g > free:
                    continue
                n += 1
                w.running(name=f"r{n}", nodes=[f"rack{r}-n{i}"], gpus_per_task=g, started=0,
                          migratable=draw(st.booleans()))
                free -= g
    for k in range(draw(st.integers(1, 3))):
        tasks = draw(st.integers(1, per_rack))
        w.job(name=f"p{k}", tasks=tasks, gpus_per_task=draw(st.sampled_from([4, 8])), topology_mode="hard",
              highest_tier=1, submit=k)
    return w


def _largest(snapshot):
    return cluster_metrics(ClusterState(snapshot))["largest_runnable"]


def _after_moves(snapshot, result):
    """The snapshot with every moved job at its new place (old GPUs free), beneficiaries not started."""
    moved = {m.job_id: m.tasks for m in result.moves}
    nodes = {n.name: n for n in snapshot.nodes}
    used = {name: set(n.used) for name, n in nodes.items()}
    jobs = []
    for j in snapshot.jobs:
        if j.id in moved:
            for t in j.placement:
                used[t.node] -= set(t.gpus)
    for j in snapshot.jobs:
        if j.id in moved:
            for t in moved[j.id]:
                assert not used[t.node] & set(t.gpus), "a new place overlaps a GPU in use"
                used[t.node] |= set(t.gpus)
            jobs.append(replace(j, placement=moved[j.id]))
        else:
            jobs.append(j)
    return replace(snapshot, nodes=tuple(replace(n, used=frozenset(used[n.name])) for n in snapshot.nodes),
                   jobs=tuple(jobs))


def _as_left(snapshot, result, *, moved: bool):
    """The cluster as the cycle leaves it, for cluster_metrics: the GPUs of this cycle's bindings and of its
    holds taken (held GPUs are not runnable), except the holds rescheduling made (its beneficiaries' and the
    moved jobs' new places); with `moved`, every moved job at its new place and its old GPUs free (the
    beneficiaries not started). Growth runs after the round and is left out."""
    ours = {m.job_id for m in result.moves} | {d["beneficiary"] for d in result.decisions if d["rule"] == "reschedule"}
    mine = {(t.node, g) for n in result.nominations if n.job_id in ours for t in n.tasks for g in t.gpus}
    used = {n.name: set(n.used) for n in snapshot.nodes}
    for b in result.bindings:
        for t in b.tasks:
            used[t.node] |= set(t.gpus)
    for node, gpus in result.held.items():
        used[node] |= {g for g in gpus if (node, g) not in mine}
    if moved:
        jobs = {j.id: j for j in snapshot.jobs}
        for m in result.moves:
            for t in jobs[m.job_id].placement:
                used[t.node] -= set(t.gpus)
        for m in result.moves:
            for t in m.tasks:
                assert not used[t.node] & set(t.gpus), "a new place overlaps a GPU in use"
                used[t.node] |= set(t.gpus)
    return replace(snapshot, nodes=tuple(replace(n, used=frozenset(used[n.name])) for n in snapshot.nodes))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_property_never_lowers_largest_runnable_and_never_loops(world):
    """The round runs after this cycle's allocate and eviction phases, so a plan is judged against the cluster
    as the cycle leaves it (its bindings started, its other holds kept: held GPUs are not runnable, metrics):
    the moves never lower the largest runnable job at the freed domain's tier or above compared with the same
    cycle without them. (Against the snapshot they would: a job bound this cycle may fill the domain that was
    the largest, test_largest_runnable_is_judged_after_this_cycles_bindings.)"""
    snap = world.snapshot(now=3600)
    result = run_cycle(snap, ON)
    check_result(snap, result)
    if not result.moves:
        return
    before = _largest(_as_left(snap, result, moved=False))
    largest = _largest(_as_left(snap, result, moved=True))
    tiers = {d["tier"] for d in result.decisions if d["rule"] == "reschedule"}
    for t, v in before.items():
        if t >= min(tiers):
            assert largest[t] >= v, f"tier {t}: largest runnable {v} -> {largest[t]}"
    # every beneficiary fits where it is held once the moved jobs are gone
    for d in result.decisions:
        if d["rule"] == "reschedule":
            assert d["gpus"] >= 1 and d["victims"]
    # never a loop: the next round (moves recorded, moved jobs at their new places) moves none of them again
    after = _after_moves(snap, result)
    moves = tuple(result.moves)
    again = run_cycle(replace(after, recent_moves=moves, now=3700), ON)
    assert not {e.job_id for e in again.evictions if e.rule == "reschedule"} & {m.job_id for m in moves}


def test_largest_runnable_is_judged_after_this_cycles_bindings():
    """Reduced from the property's counterexample. rack2 is wholly free (32 GPUs, the largest runnable at
    tier 1) but p1 (3 x 8) is bound there this cycle; p2 (4 x 4, hard rack) is blocked by fragmentation and
    the migratable r4 moves from rack1-n4 to rack2-n4, the one node of rack2 p1 leaves. Against the snapshot
    rack2 goes 32 -> 24, but that is p1's doing: as the cycle leaves the cluster, the largest runnable job
    at tier 1 is 8 GPUs without the move and 16 with it (rack1-n3 + rack1-n4 whole)."""
    w = World().racks(count=2, nodes_per_rack=4, gpus=8).queue(name="q", quota={"H100": 512})
    w.running(name="r1", nodes=["rack1-n1"], gpus_per_task=2, started=0)
    w.running(name="r3", nodes=["rack1-n2"], gpus_per_task=8, started=0)
    w.running(name="r4", nodes=["rack1-n4"], gpus_per_task=8, started=0, migratable=True)
    w.job(name="p1", tasks=3, gpus_per_task=8, topology_mode="hard", highest_tier=1, submit=0)
    w.job(name="p2", tasks=4, gpus_per_task=4, topology_mode="hard", highest_tier=1, submit=1)
    snap = w.snapshot(now=3600)
    result = run_cycle(snap, ON)
    check_result(snap, result)
    [p1] = [b for b in result.bindings if b.job_id == "p1"]
    assert {t.node for t in p1.tasks} == {"rack2-n1", "rack2-n2", "rack2-n3"}
    assert [(m.job_id, [t.node for t in m.tasks]) for m in result.moves] == [("r4", ["rack2-n4"])]
    assert _largest(snap)[1] == 32 and _largest(_after_moves(snap, result))[1] == 24  # the snapshot's view
    assert _largest(_as_left(snap, result, moved=False))[1] == 8
    assert _largest(_as_left(snap, result, moved=True))[1] == 16


def test_no_packing_without_domains_moves_the_job_that_completes_a_node():
    """Variant without any domain tree: 8 GPUs free over two nodes (4 + 4), a 1 x 8 job has no node packing;
    moving the migratable 4-GPU job onto the other node's free half frees a whole node."""
    w = World().nodes(count=2, gpus=8).queue(name="q", quota={"H100": 16})
    w.running(name="a", nodes=["n1"], gpus_per_task=4, migratable=True)
    w.running(name="b", nodes=["n2"], gpus_per_task=4)
    w.job(name="whole", tasks=1, gpus_per_task=8)
    snap = w.snapshot(now=3600)
    assert run_cycle(snap).pending["whole"].code == "no_packing"
    result = run_cycle(snap, ON)
    check_result(snap, result)
    assert [e.job_id for e in result.evictions] == ["a"]
    held = {n.job_id: n.tasks for n in result.nominations}
    assert [t.node for t in held["whole"]] == ["n1"] and [t.node for t in held["a"]] == ["n2"]
