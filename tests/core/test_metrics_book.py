"""The incremental metrics (metrics.MetricsBook, kept in the EngineCache) give exactly the figures of the
full walk (cluster_metrics without a cache), cycle after cycle, as nodes' free and healthy GPU counts
change at random, for the whole cluster and for each node group (metrics_by_group)."""
from __future__ import annotations

import random

from clusterspec.importers import load_cluster
from scheduler.core.cache import EngineCache
from scheduler.core.metrics import cluster_metrics, metrics_by_group
from scheduler.core.state import ClusterState
from scheduler.sim.state import ClusterState as SimState, queue_infos


def test_metrics_book_matches_the_full_walk():
    cluster = load_cluster("philly", scale=0.1)  # 8-GPU and smaller machines: several node groups
    snapshot = SimState(cluster, queue_infos(cluster)).snapshot(0.0)
    cache = EngineCache()
    state = ClusterState(snapshot, cache.static_for(snapshot))
    size = [len(f) for f in state.free]
    rng = random.Random(7)
    seen_partial = False
    for step in range(120):
        for k in rng.sample(range(len(size)), k=rng.choice((1, 3, len(size)))):
            healthy = size[k] if rng.random() < 0.9 else rng.randint(0, size[k])  # some GPUs go bad, or a node down
            state.healthy_gpus[k] = healthy
            state.free[k] = list(range(rng.choice((0, healthy, rng.randint(0, healthy)))))
        held = rng.randint(0, 4)
        got = cluster_metrics(state, held=held, cache=cache)
        assert got == cluster_metrics(state, held=held), step
        assert metrics_by_group(state, got, cache=cache) == metrics_by_group(state), step
        seen_partial |= 0 < got["domain_completeness"] < 1
    assert seen_partial  # the random states exercised partly complete domains
    assert len(metrics_by_group(state)) > 1  # and several node groups
