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
