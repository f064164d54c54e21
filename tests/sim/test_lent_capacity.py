"""The capacity an EngineCache lends to a cycle's ClusterState (no copy; issue 16 sixth round) comes back exactly as
its snapshot had it: after every cycle of replays that place, try and roll back jobs (a Philly slice, its holds and
evictions, and the Helios slice), the kept capacity equals the one computed anew from the snapshot's nodes: each
node's free GPUs (in order), CPU, memory and healthy GPUs, and the per-domain figures and indexes."""
from __future__ import annotations

import pytest

from clusterspec.importers import load_cluster, load_trace
from scheduler.core import CycleConfig, EngineCache, run_cycle
from scheduler.core.state import _snapshot_capacity
from scheduler.sim.replay import replay
from tests.sim.test_replay_digest import helios_slice


def _figures(start) -> tuple:
    nonempty = {k: {f: set(m) for f, m in per.items()} for k, per in start.buckets.items() if per}
    keys = {k: list(v) for k, v in start.bucket_keys.items() if v}
    exact = {k: [set(m) for m in sets] for k, sets in start.exact.items()} if start.exact is not None else None
    return (start.free, start.cpu, start.mem, start.healthy, start.dom_free, start.hist, nonempty, keys, exact)


@pytest.mark.parametrize("name", ["philly", "helios"])
def test_lent_capacity_comes_back_as_the_snapshot_has_it(name: str) -> None:
    cache = EngineCache()
    seen = {"kept": 0, "moved": 0}

    def engine(snapshot, config):
        result = run_cycle(snapshot, config, cache=cache)
        kept = cache._start
        assert kept is not None  # settled: the cache holds the capacity again
        fresh = _snapshot_capacity(cache._static, snapshot.nodes, None, exact=True)
        assert _figures(kept) == _figures(fresh)
        seen["kept"] += 1
        seen["moved"] += bool(result.bindings or result.evictions)
        return result

    if name == "philly":
        replay(load_cluster("philly", scale=0.05), load_trace("philly", start_days=40.0, until_days=40.1),
               engine=engine, time_limit_factor=1.0)
    else:
        cluster, trace = helios_slice(0.1, borrow=False, start=30.4)
        replay(cluster, trace, engine=engine, config=CycleConfig(), cycle_interval=1.0, fairness=False)
    assert seen["kept"] > 100 and seen["moved"] > 20


def test_a_cycle_that_raises_keeps_nothing_it_was_lent(monkeypatch) -> None:
    """A cycle that raises after its ClusterState took GPUs (allocate placed jobs, then failed): the cache keeps
    neither that half-changed capacity nor the reference to it (EngineCache.drop_lent), and the next cycle's
    kept capacity is the snapshot's again."""
    from scheduler.core import cycle as cycle_module
    from scheduler.core.testing import World

    w = World().nodes(count=2, gpus=8, flavor="A10", prefix="A10-").queue(name="q", quota={"A10": 16})
    for i in range(3):
        w.job(name=f"j{i}", queue="q", tasks=1, gpus_per_task=4, flavors=["A10"], submit=float(i))
    snapshot = w.snapshot()
    cache = EngineCache()
    run_cycle(snapshot, cache=cache)  # the capacity kept
    real = cycle_module.allocate

    def failing(session, *args, **kwargs):
        real(session, *args, **kwargs)  # takes GPUs on the lent capacity
        raise RuntimeError("boom")

    monkeypatch.setattr(cycle_module, "allocate", failing)
    with pytest.raises(RuntimeError):
        run_cycle(snapshot, cache=cache)
    assert cache._lent == {}
    monkeypatch.setattr(cycle_module, "allocate", real)
    result = run_cycle(snapshot, cache=cache)
    assert len(result.bindings) == 3
    fresh = _snapshot_capacity(cache._static, snapshot.nodes, None, exact=True)
    assert _figures(cache._start) == _figures(fresh)
