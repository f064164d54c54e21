"""EngineCache: the caller owns what an engine reuses between cycles, so engines never share it."""
from dataclasses import replace

from scheduler.core import EngineCache, run_cycle
from scheduler.core.testing import World


def decisions(result):
    return ([(b.job_id, b.tasks, b.domain, b.tier, b.rule) for b in result.bindings],
            sorted((j, r.code, r.message) for j, r in result.pending.items()),
            [(e.job_id, e.tasks, e.beneficiary) for e in result.evictions],
            {k: v for k, v in result.metrics.items()})


def racks_world():
    world = World().racks(count=3, nodes_per_rack=2, gpus=8).queue(name="q", quota={"H100": 48})
    for i in range(8):
        world.job(name=f"a{i}", tasks=2, gpus_per_task=4, submit=i)
    return world.job(name="wide", tasks=2, gpus_per_task=8, topology_mode="hard", highest_tier=1, submit=9)


def flat_world():
    world = World().nodes(count=5, gpus=4, flavor="A100").queue(name="q", quota={"A100": 20})
    for i in range(8):
        world.job(name=f"b{i}", gpus_per_task=3, submit=i)
    return world.job(name="huge", tasks=2, gpus_per_task=8, submit=5)


class Cluster:
    """Cycles of one cluster: bound jobs hold their GPUs until the oldest of them ends, one per cycle;
    only the nodes whose GPUs changed get new NodeInfo objects, as a live cluster's next snapshot would."""

    def __init__(self, world):
        self.snapshot = world.snapshot()
        self.held: list[tuple] = []  # (job id, tasks) in start order

    def next(self, result):
        delta: dict[str, tuple[set, set]] = {}
        for b in result.bindings:
            self.held.append((b.job_id, b.tasks))
            for t in b.tasks:
                delta.setdefault(t.node, (set(), set()))[0].update(t.gpus)
        if self.held:
            _, tasks = self.held.pop(0)
            for t in tasks:
                delta.setdefault(t.node, (set(), set()))[1].update(t.gpus)
        nodes = tuple(replace(n, used=(n.used | delta[n.name][0]) - delta[n.name][1]) if n.name in delta else n
                      for n in self.snapshot.nodes)
        bound = {b.job_id for b in result.bindings}
        jobs = tuple(j for j in self.snapshot.jobs if j.id not in bound)
        self.snapshot = replace(self.snapshot, nodes=nodes, jobs=jobs, now=self.snapshot.now + 60)


def test_two_engines_on_different_clusters_alternate_without_rebuilding_or_mixing():
    cache_a, cache_b = EngineCache(), EngineCache()
    a, b = Cluster(racks_world()), Cluster(flat_world())
    started_a, started_b = [], []
    for _ in range(6):
        result_a = run_cycle(a.snapshot, cache=cache_a)
        what_if = run_cycle(a.snapshot)  # a what-if run in between reuses and evicts nothing
        result_b = run_cycle(b.snapshot, cache=cache_b)
        # each engine decides exactly what an engine without a cache decides
        assert decisions(result_a) == decisions(what_if)
        assert decisions(result_b) == decisions(run_cycle(b.snapshot))
        assert all(t.node.startswith("rack") for x in result_a.bindings for t in x.tasks)
        assert all(t.node in {f"n{i}" for i in range(1, 6)} for x in result_b.bindings for t in x.tasks)
        started_a += [x.job_id for x in result_a.bindings]
        started_b += [x.job_id for x in result_b.bindings]
        a.next(result_a)
        b.next(result_b)
    assert len(started_a) > 6 and "wide" in started_a and len(started_b) > 5  # later cycles started jobs too
    # each cache built its cluster's static index once and kept it while the other engine ran
    assert cache_a.builds == 1 and cache_b.builds == 1


def test_one_cache_shared_by_two_clusters_rebuilds_every_cycle_but_decides_the_same():
    shared = EngineCache()
    snap_a, snap_b = racks_world().snapshot(), flat_world().snapshot()
    for _ in range(2):  # correct, but each cycle finds the other cluster's index and builds its own
        assert decisions(run_cycle(snap_a, cache=shared)) == decisions(run_cycle(snap_a))
        assert decisions(run_cycle(snap_b, cache=shared)) == decisions(run_cycle(snap_b))
    assert shared.builds == 4


def test_cache_follows_a_changed_shape():
    cache = EngineCache()
    world = racks_world()
    run_cycle(world.snapshot(), cache=cache)
    grown = world.node(name="extra", gpus=8, domain="rack1")
    assert decisions(run_cycle(grown.snapshot(), cache=cache)) == decisions(run_cycle(grown.snapshot()))
    assert cache.builds == 2


def test_withdrawal_found_with_the_cache_when_a_job_is_being_evicted():
    """evict.withdrawals looks at the jobs only when the cache's facts count one being evicted: with one
    EngineCache, a cycle with no such job, one whose beneficiary is gone (withdrawn, as without a cache), none."""
    world = World().nodes(count=1, gpus=4, flavor="A100").queue(name="q", quota={"A100": 4})
    world.running(name="lo", nodes=[world.node_infos[0].name], gpus_per_task=2)
    base = world.snapshot()
    releasing = tuple(replace(j, state="preempting", evicted_for="gone") if j.id == "lo" else j for j in base.jobs)
    cache = EngineCache()
    for jobs, expected in ((base.jobs, []), (releasing, ["lo"]), (base.jobs, [])):
        snapshot = replace(base, jobs=jobs)
        cached, fresh = run_cycle(snapshot, cache=cache), run_cycle(snapshot)
        assert [w.job_id for w in cached.withdrawals] == [w.job_id for w in fresh.withdrawals] == expected
        assert cache.scan(snapshot).evicting == len(expected)
