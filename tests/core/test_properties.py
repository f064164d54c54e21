"""Property tests on random worlds: whatever the cluster, queues and jobs, a cycle never binds a GPU
twice, never places part of a gang, never crosses a hard topology constraint, never overfills a node,
never exceeds a queue limit at any level, never places a job that is not interruptible on a hot spare,
and never mutates its snapshot."""
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core import run_cycle
from scheduler.core.testing import World, check_result, role

FLAVORS = ["H100", "A100"]


@st.composite
def worlds(draw):
    world = World()
    n_racks = draw(st.integers(1, 4))
    leaves = []
    node_names = []
    for r in range(n_racks):
        rack = f"rack{r}"
        n_nodes = draw(st.integers(1, 4))
        flavor = draw(st.sampled_from(FLAVORS))
        names = [f"{rack}-n{i}" for i in range(n_nodes)]
        for name in names:
            gpus = draw(st.sampled_from([2, 4, 8]))
            world.node(name=name, gpus=gpus, flavor=flavor, used=draw(st.integers(0, gpus)),
                       cpu_milli=draw(st.sampled_from([0, 32000])), state=draw(st.sampled_from(["ready"] * 5 + ["cordoned"])),
                       numa=[i * 2 // gpus for i in range(gpus)], spare=draw(st.sampled_from([False] * 4 + [True])))
        world.domain(name=rack, tier=1, nodes=names)
        node_names += names
        leaves.append(rack)
    if draw(st.booleans()):
        world.domain(name="leaf-a", tier=2, children=leaves[: len(leaves) // 2 + 1])
        if len(leaves) > 1 and leaves[len(leaves) // 2 + 1:]:
            world.domain(name="leaf-b", tier=2, children=leaves[len(leaves) // 2 + 1:])
    world.queue(name="root", quota={"H100": 64, "A100": 64}, limit={"H100": draw(st.integers(0, 80))})
    for q in ("qa", "qb"):
        world.queue(name=q, parent="root", quota={"H100": draw(st.integers(0, 32))},
                    limit={"H100": draw(st.integers(0, 48))} if draw(st.booleans()) else None)
    for r in range(draw(st.integers(0, 4))):  # running jobs that preempt / reclaim may evict
        free_nodes = [n.name for n in world.node_infos if n.gpus - len(n.used) >= 1 and n.state == "ready"]
        if not free_nodes:
            break
        node = draw(st.sampled_from(free_nodes))
        world.running(name=f"run{r}", queue=draw(st.sampled_from(["qa", "qb"])), nodes=[node], gpus_per_task=1,
                      priority=draw(st.integers(0, 3)), preemptible=draw(st.booleans()), started=float(r))
    for j in range(draw(st.integers(1, 25))):
        roles = [role(name=f"r{i}", tasks=(t := draw(st.integers(1, 5))), gpus_per_task=draw(st.sampled_from([0, 1, 2, 4, 8])),
                      min_available=draw(st.integers(1, t)), cpu_milli=draw(st.sampled_from([0, 1000, 20000])) or 500,
                      flavors=draw(st.sampled_from([(), ("H100",), ("A100",)])))
                 for i in range(draw(st.integers(1, 2)))]
        mode = draw(st.sampled_from(["none", "soft", "hard"]))
        world.job(name=f"j{j}", queue=draw(st.sampled_from(["qa", "qb"])), roles=roles,
                  priority=draw(st.integers(0, 3)), submit=float(j), topology_mode=mode,
                  highest_tier=draw(st.sampled_from([1, 2, 3])) if mode != "none" else None,
                  interruptible=draw(st.booleans()))
    return world


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_cycle_invariants(world):
    snapshot = world.snapshot()
    before = repr(snapshot)
    result = run_cycle(snapshot)
    check_result(snapshot, result)
    assert repr(snapshot) == before  # the snapshot is never mutated
    bound = {b.job_id for b in result.bindings}
    assert bound.isdisjoint(result.pending)
    assert bound | set(result.pending) == {j.id for j in snapshot.jobs if j.state == "pending"}
    # queue limits at every level, per flavor
    flavor_of = {n.name: n.flavor for n in snapshot.nodes}
    queues = {q.name: q for q in snapshot.queues}
    usage = defaultdict(lambda: defaultdict(int))
    jobs = {j.id: j for j in snapshot.jobs}
    for b in result.bindings:
        q = jobs[b.job_id].queue
        while q is not None:
            for t in b.tasks:
                usage[q][flavor_of[t.node]] += len(t.gpus)
            q = queues[q].parent
    for q, per_flavor in usage.items():
        for flavor, used in per_flavor.items():
            quota = queues[q].quotas.get(flavor)
            if quota is not None and quota.limit is not None:
                assert used <= quota.limit, (q, flavor, used, quota.limit)
    # deterministic
    again = run_cycle(snapshot)
    assert [(b.job_id, b.tasks) for b in again.bindings] == [(b.job_id, b.tasks) for b in result.bindings]
